#pragma once
// An attention layer's kind (Hugging Face `layer_types`: gpt-oss, Gemma 3, Qwen2's max_window_layers):
// a full layer runs the case's mask, a sliding layer the causal mask cut to a window of N keys
// (MaskSpec sliding_window:N, sharders/mask.hpp: pos[q] - N < pos[k] <= pos[q]). Each kind may run
// its own CP transport (the scenario's `transport_sliding` axis).
#include <cstdint>
#include <string>
#include <vector>

#include "sharders/mask.hpp"

namespace cpbench {

enum class AttentionKind { full, sliding };

// "full_attention", "sliding_attention" (the names `layer_types` uses).
[[nodiscard]] const char* to_string(AttentionKind kind);
// Every name, in enum order.
[[nodiscard]] std::vector<std::string> attention_kind_names();
// Throws UsageError "<where>: unknown attention kind 'x'; known: full_attention, sliding_attention".
[[nodiscard]] AttentionKind parse_attention_kind(const std::string& name, const std::string& where);

// The mask a layer of `kind` runs: `full_mask` (the case's) for a full layer; for a sliding one
// (window >= 1) sliding_window:window under a causal full_mask, document+sliding_window:window (the
// window intersected with the document) under a document one; any other full_mask: UsageError.
[[nodiscard]] MaskSpec layer_mask(AttentionKind kind, const MaskSpec& full_mask, int64_t window);

}  // namespace cpbench
