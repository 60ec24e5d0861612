#pragma once
// Attention masks in global coordinates, and the per-token metadata they are evaluated on.
//
// A key k is visible to a query q iff all of:
//   segment[k] == segment[q]              (thd packs several rows into one stream; never cross them)
//   valid[k]                              (padding is never attended to)
//   causal:          pos[k] <= pos[q]
//   full:            (no further condition)
//   document:        doc[k] == doc[q] && pos[k] <= pos[q]    (block-causal over packed documents)
//   sliding_window w: pos[q] - w < pos[k] <= pos[q]          (causal, at most w keys incl. itself)
// A query with no visible key (possible for padding queries) gets output 0 and log-sum-exp -inf.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace cpbench {

struct MaskSpec {
  enum class Kind { causal, full, document, sliding_window };
  Kind kind = Kind::causal;
  int64_t window = 0;  // sliding_window only, >= 1

  // "causal" | "full" | "document" | "sliding_window:N"; throws UsageError naming the text.
  static MaskSpec parse(const std::string& text);
  [[nodiscard]] std::string to_string() const;
};

// Per-token metadata; every tensor is [B, N] int64 (valid: bool), on the device of q/k/v.
// pos is required. An undefined segment means one segment, an undefined doc one document, an
// undefined valid all tokens valid (build_mask treats them so; to/narrow keep them undefined).
struct TokenMeta {
  at::Tensor pos;      // position in the padded global stream
  at::Tensor segment;  // thd: input row of the token; otherwise 0
  at::Tensor doc;      // document id, unique within a segment (0 when there are no documents)
  at::Tensor valid;    // false for padding tokens

  [[nodiscard]] TokenMeta to(const at::Device& device) const;
  [[nodiscard]] TokenMeta narrow(int64_t dim, int64_t start, int64_t length) const;
  [[nodiscard]] int64_t batch() const { return pos.size(0); }
  [[nodiscard]] int64_t tokens() const { return pos.size(1); }
};

// bool [B, Nq, Nk]: true where query i may attend key j.
[[nodiscard]] at::Tensor build_mask(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k);

}  // namespace cpbench
