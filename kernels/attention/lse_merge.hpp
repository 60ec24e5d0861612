#pragma once
// Partial attention results of one (query block, key block) pair and the log-sum-exp merge that folds
// them into a running result (internal to kernels/). The block kernels (tiled_kernel.hpp,
// fused_attention.hpp) produce them; the transports merge them block by block.
//
// Conventions: q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], Hq = G * Hkv and query head h reads key/value
// head h / G (the repeat_interleave convention). Masks are bool [B, Sq, Sk], shared by all heads.
// "Compute dtype": float64 stays float64, every other floating dtype computes (scores, softmax,
// partial outputs, log-sum-exp, gradient accumulation) in float32.
//
// Fully masked query rows: output 0, log-sum-exp -inf, gradients 0, never NaN, in every kernel.
#include <ATen/ATen.h>

#include <limits>

namespace cpbench::kernels {

// The log-sum-exp of an empty set (a fully masked row) and the score of a masked pair.
inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

[[nodiscard]] at::ScalarType compute_dtype(at::ScalarType input);

// A block's partial attention: out [B, Hq, Sq, D] normalized within the block and lse [B, Hq, Sq],
// both in the compute dtype.
struct BlockOutput {
  at::Tensor out;
  at::Tensor lse;
};
// A block's gradients: dq [B, Hq, Sq, D], dk and dv [B, Hkv, Sk, D], in the compute dtype.
struct BlockGrads {
  at::Tensor dq;
  at::Tensor dk;
  at::Tensor dv;
};

// Online merge: folds a block's (out, lse) into the running (out, lse). An undefined running pair
// takes the block's. Stable when either or both sides are -inf (fully masked so far / in the block).
void merge_block(at::Tensor& out, at::Tensor& lse, const BlockOutput& block);

// x with -inf, +inf and NaN replaced by 0 in one ATen call: a fully masked row's -inf max or lse as a
// shift, so `x - shift` never evaluates (-inf) - (-inf).
[[nodiscard]] at::Tensor finite_or_zero(const at::Tensor& x);

}  // namespace cpbench::kernels
