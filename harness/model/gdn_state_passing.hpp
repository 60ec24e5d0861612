#pragma once
// State-passing context parallelism for the Gated DeltaNet layer (gdn_cp: state_passing; the zigzag
// state chain of flash-linear-attention PR #1221, Megatron-LM #3282). The sequence stays split as the
// layout split it; the chunk plan is the Mamba one (make_state_passing_plan, ssm_state_passing.hpp: the
// same chunks, stream order, conv sources and halo rows, the same reset and carry masks).
//
// Per layer, on each rank:
//   1. conv: each token's K-1 earlier real tokens of its group; those of another rank come from one
//      all-gather of every chunk's last K-1 real conv inputs (the halo, [slots, R, K-1, conv_channels]).
//   2. each own chunk (maximal run of consecutive stream positions) runs the chunked delta rule
//      (gdn_chunk_scan) from a zero state, with dk extra value columns started from the identity: the
//      recurrence is linear column by column, so those columns give, at the chunk's end, its transition
//      T_c (the product over its tokens of exp(g_t)(I - beta_t k_t k_t^T), [Hv, dk, dk]) and, at each token,
//      its readout r_t = T_{start..t}^T q_t (what the incoming state adds: S_in^T r_t). The value columns
//      give the contribution C_c (the state after the chunk from a zero start, [Hv, dk, dv]).
//      T_c is 0 where the chunk holds a reset (a document start) or starts one (the plan's carry mask).
//   3. one all-gather of every chunk's pair [T_c | C_c] ([slots, R, Hv, dk, dk + dv], in the accumulator
//      dtype: float32 for bfloat16 / float16 activations).
//   4. every rank composes along the stream, S_after(c) = T_c S_after(c-1) + C_c, in stream order
//      (StatePassingPlan::stream_order, not rank order), and takes the state arriving at each own chunk.
//   5. correction: a token that no reset separates from its chunk's start (the plan's prefix mask) adds
//      S_in^T r_t.
// Both all-gathers are all_gather_autograd: their backward reduce-scatters dL/d(pair) and dL/d(halo) to
// the chunks they came from. Bytes per rank: gdn_cp_costs.hpp (no S in it).
#include <ATen/ATen.h>

#include "harness/model/gdn.hpp"

namespace cpbench {

// The delta-rule part of one layer under state passing: proj [R, L, in_proj_width] -> o [R, L, Hv*dv]
// before the gated norm. Collective over ctx.comm (two all-gathers forward, two reduce-scatters
// backward; K = 1: one each). ctx.state_passing must be set (cp_gdn_context builds it).
[[nodiscard]] at::Tensor gdn_state_passing_forward(const at::Tensor& proj, const GdnParams& params,
                                                   const GdnConfig& config, const GdnStepContext& ctx);

}  // namespace cpbench
