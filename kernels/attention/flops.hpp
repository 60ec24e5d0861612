#pragma once
// The attention FLOP formula, in one place: the transports' AttentionStats, the planner's cost model,
// kernel model and plans all count attention work through attention_flops().
//
// Forward: 4 * D FLOPs per (query, key) pair and query head, so 4 * Hq * D per pair (QK^T and PV, one
// multiply-add = 2 FLOPs per pair and head dimension each). Backward: kBackwardFactor x the forward (the FlashAttention
// convention: its backward does 5 matmuls to the forward's 2); a training step: kStepFactor x.
#include <cstdint>

namespace cpbench {

inline constexpr double kBackwardFactor = 2.5;
inline constexpr double kStepFactor = 1.0 + kBackwardFactor;

enum class AttentionPass { forward, backward, train };

// FLOPs of `pass` over `pairs` (query, key) pairs, summed over the batch, for q_heads query heads of
// head_dim each. `pairs` is a double so callers may pass weighted or fractional pair counts.
[[nodiscard]] double attention_flops(double pairs, int64_t q_heads, int64_t head_dim, AttentionPass pass);

}  // namespace cpbench
