#include "sharders/mask_area.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "sharders/core/check.hpp"

namespace cpbench::mask_area {

int64_t run_area(const Stream& s, const MaskSpec& mask, int64_t begin, int64_t end) {
  int64_t a = 0;
  for (int64_t q = begin; q < end; ++q) a += s.work_keys(mask, q);
  return a;
}

std::vector<int64_t> visible_per_position(const Stream& s, const MaskSpec& mask) {
  std::vector<int64_t> v(static_cast<size_t>(s.padded_len));
  for (int64_t q = 0; q < s.padded_len; ++q) v[static_cast<size_t>(q)] = s.work_keys(mask, q);
  return v;
}

std::vector<int64_t> rank_areas(const GlobalLayout& g, const std::vector<int64_t>& visible) {
  std::vector<int64_t> out;
  out.reserve(g.ranks.size());
  for (const auto& r : g.ranks) {
    int64_t a = 0;
    for (int64_t q : r) a += visible[static_cast<size_t>(q)];
    out.push_back(a);
  }
  return out;
}

std::vector<int64_t> rank_areas(const GlobalLayout& g, const Stream& s, const MaskSpec& mask) {
  return rank_areas(g, visible_per_position(s, mask));
}

namespace {
// First element >= x, searching forward from `it` when x did not decrease since the last call
// (amortized O(1) over the ascending runs layouts produce), else by bisection.
std::vector<int64_t>::const_iterator seek(const std::vector<int64_t>& v, std::vector<int64_t>::const_iterator it,
                                          int64_t x, int64_t& last) {
  if (x >= last) {
    while (it != v.end() && *it < x) ++it;
  } else {
    it = std::lower_bound(v.begin(), it, x);
  }
  last = x;
  return it;
}
}  // namespace

std::vector<int64_t> local_block_areas(const GlobalLayout& g, const Stream& s, const MaskSpec& mask) {
  std::vector<int64_t> out;
  out.reserve(g.ranks.size());
  std::vector<int64_t> keys;
  for (const auto& r : g.ranks) {
    keys.clear();
    for (int64_t p : r) {
      const auto& t = s.tokens[static_cast<size_t>(p)];
      if (t.valid) keys.push_back(t.pos);
    }
    if (!std::is_sorted(keys.begin(), keys.end())) std::sort(keys.begin(), keys.end());
    int64_t a = 0, last_lo = std::numeric_limits<int64_t>::min(), last_hi = last_lo;
    auto lo_it = keys.cbegin(), hi_it = keys.cbegin();  // first key >= lo, first key > hi
    for (int64_t q : r) {
      if (!s.tokens[static_cast<size_t>(q)].valid) continue;  // padding queries are no work
      const auto [lo, hi] = s.key_range(mask, q);
      if (hi < lo) continue;
      lo_it = seek(keys, lo_it, lo, last_lo);
      hi_it = seek(keys, hi_it, hi + 1, last_hi);
      a += std::max<std::ptrdiff_t>(0, hi_it - lo_it);
    }
    out.push_back(a);
  }
  return out;
}

std::vector<int64_t> rank_segments(const GlobalLayout& g, const Stream& s) {
  std::vector<int64_t> out;
  out.reserve(g.ranks.size());
  for (const auto& r : g.ranks) {
    int64_t n = 0;
    for (size_t i = 0; i < r.size(); ++i)
      n += i == 0 || r[i] != r[i - 1] + 1 ||
           s.tokens[static_cast<size_t>(r[i])].doc_lo != s.tokens[static_cast<size_t>(r[i - 1])].doc_lo;
    out.push_back(n);
  }
  return out;
}

std::vector<int64_t> nonempty_blocks(const GlobalLayout& g, const Stream& s, const MaskSpec& mask) {
  const size_t W = g.ranks.size();
  std::vector<int64_t> out(W, 0);
  if (!mask.has_lower() && !mask.same_document()) {
    // Only the upper bound (if any) constrains positions: block (r, j) is non-empty iff j's lowest
    // valid key coordinate is within upper() of r's highest query coordinate (or j holds any valid key).
    constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> min_key(W, kNone), max_query(W, -1);
    for (size_t j = 0; j < W; ++j)
      for (int64_t p : g.ranks[j]) {
        const auto& t = s.tokens[static_cast<size_t>(p)];
        if (t.valid) min_key[j] = std::min<int64_t>(min_key[j], t.pos);
        max_query[j] = std::max<int64_t>(max_query[j], t.pos);
      }
    for (size_t r = 0; r < W; ++r)
      for (size_t j = 0; j < W; ++j)
        out[r] += min_key[j] != kNone && position_test(mask, max_query[r], max_query[r], min_key[j], min_key[j], false)
                                             .some.value_or(true);
    return out;
  }
  // General rule: a prefix count of j's valid keys over the coordinate axis answers "any key of j in
  // [lo, hi]" in O(1).
  std::vector<int32_t> mine(static_cast<size_t>(s.extent + 1));
  const int64_t top = static_cast<int64_t>(mine.size()) - 2;
  for (size_t j = 0; j < W; ++j) {
    std::fill(mine.begin(), mine.end(), 0);
    for (int64_t p : g.ranks[j]) {
      const auto& t = s.tokens[static_cast<size_t>(p)];
      if (t.valid) mine[static_cast<size_t>(t.pos + 1)] = 1;
    }
    for (size_t x = 1; x < mine.size(); ++x) mine[x] += mine[x - 1];
    for (size_t r = 0; r < W; ++r)
      for (int64_t q : g.ranks[r]) {
        auto [lo, hi] = s.key_range(mask, q);
        lo = std::max<int64_t>(lo, 0);
        hi = std::min(hi, top);
        if (hi >= lo && mine[static_cast<size_t>(hi + 1)] > mine[static_cast<size_t>(lo)]) {
          ++out[r];
          break;
        }
      }
  }
  return out;
}

BlockAreas::BlockAreas(const GlobalLayout& g, const Stream& s, const MaskSpec& mask)
    : layout_(&g), stream_(&s), mask_(mask) {
  keys_.resize(g.ranks.size());
  for (size_t j = 0; j < g.ranks.size(); ++j) {
    auto& k = keys_[j];
    for (int64_t p : g.ranks[j]) {
      const auto& t = s.tokens[static_cast<size_t>(p)];
      if (t.valid) k.push_back(t.pos);
    }
    if (!std::is_sorted(k.begin(), k.end())) std::sort(k.begin(), k.end());
  }
}

std::vector<BlockArea> BlockAreas::of_rank(int64_t r) const {
  const Stream& s = *stream_;
  // The visible coordinate range of each query with any range at all, ordered by its lower end: the
  // union of ranges (keys) then needs one pass, and the lower pointer only moves forward.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ranges.reserve(layout_->ranks[static_cast<size_t>(r)].size());
  for (int64_t q : layout_->ranks[static_cast<size_t>(r)]) {
    const auto range = s.key_range(mask_, q);
    if (range.second >= range.first) ranges.push_back(range);
  }
  if (!std::is_sorted(ranges.begin(), ranges.end())) std::sort(ranges.begin(), ranges.end());
  bool upper_monotone = true;
  for (size_t i = 1; i < ranges.size() && upper_monotone; ++i) upper_monotone = ranges[i].second >= ranges[i - 1].second;

  std::vector<BlockArea> out(keys_.size());
  for (size_t j = 0; j < keys_.size(); ++j) {
    const auto& k = keys_[j];
    BlockArea& b = out[j];
    auto lo_it = k.cbegin(), hi_it = k.cbegin();
    std::ptrdiff_t reach = 0;  // keys [0, reach) are already counted as seen
    for (const auto& [lo, hi] : ranges) {
      while (lo_it != k.cend() && *lo_it < lo) ++lo_it;
      if (upper_monotone) {
        if (hi_it < lo_it) hi_it = lo_it;
        while (hi_it != k.cend() && *hi_it <= hi) ++hi_it;
      } else {
        hi_it = std::upper_bound(lo_it, k.cend(), hi);
      }
      const std::ptrdiff_t a = lo_it - k.cbegin(), e = hi_it - k.cbegin();
      if (e <= a) continue;
      b.pairs += e - a;
      ++b.rows;
      b.keys += std::max<std::ptrdiff_t>(0, e - std::max(a, reach));
      reach = std::max(reach, e);
    }
  }
  return out;
}

}  // namespace cpbench::mask_area
