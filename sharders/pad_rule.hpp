#pragma once
// The pad rule's tensor operations (one rule for every key and every layout; the values per key are
// sharders/sharder.hpp's): right-padding a sequence dim with a fill, and position ids that continue
// counting. Shared with the harness; pad values live here and nowhere else.
#include <ATen/ATen.h>

#include <cstdint>

namespace cpbench {

namespace pad_rule {
// Right-pads `t` on `seq_dim` by `amount` with `fill`.
[[nodiscard]] at::Tensor pad_seq(const at::Tensor& t, int64_t seq_dim, int64_t amount, const at::Scalar& fill);
// position ids: right-pad by continuing to count from the last position.
[[nodiscard]] at::Tensor pad_positions(const at::Tensor& pos, int64_t seq_dim, int64_t amount);
}  // namespace pad_rule

}  // namespace cpbench
