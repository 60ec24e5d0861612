#pragma once
// Attention work under a mask, counted on the CPU from a layout's stream: how many (query, key) pairs
// are visible. Used by the workload_balanced layout (chunk areas) and by the planner (per-rank FLOPs),
// so both count exactly what the CP transports compute and report as visible pairs.
//
// Semantics are sharders/mask.hpp's. Every stream position p carries a mask coordinate pos[p] (its
// position in the input row), a document and a valid flag, and a key k is visible to a query q iff
// valid[k] and
//     causal:           pos[k] <= pos[q]
//     full:             (nothing more)
//     document:         pos[k] <= pos[q] and doc[k] == doc[q]
//     sliding_window w: pos[q] - w < pos[k] <= pos[q]
// Queries are not filtered: a padding query sees whatever valid keys the rule lets it see (the
// transports mask keys only), except under `document`, where unpacked padding belongs to no document.
// Stream metadata mirrors what the runner builds (harness/model/data.cpp, stream_meta): unpacked streams
// hold the documents packed from position 0, then padding (row padding past the documents, then
// layout padding), and pos[p] = p; packed (thd) streams hold each document padded in its own slot,
// pos = the token's row position, pad slots continuing their document's count (so they may share a
// coordinate with the next document's first tokens) and never valid keys.
// Every count is O(1) per query after O(P) preparation, so a whole layout costs O(P).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sharders/layout.hpp"

namespace cpbench::mask_area {

struct Mask {
  enum class Kind { causal, full, document, sliding_window };
  Kind kind = Kind::causal;
  int64_t window = 0;  // sliding_window only, >= 1

  // Accepts what LayoutRequest carries: "causal", "full", "document", "sliding_window" with `window`,
  // or "sliding_window:N". Throws cpbench::UsageError naming the text and listing the known masks.
  [[nodiscard]] static Mask parse(const std::string& text, int64_t window = 0);
  [[nodiscard]] std::string to_string() const;
};

// Per-position metadata of a padded stream of length P.
struct Stream {
  // 16 bytes: coordinates fit in int32 (streams are limited to 2^31 - 1 positions).
  struct Token {
    int32_t pos = 0;     // mask coordinate (row position)
    int32_t doc_lo = 1;  // coordinates of the token's document's real tokens (lo > hi: no document)
    int32_t doc_hi = 0;
    int32_t valid = 0;  // 1: a real token, a key every query may see
  };
  int64_t padded_len = 0;             // P
  std::vector<Token> tokens;          // [P], one record per position (one cache line per lookup)
  std::vector<int64_t> valid_prefix;  // [X + 1]: valid keys with coordinate < x (X = max pos + 1)

  // Coordinates [lo, hi] of the keys q may see under `mask` (before the valid filter; may be empty).
  [[nodiscard]] std::pair<int64_t, int64_t> key_range(const Mask& mask, int64_t q) const {
    const Token& t = tokens[static_cast<size_t>(q)];
    switch (mask.kind) {
      case Mask::Kind::causal:
        return {0, t.pos};
      case Mask::Kind::full:
        return {0, static_cast<int64_t>(valid_prefix.size()) - 2};
      case Mask::Kind::document:
        return {t.doc_lo, std::min(t.pos, t.doc_hi)};
      case Mask::Kind::sliding_window:
        return {t.pos - mask.window + 1, t.pos};
    }
    return {0, t.pos};
  }
  // Keys visible to query q (0 <= q < P) under `mask`. O(1).
  [[nodiscard]] int64_t visible_keys(const Mask& mask, int64_t q) const {
    auto [lo, hi] = key_range(mask, q);
    const int64_t top = static_cast<int64_t>(valid_prefix.size()) - 2;
    lo = lo < 0 ? 0 : lo;
    hi = hi > top ? top : hi;
    return hi < lo ? 0 : valid_prefix[static_cast<size_t>(hi + 1)] - valid_prefix[static_cast<size_t>(lo)];
  }
  [[nodiscard]] int64_t valid_tokens() const { return valid_prefix.back(); }
};

// Unpacked stream: documents `doc_lens` (real lengths, in order) from position 0, padding up to
// `padded_len`. Empty doc_lens: one document of `seq_len` tokens. Requires sum(doc_lens) <= seq_len
// <= padded_len (throws cpbench::Error otherwise).
[[nodiscard]] Stream unpacked_stream(int64_t seq_len, const std::vector<int64_t>& doc_lens, int64_t padded_len);
// Packed stream from a thd layout over documents packed from row position 0: document d occupies
// stream positions [cu_padded[d], cu_padded[d+1]), its first cu_real[d+1] - cu_real[d] are real, and
// stream slot k of it has row coordinate cu_real[d] + k.
[[nodiscard]] Stream packed_stream(const std::vector<int64_t>& cu_real, const std::vector<int64_t>& cu_padded);
// The stream a computed layout partitions: packed when it carries cu_seqlens_padded, else unpacked
// (seq_len = its original_seq_len).
[[nodiscard]] Stream stream_of(const GlobalLayout& layout, const std::vector<int64_t>& doc_lens);

// Visible pairs of the queries [begin, end) (a contiguous run of positions). O(end - begin).
[[nodiscard]] int64_t run_area(const Stream& stream, const Mask& mask, int64_t begin, int64_t end);
// visible[p] = keys visible to query p, for every position, in one sequential pass. O(P).
[[nodiscard]] std::vector<int64_t> visible_per_position(const Stream& stream, const Mask& mask);
// Visible pairs of each rank's queries (against every key). O(P) for the whole layout.
[[nodiscard]] std::vector<int64_t> rank_areas(const GlobalLayout& layout, const Stream& stream, const Mask& mask);
// The same from visible_per_position (reused across layouts that share a stream).
[[nodiscard]] std::vector<int64_t> rank_areas(const GlobalLayout& layout, const std::vector<int64_t>& visible);
// Visible pairs of each rank's queries against its OWN keys only (the local, diagonal block a
// transport computes while the remote keys are in flight). O(P log(P/W)).
[[nodiscard]] std::vector<int64_t> local_block_areas(const GlobalLayout& layout, const Stream& stream,
                                                     const Mask& mask);
// Segments of each rank's local order: maximal runs of consecutive stream positions of one document
// (padding counts as its own document). What a varlen kernel must split the rank's queries into:
// contiguous 1..W, head-tail 2 (per document it touches), striped one per token. O(P).
[[nodiscard]] std::vector<int64_t> rank_segments(const GlobalLayout& layout, const Stream& stream);
// Number of source ranks whose key block has at least one key visible to rank r's queries (blocks a
// block-granular kernel cannot skip), for every r. Causal and full: O(P + W^2); document and
// sliding_window: O(W * P). For the `blocks` kernel model of the planner, meant for small W.
[[nodiscard]] std::vector<int64_t> nonempty_blocks(const GlobalLayout& layout, const Stream& stream, const Mask& mask);

}  // namespace cpbench::mask_area
