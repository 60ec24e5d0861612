#include "sharders/layout.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

std::vector<int64_t> GlobalLayout::inverse() const {
  std::vector<int64_t> inv(static_cast<size_t>(padded_seq_len), -1);
  int64_t j = 0;
  for (const auto& r : ranks)
    for (int64_t p : r) inv[static_cast<size_t>(p)] = j++;
  return inv;
}

std::vector<int64_t> GlobalLayout::owners() const {
  std::vector<int64_t> own(static_cast<size_t>(padded_seq_len), -1);
  for (size_t r = 0; r < ranks.size(); ++r)
    for (int64_t p : ranks[r]) own[static_cast<size_t>(p)] = static_cast<int64_t>(r);
  return own;
}

namespace layout_math {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

std::vector<int64_t> contiguous(int64_t cp, int64_t P, int64_t rank) {
  const int64_t L = P / cp;
  std::vector<int64_t> out(static_cast<size_t>(L));
  for (int64_t j = 0; j < L; ++j) out[static_cast<size_t>(j)] = rank * L + j;
  return out;
}

std::vector<int64_t> head_tail(int64_t cp, int64_t P, int64_t rank) {
  const int64_t c = P / (2 * cp);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(2 * c));
  for (int64_t j = 0; j < c; ++j) out.push_back(rank * c + j);
  for (int64_t j = 0; j < c; ++j) out.push_back((2 * cp - 1 - rank) * c + j);
  return out;
}

std::vector<int64_t> striped(int64_t cp, int64_t P, int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(P / cp));
  for (int64_t p = rank; p < P; p += cp) out.push_back(p);
  return out;
}

std::vector<int64_t> thd(int64_t cp, const std::vector<int64_t>& cu, int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(cu.empty() ? 0 : static_cast<size_t>(cu.back() / cp));
  for (size_t d = 0; d + 1 < cu.size(); ++d) {
    const int64_t start = cu[d];
    const int64_t n = cu[d + 1] - cu[d];
    const int64_t c = n / (2 * cp);
    for (int64_t j = 0; j < c; ++j) out.push_back(start + rank * c + j);
    for (int64_t j = 0; j < c; ++j) out.push_back(start + (2 * cp - 1 - rank) * c + j);
  }
  return out;
}

int64_t checked_padded_len(const Layout& layout, const LayoutRequest& req) {
  CP_CHECK(req.cp >= 1, layout.name(), ": cp must be a positive integer, got ", req.cp);
  CP_CHECK(req.seq_len >= 1, layout.name(), ": seq_len must be a positive integer, got ", req.seq_len);
  return round_up(req.seq_len, layout.pad_multiple(req.cp));
}

}  // namespace layout_math
}  // namespace cpbench
