#include "sharders/mask_area.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <numeric>
#include <string_view>

#include "sharders/core/check.hpp"

namespace cpbench::mask_area {

namespace {
constexpr int64_t kMaxPositions = int64_t{1} << 31;
constexpr const char* kKnownMasks = "causal, full, document, sliding_window:N (N >= 1)";
constexpr std::string_view kWindowPrefix = "sliding_window:";
}  // namespace

Mask Mask::parse(const std::string& text, int64_t window) {
  Mask m;
  if (text == "causal") {
    m.kind = Kind::causal;
  } else if (text == "full") {
    m.kind = Kind::full;
  } else if (text == "document") {
    m.kind = Kind::document;
  } else if (text == "sliding_window" || text.starts_with(kWindowPrefix)) {
    m.kind = Kind::sliding_window;
    m.window = window;
    if (text != "sliding_window") {
      const std::string_view digits = std::string_view(text).substr(kWindowPrefix.size());
      int64_t w = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), w);
      CP_CHECK_USAGE(!digits.empty() && ec == std::errc() && end == digits.data() + digits.size(), "attention mask '",
                     text, "': the window after 'sliding_window:' must be a positive integer");
      m.window = w;
    }
    CP_CHECK_USAGE(m.window >= 1, "attention mask '", text, "': sliding_window needs a window >= 1, got ", m.window);
  } else {
    throw UsageError(detail::concat("unknown attention mask '", text, "' (known: ", kKnownMasks, ")"));
  }
  return m;
}

std::string Mask::to_string() const {
  switch (kind) {
    case Kind::causal:
      return "causal";
    case Kind::full:
      return "full";
    case Kind::document:
      return "document";
    case Kind::sliding_window:
      return "sliding_window:" + std::to_string(window);
  }
  return "unknown";
}

namespace {
// valid_prefix over the coordinate axis [0, X).
void build_prefix(Stream& s) {
  int64_t X = 0;
  for (const auto& t : s.tokens) X = std::max<int64_t>(X, t.pos + 1);
  s.valid_prefix.assign(static_cast<size_t>(X + 1), 0);
  for (const auto& t : s.tokens)
    if (t.valid) s.valid_prefix[static_cast<size_t>(t.pos + 1)] += 1;
  for (size_t x = 1; x < s.valid_prefix.size(); ++x) s.valid_prefix[x] += s.valid_prefix[x - 1];
}
}  // namespace

Stream unpacked_stream(int64_t seq_len, const std::vector<int64_t>& doc_lens, int64_t padded_len) {
  int64_t real = doc_lens.empty() ? seq_len : 0;
  for (size_t d = 0; d < doc_lens.size(); ++d) {
    CP_CHECK(doc_lens[d] >= 1, "doc_lens[", d, "] must be a positive length, got ", doc_lens[d]);
    real += doc_lens[d];
  }
  CP_CHECK(real <= seq_len, "doc_lens sum to ", real, " tokens, more than seq_len ", seq_len);
  CP_CHECK(seq_len <= padded_len, "seq_len ", seq_len, " exceeds the padded length ", padded_len);
  CP_CHECK(padded_len < kMaxPositions, "a stream of ", padded_len, " positions is too long (at most ",
           kMaxPositions - 1, ")");
  Stream s;
  const auto P = static_cast<size_t>(padded_len);
  s.padded_len = padded_len;
  // Row and layout padding belong to no document (doc id -1 in the runner): an empty key range.
  s.tokens.resize(P);
  for (size_t p = 0; p < P; ++p) s.tokens[p].pos = static_cast<int32_t>(p);
  int64_t start = 0;
  const std::vector<int64_t> docs = doc_lens.empty() ? std::vector<int64_t>{seq_len} : doc_lens;
  for (int64_t len : docs) {
    for (int64_t p = start; p < start + len; ++p) {
      auto& t = s.tokens[static_cast<size_t>(p)];
      t.doc_lo = static_cast<int32_t>(start);
      t.doc_hi = static_cast<int32_t>(start + len - 1);
      t.valid = 1;
    }
    start += len;
  }
  build_prefix(s);
  return s;
}

Stream packed_stream(const std::vector<int64_t>& cu_real, const std::vector<int64_t>& cu_padded) {
  CP_CHECK(!cu_padded.empty() && cu_real.size() == cu_padded.size(), "packed stream: cu_seqlens ", shape_str(cu_real),
           " and cu_seqlens_padded ", shape_str(cu_padded), " must have the same length >= 1");
  Stream s;
  s.padded_len = cu_padded.back();
  CP_CHECK(s.padded_len < kMaxPositions, "a stream of ", s.padded_len, " positions is too long (at most ",
           kMaxPositions - 1, ")");
  s.tokens.resize(static_cast<size_t>(s.padded_len));
  for (size_t d = 0; d + 1 < cu_padded.size(); ++d) {
    const int64_t start = cu_padded[d], end = cu_padded[d + 1], real = cu_real[d + 1] - cu_real[d];
    CP_CHECK(real >= 0 && real <= end - start, "packed stream: document ", d, " has ", real,
             " real tokens in a slot of ", end - start);
    for (int64_t p = start; p < end; ++p) {
      s.tokens[static_cast<size_t>(p)] = {static_cast<int32_t>(cu_real[d] + (p - start)),
                                          static_cast<int32_t>(cu_real[d]), static_cast<int32_t>(cu_real[d + 1] - 1),
                                          p - start < real ? 1 : 0};
    }
  }
  build_prefix(s);
  return s;
}

Stream stream_of(const GlobalLayout& g, const std::vector<int64_t>& doc_lens) {
  if (!g.cu_seqlens_padded.empty()) return packed_stream(g.cu_seqlens, g.cu_seqlens_padded);
  return unpacked_stream(g.original_seq_len, doc_lens, g.padded_seq_len);
}

int64_t run_area(const Stream& s, const Mask& mask, int64_t begin, int64_t end) {
  int64_t a = 0;
  for (int64_t q = begin; q < end; ++q) a += s.visible_keys(mask, q);
  return a;
}

std::vector<int64_t> visible_per_position(const Stream& s, const Mask& mask) {
  std::vector<int64_t> v(static_cast<size_t>(s.padded_len));
  for (int64_t q = 0; q < s.padded_len; ++q) v[static_cast<size_t>(q)] = s.visible_keys(mask, q);
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

std::vector<int64_t> rank_areas(const GlobalLayout& g, const Stream& s, const Mask& mask) {
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

std::vector<int64_t> local_block_areas(const GlobalLayout& g, const Stream& s, const Mask& mask) {
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

std::vector<int64_t> nonempty_blocks(const GlobalLayout& g, const Stream& s, const Mask& mask) {
  const size_t W = g.ranks.size();
  std::vector<int64_t> out(W, 0);
  if (mask.kind == Mask::Kind::causal || mask.kind == Mask::Kind::full) {
    // Block (r, j) is non-empty iff j's lowest valid key coordinate is at or below r's highest query
    // coordinate (causal), or j holds any valid key (full).
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
        out[r] += min_key[j] != kNone && (mask.kind == Mask::Kind::full || min_key[j] <= max_query[r]);
    return out;
  }
  // General rule: a prefix count of j's valid keys over the coordinate axis answers "any key of j in
  // [lo, hi]" in O(1).
  std::vector<int32_t> mine(s.valid_prefix.size());
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

}  // namespace cpbench::mask_area
