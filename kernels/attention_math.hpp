#pragma once
// Attention maths shared by the reference path and the CP transports (internal to kernels/).
//
// Conventions: q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], Hq = G * Hkv and query head h reads key/value
// head h / G (the repeat_interleave convention). Masks are bool [B, Sq, Sk], shared by all heads.
// "Compute dtype": float64 stays float64, every other floating dtype computes (scores, softmax,
// partial outputs, log-sum-exp, gradient accumulation) in float32.
//
// Fully masked query rows: output 0, log-sum-exp -inf, gradients 0, never NaN, in every function here.
#include <ATen/ATen.h>

#include <cstdint>

namespace cpbench::kernels {

[[nodiscard]] at::ScalarType compute_dtype(at::ScalarType input);

// Differentiable (ATen autograd) masked attention: the reference. Inputs in any floating dtype;
// `mask` bool [B, Sq, Sk]. Returns [B, Hq, Sq, D] in q's dtype. Expands kv heads with repeat_interleave.
[[nodiscard]] at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& mask, double scale);

// How one (query block, key block) pair is evaluated.
enum class BlockKind {
  empty,   // no visible pair: skipped entirely
  full,    // every pair visible: runs without a mask tensor
  masked,  // runs with the mask
};

struct BlockPlan {
  BlockKind kind = BlockKind::empty;
  // Sub-block trimming: when only some query rows / key columns of the block can see anything
  // (head-tail blocks off the diagonal see exactly half a block), the maths runs on those rows and
  // columns only. Undefined = all. int64 indices into the block's Sq / Sk.
  at::Tensor rows, cols;
  at::Tensor mask;            // bool [B, |rows|, |cols|] when kind == masked, undefined otherwise
  int64_t visible_pairs = 0;  // summed over the batch, per head
  int64_t computed_pairs = 0; // |rows| x |cols| x B: what the kernel actually evaluates
};

// Classifies a bool [B, Sq, Sk] mask (reads one scalar back from the device).
[[nodiscard]] BlockPlan plan_block(const at::Tensor& mask);

// Partial attention of one block. Not differentiable (call under no-grad or from a custom Function).
// q, k, v in the compute dtype; mask undefined (all visible) or bool [B, Sq, Sk].
// Returns out [B, Hq, Sq, D] normalized within the block and lse [B, Hq, Sq], both in the compute dtype.
struct BlockOutput {
  at::Tensor out;
  at::Tensor lse;
};
[[nodiscard]] BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& mask, double scale);
// The same over a plan: runs on the plan's rows / columns and scatters back (rows outside: out 0, lse -inf).
[[nodiscard]] BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const BlockPlan& plan, double scale);

// Online merge: folds a block's (out, lse) into the running (out, lse). An undefined running pair
// takes the block's. Stable when either or both sides are -inf (fully masked so far / in the block).
void merge_block(at::Tensor& out, at::Tensor& lse, const BlockOutput& block);

// Gradients of one block given the MERGED output's quantities (flash-attention backward):
//   P = exp(S - lse), dV = P^T dO, dP = dO V^T, dS = P * (dP - dsum), dQ = dS K * scale, dK = dS^T Q * scale,
// with dK/dV summed over each query-head group. Inputs in the compute dtype:
//   dout [B, Hq, Sq, D], lse [B, Hq, Sq] (global, -inf on fully masked rows), dsum [B, Hq, Sq] = rowsum(dO * O).
// Returns dq [B, Hq, Sq, D], dk and dv [B, Hkv, Sk, D] in the compute dtype.
struct BlockGrads {
  at::Tensor dq;
  at::Tensor dk;
  at::Tensor dv;
};
[[nodiscard]] BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& lse, const at::Tensor& dsum,
                                        const at::Tensor& mask, double scale);
// The same over a plan (gradients outside the plan's rows / columns are 0).
[[nodiscard]] BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& lse, const at::Tensor& dsum,
                                        const BlockPlan& plan, double scale);

}  // namespace cpbench::kernels
