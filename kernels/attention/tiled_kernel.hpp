#pragma once
// The tiled block kernel (internal to kernels/): one (query block, key block) pair of attention
// evaluated in kBlockTile cells with plain ATen ops, forward and backward. The fallback of every
// route and the CPU twin of the fused kernels (fused_attention.hpp). Conventions: lse_merge.hpp.
#include <ATen/ATen.h>

#include "kernels/attention/block_plan.hpp"
#include "kernels/attention/lse_merge.hpp"

namespace cpbench::kernels {

// FlashAttention-2's roundings, modelled on the tiled kernel (flash-numerics mode: the CPU stands in
// for a GPU's bf16 / fp16 flash kernels, docs/correctness.md "Flash numerics"). With `to` a 16-bit
// dtype, the kernel computes in float32 as always but rounds to `to` exactly where FA2 (torch 2.11's
// flash kernels, sm80 code) holds 16-bit operands:
//   forward:  P = exp(S - m) is rounded before P·V (the row sum l takes the unrounded P), and the
//             block's normalized output O is rounded (the kernel writes O in the input dtype);
//   backward: D = rowsum(dO * O) reads the rounded merged O; P = exp(S - lse) is rounded before
//             dV = P^T dO; dS = P * (dP - D) (from the unrounded P) is rounded before dQ = dS K and
//             dK = dS^T Q; dQ, dK, dV are rounded once at the end of the block (the kernel's outputs).
// The max m is the piece's (kScoreBudget), where FA2 uses its running max over 128-key tiles: the
// same rounding points on values scaled by another per-row constant (exp(m_FA2 - m)), so not
// bit-identical; the same error distribution. Undefined `to` (the default): no rounding, the tiled
// kernel's exact maths.
struct FlashRounding {
  at::ScalarType to = at::ScalarType::Undefined;
  [[nodiscard]] bool on() const { return to != at::ScalarType::Undefined; }
  // `t` rounded to `to` and back to its own dtype (a copy); `t` itself when off.
  [[nodiscard]] at::Tensor operator()(const at::Tensor& t) const { return on() ? t.to(to).to(t.scalar_type()) : t; }
};

// Partial attention of one block. Not differentiable (call under no-grad or from a custom Function).
// q, k, v in the compute dtype; mask undefined (all visible) or bool [B, Sq, Sk]. A masked block is
// evaluated cell by cell (kBlockTile), the cells of a query tile merged along the keys with the
// log-sum-exp merge below: the same result as one dense evaluation, up to rounding.
// Returns out [B, Hq, Sq, D] normalized within the block and lse [B, Hq, Sq], both in the compute dtype.
[[nodiscard]] BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& mask, double scale);
// The same over a plan: runs on the plan's rows / columns and cells and scatters back (rows outside:
// out 0, lse -inf).
[[nodiscard]] BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const BlockPlan& plan, double scale, FlashRounding rounding = {});

// Gradients of one block given the MERGED output's quantities (flash-attention backward):
//   P = exp(S - lse), dV = P^T dO, dP = dO V^T, dS = P * (dP - dsum), dQ = dS K * scale, dK = dS^T Q * scale,
// with dK/dV summed over each query-head group. Inputs in the compute dtype:
//   dout [B, Hq, Sq, D], lse [B, Hq, Sq] (global, -inf on fully masked rows), dsum [B, Hq, Sq] = rowsum(dO * O).
// Returns dq [B, Hq, Sq, D], dk and dv [B, Hkv, Sk, D] in the compute dtype. Masked blocks are
// evaluated cell by cell like block_forward (dQ accumulated per query tile, dK/dV per key tile).
[[nodiscard]] BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& lse, const at::Tensor& dsum,
                                        const at::Tensor& mask, double scale);
// The same over a plan (gradients outside the plan's rows / columns / non-empty cells are 0).
// With `rounding` on, `dsum` must be rowsum(dO * rounding(O)) (FA2 reads the 16-bit O).
[[nodiscard]] BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& lse, const at::Tensor& dsum,
                                        const BlockPlan& plan, double scale, FlashRounding rounding = {});

}  // namespace cpbench::kernels
