#include "kernels/mixers/attention/attention_kind.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

const char* to_string(AttentionKind kind) {
  return kind == AttentionKind::sliding ? "sliding_attention" : "full_attention";
}

std::vector<std::string> attention_kind_names() {
  return {to_string(AttentionKind::full), to_string(AttentionKind::sliding)};
}

AttentionKind parse_attention_kind(const std::string& name, const std::string& where) {
  for (AttentionKind k : {AttentionKind::full, AttentionKind::sliding})
    if (name == to_string(k)) return k;
  throw UsageError(
      detail::concat(where, ": unknown attention kind '", name, "'; known: full_attention, sliding_attention"));
}

MaskSpec layer_mask(AttentionKind kind, const MaskSpec& full_mask, int64_t window) {
  if (kind == AttentionKind::full) return full_mask;
  CP_CHECK(window >= 1, "a sliding_attention layer needs a window >= 1, got ", window);
  CP_CHECK_USAGE(full_mask.kind == MaskSpec::Kind::causal || full_mask.kind == MaskSpec::Kind::document,
                 "sliding_attention layers: the window has a twin under a causal or a document mask only, got ",
                 full_mask.to_string());
  return MaskSpec{MaskSpec::Kind::sliding_window, window, full_mask.kind == MaskSpec::Kind::document};
}

}  // namespace cpbench
