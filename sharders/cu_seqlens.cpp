#include "sharders/cu_seqlens.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"
#include "sharders/token_map.hpp"

namespace cpbench {

at::Tensor write_cu_seqlens(const std::vector<int64_t>& cu, const std::vector<int64_t>& doc_chunk, int64_t num_chunks,
                            int64_t sentinel, const at::Device& device) {
  if (num_chunks == 1) return as_index_tensor(cu, device).to(at::kInt);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(num_chunks));
  for (size_t d = 0; d < doc_chunk.size(); ++d) {
    auto& row = rows[static_cast<size_t>(doc_chunk[d])];
    if (row.empty()) row.push_back(0);
    row.push_back(row.back() + cu[d + 1] - cu[d]);
  }
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  at::Tensor t = at::full({num_chunks, static_cast<int64_t>(width)}, sentinel, at::kLong);
  for (size_t c = 0; c < rows.size(); ++c) std::copy(rows[c].begin(), rows[c].end(), t.data_ptr<int64_t>() + c * width);
  return t.to(device, at::kInt);
}

std::vector<int64_t> read_cu_seqlens(const at::Tensor& t, int64_t num_chunks, int64_t sentinel,
                                     const std::string& who) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  const std::vector<int64_t> v(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  if (num_chunks == 1) return v;
  CP_CHECK(t.dim() == 2 && t.size(0) == num_chunks, who,
           ": chunked cu_seqlens must be [num_chunks, D + 1] with num_chunks=", num_chunks, ", got ",
           shape_str(t.sizes()));
  std::vector<int64_t> out{0};
  const int64_t width = t.size(1);
  int64_t base = 0;
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    int64_t last = 0;
    for (int64_t k = 1; k < width; ++k) {
      const int64_t x = v[static_cast<size_t>(chunk * width + k)];
      if (x == sentinel) break;
      out.push_back(base + x);
      last = x;
    }
    base += last;
  }
  return out;
}

}  // namespace cpbench
