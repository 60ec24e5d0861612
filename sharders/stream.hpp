#pragma once
// Stream metadata: the one producer of what each position of a padded global stream is — its mask
// coordinate (row position), input row (segment), document, and whether it is a real token or
// padding. The Sharder derives the batch's padding_mask, thd cu_seqlens and the attention metadata
// from it (Sharder::attention_meta); the layout code counts attention work on it (mask_area.hpp,
// workload_balanced); `cpbench layout` marks padding with it. Nothing else derives these facts.
//
// Coordinates. Unpacked streams hold the row as given: documents from their row offsets, padding
// (input padding, then the layout's right padding) with pos[p] = p. Packed (thd) streams hold each
// document padded in its own slot, documents in order; pos = the token's position in its input row,
// pad slots continuing their document's count (they may share a coordinate with the next document's
// first tokens, and are never valid keys).
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "sharders/layout.hpp"
#include "sharders/mask.hpp"

namespace cpbench {

struct Stream {
  // 24 bytes: coordinates fit in int32 (streams are limited to 2^31 - 1 positions).
  struct Token {
    int32_t pos = 0;      // mask coordinate (row position)
    int32_t segment = 0;  // input row (thd); 0 for unpacked streams
    int32_t doc = -1;     // document index in the stream (thd: also on the document's pad slots); -1 = none
    int32_t doc_lo = 1;   // coordinates of the document's real tokens (lo > hi: no document)
    int32_t doc_hi = 0;
    int32_t valid = 0;    // 1: a real token, a key every query may see
  };
  int64_t padded_len = 0;             // P
  std::vector<Token> tokens;          // [P], one record per position
  int64_t extent = 0;                 // X = max pos + 1: the coordinate axis of every segment
  int64_t segments = 1;               // G = max segment + 1
  // [G * (X + 1)]: at g * (X + 1) + x, the valid keys of segment g with coordinate < x.
  std::vector<int64_t> valid_prefix;
  // Block-level counts that compare coordinates across ranks' keys (mask_area's local_block_areas,
  // nonempty_blocks, BlockAreas) need one segment; per-query counts (visible_keys, work_keys) do not.
  bool single_segment = true;

  // Coordinates [lo, hi] of the keys q may see under `mask` (MaskSpec::key_window, with `same document`
  // as the document's coordinate range; before the valid filter; may be empty).
  [[nodiscard]] std::pair<int64_t, int64_t> key_range(const MaskSpec& mask, int64_t q) const {
    const Token& t = tokens[static_cast<size_t>(q)];
    const MaskSpec::Window<int64_t> w = mask.key_window<int64_t>(t.pos);
    int64_t lo = w.lo.value_or(0);
    int64_t hi = w.hi.value_or(extent - 1);
    if (mask.same_document()) {
      lo = std::max<int64_t>(lo, t.doc_lo);
      hi = std::min<int64_t>(hi, t.doc_hi);
    }
    return {lo, hi};
  }
  // Keys visible to query q (0 <= q < P) under `mask` (keys of q's segment only). O(1).
  [[nodiscard]] int64_t visible_keys(const MaskSpec& mask, int64_t q) const {
    auto [lo, hi] = key_range(mask, q);
    const int64_t top = extent - 1;
    lo = lo < 0 ? 0 : lo;
    hi = hi > top ? top : hi;
    const size_t base = static_cast<size_t>(tokens[static_cast<size_t>(q)].segment) * static_cast<size_t>(extent + 1);
    return hi < lo ? 0 : valid_prefix[base + static_cast<size_t>(hi + 1)] - valid_prefix[base + static_cast<size_t>(lo)];
  }
  // THE rule of what counts as attention work (sharders/mask.hpp, "Work"): the keys visible to q when q
  // is a real token, else 0. O(1).
  [[nodiscard]] int64_t work_keys(const MaskSpec& mask, int64_t q) const {
    return tokens[static_cast<size_t>(q)].valid ? visible_keys(mask, q) : 0;
  }
  // Real tokens of the stream (every segment).
  [[nodiscard]] int64_t valid_tokens() const;
  // int64 [1, n] tensors of the positions `positions` (pos, segment, doc; valid as bool), on the CPU.
  [[nodiscard]] TokenMeta token_meta(const std::vector<int64_t>& positions) const;
};

// A document of an input row: where it starts in the row, how many real tokens it has, and the
// width of its slot in the row (>= real; the rest of the slot is padding).
struct DocSpan {
  int64_t row = 0, offset = 0, real = 0, slot = 0;
};

// Unpacked stream of one row of `seq_len` tokens right-padded to `padded_len`: documents `docs` (their
// row offsets and real lengths; positions outside every document are padding); `input_padding` (optional,
// [seq_len], non-zero = padding) marks further positions invalid. Throws cpbench::Error on documents
// outside the row or overlapping, or seq_len > padded_len.
[[nodiscard]] Stream unpacked_stream(int64_t seq_len, const std::vector<DocSpan>& docs, int64_t padded_len,
                                     const uint8_t* input_padding = nullptr);
// The same with documents packed from position 0 with these real lengths (empty: one document
// filling the row).
[[nodiscard]] Stream unpacked_stream(int64_t seq_len, const std::vector<int64_t>& doc_lens, int64_t padded_len);

// Packed (thd) stream: document d occupies [cu_padded[d], cu_padded[d+1]) and is docs[d] of the input
// rows (`row_len` tokens each); its first docs[d].real positions are real tokens unless
// `input_padding` ([B * row_len], non-zero = padding) says otherwise. `cu_real` (cumulative real
// lengths, what the shard returns as cu_seqlens) must agree with docs[d].real: the stream is built
// from the THD metadata a consumer is handed, and a disagreement throws naming the document.
[[nodiscard]] Stream packed_stream(const std::vector<DocSpan>& docs, const std::vector<int64_t>& cu_real,
                                   const std::vector<int64_t>& cu_padded, int64_t row_len,
                                   const uint8_t* input_padding = nullptr);
// Packed stream of documents packed back to back in one row from position 0 (slot = real length).
[[nodiscard]] Stream packed_stream(const std::vector<int64_t>& cu_real, const std::vector<int64_t>& cu_padded);

// Input rows back to back in one stream (a data-dependent layout over a batch, GlobalLayout::rows):
// row b's positions keep their coordinates and become segment b; document ids are renumbered to be
// unique over the stream. Every row must be as long as the first.
[[nodiscard]] Stream rows_stream(const std::vector<Stream>& rows);

// The stream a computed layout partitions: packed when it carries cu_seqlens_padded; unpacked with
// `doc_lens` packed from position 0 (seq_len = its original_seq_len); for a layout over several rows
// (layout.rows > 1), the rows' streams back to back, row b's documents `rows[b]`.
[[nodiscard]] Stream stream_of(const GlobalLayout& layout, const std::vector<int64_t>& doc_lens,
                               const std::vector<std::vector<int64_t>>& rows = {});

}  // namespace cpbench
