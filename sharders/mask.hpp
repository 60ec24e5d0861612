#pragma once
// The one mask module: one MaskSpec, one parser, one visibility rule. Dense masks (build_mask below),
// the transports' tile classification (kernels/transports/transport_common.cpp) and the layout code's
// area counting (sharders/stream.hpp, sharders/mask_area.hpp) all evaluate the rule through
// MaskSpec's predicates; none of them restates what a mask means.
//
// The rule. A key k is visible to a query q iff all of:
//   valid[k]                                   padding is never attended to
//   segment[k] == segment[q]                   thd packs several rows into one stream; never cross them
//   same_document() => doc[k] == doc[q]        document: block-causal over packed documents
//   has_upper()     => pos[k] <= upper(pos[q]) every mask but full is causal
//   has_lower()     => pos[k] >= lower(pos[q]) sliding_window w: at most w keys, the query included
// So: causal = pos[k] <= pos[q]; full = no position condition; document = causal within the document;
// sliding_window:w = pos[q] - w < pos[k] <= pos[q]. A query with no visible key (possible for padding
// queries) gets output 0 and log-sum-exp -inf.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace cpbench {

struct MaskSpec {
  enum class Kind { causal, full, document, sliding_window };
  Kind kind = Kind::causal;
  int64_t window = 0;  // sliding_window only, >= 1

  // "causal" | "full" | "document" | "sliding_window:N" (or "sliding_window" with `window`).
  // Throws UsageError naming the text and listing the known masks.
  [[nodiscard]] static MaskSpec parse(const std::string& text, int64_t window = 0);
  [[nodiscard]] std::string to_string() const;

  // The rule's predicates (see the top of this file). T is int64_t or an int64 at::Tensor.
  [[nodiscard]] bool has_upper() const { return kind != Kind::full; }
  [[nodiscard]] bool has_lower() const { return kind == Kind::sliding_window; }
  [[nodiscard]] bool same_document() const { return kind == Kind::document; }
  template <typename T>
  [[nodiscard]] T upper(const T& query_pos) const {
    return query_pos;
  }
  template <typename T>
  [[nodiscard]] T lower(const T& query_pos) const {
    return query_pos - (window - 1);
  }
  friend bool operator==(const MaskSpec&, const MaskSpec&) = default;
};

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

// bool [B, Nq, Nk]: true where query i may attend key j (the rule above, densely).
[[nodiscard]] at::Tensor build_mask(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k);

}  // namespace cpbench
