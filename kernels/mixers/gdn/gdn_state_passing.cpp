// State-passing context parallelism for the delta-rule layers (Gated DeltaNet, gdn_cp: state_passing; Kimi
// Delta Attention, kda_cp: state_passing, the same steps with a per-channel decay; the zigzag
// state chain of flash-linear-attention PR #1221, Megatron-LM #3282). The sequence stays split as the
// layout split it; the chunk plan is the Mamba one (make_state_passing_plan, kernels/mixers/linear/state_passing.hpp: the
// same chunks, stream order, conv sources and halo rows, the same reset and carry masks).
//
// Per layer, on each rank:
//   1. conv: each token's K-1 earlier real tokens of its group; those of another rank come from one
//      all-gather of every chunk's last K-1 real conv inputs (the halo, [slots, R, K-1, conv_channels]).
//   2. each own chunk (maximal run of consecutive stream positions) gets the chunked delta rule's factors
//      (delta_rule_chunks: the UT transform of its scan chunks, as on one rank) and from them its summary
//      (delta_rule_summary): the transition T_c (the product over its tokens of (I - beta_t k_t k_t^T)
//      Diag(exp g_t), [Hv, dk, dk]) and the contribution C_c (the state after the chunk from a zero
//      start, [Hv, dk, dv]), by the delta rule's own state step on [T | C] from [I | 0] (flash-linear-
//      attention PR #691's pre-process; attention-gym #415's H_out = H_in A + B). T_c is 0 where the chunk
//      holds a reset (a document start) or starts one (the plan's carry mask).
//   3. one all-gather of every chunk's pair [T_c | C_c] ([slots, R, Hv, dk, dk + dv], in the accumulator
//      dtype: float32 for bfloat16 / float16 activations).
//   4. every rank composes along the stream, S_after(c) = T_c S_after(c-1) + C_c, in stream order
//      (StatePassingPlan::stream_order, not rank order), and takes the state arriving at each own chunk.
//   5. each own chunk's outputs: the same factors run from the state that arrives (delta_rule_apply), zero
//      for a row whose chunk does not read it (the plan's prefix mask: the chunk starts a document).
//      Its first group's tokens read the state, as on one rank.
// Both all-gathers are all_gather_autograd: their backward reduce-scatters dL/d(pair) and dL/d(halo) to
// the chunks they came from. Bytes per rank: gdn_cp_costs.hpp (no S in it).
#include <algorithm>
#include <vector>

#include "kernels/mixers/gdn/gdn.hpp"
#include "kernels/mixers/linear/state_passing.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

at::Tensor state_passing_forward(const at::Tensor& proj, const GdnParams& params, const GdnConfig& c,
                                 const GdnStepContext& ctx) {
  const StatePassingPlan& sp = step_state_passing_plan(ctx, c.conv, "gdn");
  const int64_t R = proj.size(0), L = proj.size(1);
  const at::ScalarType st = proj.scalar_type(), ct = recurrence_dtype(st);
  const int64_t Hk = c.key_heads, Hv = c.value_heads, dk = c.key_head_dim, dv = c.value_head_dim;
  const int64_t cc = c.conv_channels();

  const at::Tensor taps = state_passing_taps(proj.narrow(2, 0, cc), ctx, "gdn_halo");
  const GdnScanInputs in = gdn_scan_inputs(taps, proj.narrow(2, cc + c.value_dim(), 2 * Hv), sp.local.valid,
                                           params.conv_w, params.dt_bias, params.A_log, Hk, Hv, dk, dv, ct);
  return delta_rule_state_passing(in, ctx, "gdn_states").reshape({R, L, Hv * dv}).to(st);
}

at::Tensor delta_rule_state_passing(const GdnScanInputs& in, const LinearStepContext& ctx, const char* phase) {
  CP_CHECK(ctx.state_passing != nullptr, "delta rule: state passing without its step plan");
  const StatePassingPlan& sp = *ctx.state_passing;
  const int64_t W = sp.cp, R = in.v.size(0), Hv = in.v.size(2), dk = in.k.size(3), dv = in.v.size(3);
  if (W == 1) return gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, sp.local.group, ctx.chunk).o;

  // Step 2: each own chunk's factors, and its pair from them.
  const auto opts = in.v.options();
  std::vector<DeltaRuleChunks> factors;
  std::vector<at::Tensor> pairs;
  for (size_t j = 0; j < sp.chunks.size(); ++j) {
    const auto& ch = sp.chunks[j];
    const auto part = [&](const at::Tensor& t) { return t.narrow(1, ch.begin, ch.length); };
    factors.push_back(delta_rule_chunks(part(in.q), part(in.k), part(in.v), part(in.g), part(in.beta),
                                        part(sp.local.group), ctx.chunk));
    const DeltaRuleSummary summary = delta_rule_summary(factors.back());
    const at::Tensor carry = sp.carry_keep.select(0, static_cast<int64_t>(j)).to(opts.dtype()).view({R, 1, 1, 1});
    pairs.push_back(at::cat({summary.transition * carry, summary.contribution}, -1));
  }

  // Steps 3-4: every chunk's pair, composed in stream order up to this rank's last chunk.
  const at::Tensor all = gather_chunk_summaries(std::move(pairs), ctx, phase);  // [W * slots, R, Hv, dk, dk + dv]
  const std::vector<at::Tensor> incoming = compose_incoming(
      sp, all, at::zeros({R, Hv, dk, dv}, opts), [dk, dv](const at::Tensor& pair, const at::Tensor& state) {
        return at::matmul(pair.narrow(-1, 0, dk), state) + pair.narrow(-1, dk, dv);
      });

  // Step 5: each own chunk from the state that reaches it.
  std::vector<at::Tensor> pieces;
  for (size_t j = 0; j < sp.chunks.size(); ++j) {
    const auto& ch = sp.chunks[j];
    at::Tensor start = at::zeros({R, Hv, dk, dv}, opts);
    if (!sp.drop_incoming_state && ch.prefix > 0)
      start = incoming[j] * sp.prefix_keep.select(1, ch.begin).to(opts.dtype()).view({R, 1, 1, 1});
    pieces.push_back(delta_rule_apply(factors[j], start).o);
  }
  // Every rank must run the all-gather's backward (a collective), also one whose chunks receive nothing
  // (the stream's first chunk, or the negative control): tie the gathered pairs in.
  return at::cat(pieces, 1) + all.sum() * 0;
}

}  // namespace cpbench
