#include "sharders/pad_rule.hpp"

#include <vector>

namespace cpbench {

namespace pad_rule {

at::Tensor pad_seq(const at::Tensor& t, int64_t seq_dim, int64_t amount, const at::Scalar& fill) {
  if (amount == 0) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[static_cast<size_t>(seq_dim)] = amount;
  return at::cat({t, at::full(shape, fill, t.options())}, seq_dim);
}

at::Tensor pad_positions(const at::Tensor& pos, int64_t seq_dim, int64_t amount) {
  if (amount == 0) return pos;
  const int64_t n = pos.size(seq_dim);
  at::Tensor last = pos.narrow(seq_dim, n - 1, 1);
  std::vector<int64_t> view(static_cast<size_t>(pos.dim()), 1);
  view[static_cast<size_t>(seq_dim)] = amount;
  at::Tensor steps = at::arange(1, amount + 1, pos.options()).view(view);
  return at::cat({pos, last + steps}, seq_dim);
}

}  // namespace pad_rule

}  // namespace cpbench
