#pragma once
// The one mask module: one MaskSpec, one parser, one visibility rule. The rule is written once:
// MaskSpec::key_window (which key coordinates a query coordinate sees), position_test (the
// coordinate comparison, over single tokens or bounds of tiles) and visibility (the whole rule on
// tensors: coordinates, segments, documents, padding). Dense masks (build_mask below), the
// transports' tile classification (kernels/attention/plan_cache.cpp) and the layout code's area
// counting (sharders/stream.hpp key_range, sharders/mask_area.cpp) all call them; none of them
// restates what a mask means.
//
// The rule. A key k is visible to a query q iff all of:
//   valid[k]                                   padding is never attended to
//   segment[k] == segment[q]                   thd packs several rows into one stream; never cross them
//   same_document() => doc[k] == doc[q]        document (and a window within documents): never across a
//                                              document's boundary
//   lo <= pos[k] <= hi, [lo, hi] = key_window(pos[q]) (a side absent: unbounded)
//     hi = pos[q] for every mask but full (causal); lo = pos[q] - (w - 1) for sliding_window w (at most
//     w keys, the query included)
// So: causal = pos[k] <= pos[q]; full = no position condition; document = causal within the document;
// sliding_window:w = pos[q] - w < pos[k] <= pos[q]; document+sliding_window:w = the window intersected
// with the document (a sliding_attention layer under packed documents). A query with no visible key (possible for padding
// queries) gets output 0 and log-sum-exp -inf.
//
// Work. What counts as the model's attention work (FLOPs, MFU, the planner's per-rank pairs, the
// workload_balanced areas) is the visible pairs whose query is a real token too: valid[q] && visible(q, k).
// Padding queries are hardware work only: the kernels compute them (the "computed" FLOPs count them),
// the model does not. So a layout that pads more (thd's per-document slots) does the same work.
// Stream::work_keys (sharders/stream.hpp) and BlockPlan::work_pairs (kernels/attention) evaluate it.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace cpbench {

struct MaskSpec {
  enum class Kind { causal, full, document, sliding_window };
  Kind kind = Kind::causal;
  int64_t window = 0;  // sliding_window only, >= 1
  // sliding_window only: the window within each document too (the window intersected with the document
  // mask: a sliding_attention layer's mask when the full layers' is `document`).
  bool documents = false;

  // "causal" | "full" | "document" | "sliding_window:N" (or "sliding_window" with `window`) |
  // "document+sliding_window:N" (documents = true).
  // Throws UsageError naming the text and listing the known masks.
  [[nodiscard]] static MaskSpec parse(const std::string& text, int64_t window = 0);
  [[nodiscard]] std::string to_string() const;

  // Which conditions of the rule (top of this file) the mask has.
  [[nodiscard]] bool has_upper() const { return kind != Kind::full; }
  [[nodiscard]] bool has_lower() const { return kind == Kind::sliding_window; }
  [[nodiscard]] bool same_document() const { return kind == Kind::document || (kind == Kind::sliding_window && documents); }

  // The key coordinates [lo, hi] a query at coordinate `query_pos` may see (before the segment,
  // document and valid conditions); an absent side is unbounded. Both sides are non-decreasing in
  // query_pos, which makes bounds over tiles exact (position_test). T: int64_t or an int64 at::Tensor.
  template <typename T>
  struct Window {
    std::optional<T> lo, hi;
  };
  // Defined in mask.cpp for int64_t and at::Tensor.
  template <typename T>
  [[nodiscard]] Window<T> key_window(const T& query_pos) const;
  friend bool operator==(const MaskSpec&, const MaskSpec&) = default;
};

// THE coordinate comparison of the rule, for queries with coordinates in [q_lo, q_hi] against keys
// with coordinates in [k_lo, k_hi] (single tokens: lo == hi). T: int64_t (results bool) or int64
// at::Tensors that broadcast (results bool tensors). `some`: false where no pair within the bounds can
// be visible; `every`: true where every pair is; both exact for single tokens. Absent: the mask has no
// coordinate condition (every pair passes). with_every = false leaves `every` absent.
template <typename T>
struct PositionTest {
  using Result = std::decay_t<decltype(std::declval<const T&>() <= std::declval<const T&>())>;
  std::optional<Result> some, every;
};
// Defined in mask.cpp for int64_t and at::Tensor.
template <typename T>
[[nodiscard]] PositionTest<T> position_test(const MaskSpec& mask, const T& q_lo, const T& q_hi, const T& k_lo,
                                            const T& k_hi, bool with_every = true);

// Per-token metadata; every tensor is [B, N] int64 (valid: bool), on the device of q/k/v.
// pos is required. An undefined segment means one segment, an undefined doc one document, an
// undefined valid all tokens valid (build_mask treats them so; to/narrow keep them undefined).
// Produced by the sharder (Sharder::attention_meta) from sharders/stream.hpp; never rebuilt elsewhere.
struct TokenMeta {
  at::Tensor pos;      // mask coordinate: position in the input row (thd: new pad slots continue counting)
  at::Tensor segment;  // thd: input row of the token; otherwise 0
  at::Tensor doc;      // document id, unique within a segment (-1: no document)
  at::Tensor valid;    // false for padding tokens

  [[nodiscard]] TokenMeta to(const at::Device& device) const;
  [[nodiscard]] TokenMeta narrow(int64_t dim, int64_t start, int64_t length) const;
  [[nodiscard]] TokenMeta index_select(int64_t dim, const at::Tensor& index) const;
  [[nodiscard]] int64_t batch() const { return pos.size(0); }
  [[nodiscard]] int64_t tokens() const { return pos.size(1); }
};

// Bounds of the rule's inputs over groups of tokens (one token: lo and hi the same tensor), int64
// tensors that broadcast against the other side's: queries [B, Nq, 1], keys [B, 1, Nk]. Undefined
// segment / doc: one segment / document. valid_any / valid_all (keys only; undefined: all valid): some
// / every key of the group is valid.
struct RuleBounds {
  at::Tensor pos_lo, pos_hi, segment_lo, segment_hi, doc_lo, doc_hi;
  at::Tensor valid_any, valid_all;
};
// The whole rule on bounds, bool [B, Nq, Nk]: `some` false where no (query, key) pair of the groups
// can be visible, `every` true where every pair is (undefined unless with_every). Exact for single
// tokens, where some == every.
struct Visibility {
  at::Tensor some, every;
};
[[nodiscard]] Visibility visibility(const MaskSpec& mask, const RuleBounds& q, const RuleBounds& k, bool with_every);

// bool [B, Nq, Nk]: true where query i may attend key j (the rule above, densely: visibility() of
// single tokens).
[[nodiscard]] at::Tensor build_mask(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k);

}  // namespace cpbench
