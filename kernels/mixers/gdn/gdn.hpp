#pragma once
// The `G` mixer: the Gated DeltaNet layer (Qwen3-Next's linear attention) and its context parallelism.
//
// Layer (GdnLayer, gdn.cpp): h = RMSNorm(x); proj = in_proj(h) = [q | k | v | z | b | a]
// ([Hk*dk | Hk*dk | Hv*dv | Hv*dv | Hv | Hv] channels); [q | k | v] = silu(causal depthwise conv1d, no
// bias); q, k L2-normalised per head (eps 1e-6), q scaled by dk^-1/2; value head h reads key head
// h / (Hv / Hk); beta = sigmoid(b); g = -exp(A_log) softplus(a + dt_bias); o = the gated delta rule
// (gdn_scan.hpp); y = RMSNorm_dv(o) * norm_w * silu(z) per value head (gdn_gated_norm); out = out_proj(y).
//
// head_parallel CP (gdn_cp: head_parallel): the sequence is not split. One all-to-all turns this rank's
// tokens of every channel, [R, S/W, ...], into every token of this rank's channels, [R, S, ...]: q and k
// of its key heads (Hk >= W: [r*Hk/W, (r+1)*Hk/W); Hk < W: key head r / (W/Hk), replicated on W/Hk
// ranks), v, b, a of its value heads [r*Hv/W, (r+1)*Hv/W). The received sequence is in rank order; it is
// put in global order with the shard's own map (GlobalLayout::inverse()), conv and delta rule run over
// the whole stream with this rank's slices of conv1d, dt_bias and A_log, the result returns to rank
// order and a second all-to-all gives [R, S/W, Hv*dv]. z never travels: the gated norm is applied on the
// local tokens.
//
// state_passing CP (gdn_cp: state_passing; gdn_state_passing.cpp on
// kernels/mixers/linear/state_passing.hpp): the sequence stays
// split; each rank's chunks summarised from their own factors, one all-gather of every chunk's
// (transition, contribution) pair, composed in stream order, each chunk run from the state that arrives;
// the conv halo as for Mamba. Bytes: gdn_cp_costs.hpp.
//
// Mask semantics: kernels/mixers/linear/scan_plan.hpp (the same plan as Mamba's; pad slots get g = beta = 0).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/mixers/gdn/gdn_config.hpp"
#include "kernels/mixers/gdn/gdn_cp_costs.hpp"
#include "kernels/mixers/gdn/gdn_scan.hpp"
#include "kernels/mixers/linear/linear_parts.hpp"
#include "sharders/mask.hpp"

namespace cpbench {

// One GDN layer's parameters (the model's registered tensors).
struct GdnParams {
  at::Tensor conv_w;   // [conv_channels, K]; tap K-1 multiplies the current token
  at::Tensor dt_bias;  // [Hv]
  at::Tensor A_log;    // [Hv]
  at::Tensor norm_w;   // [dv], the gated RMSNorm's weight (shared by the value heads)
};

// What the GDN layers need this step (linear_step.hpp has the shared part, whose `heads` are this rank's
// value heads; the options of cp_linear_context carry the strategy and the state-dropped control), the
// mixer's parts (gdn.cpp, beside its layer), and its channel split under head_parallel with its refusal.
using GdnStepContext = LinearStepContextOf<GdnCpStrategy, GdnCpShape, 'G'>;
[[nodiscard]] const LinearParts<GdnConfig, GdnCpStrategy, GdnCpShape, GdnStepContext>& linear_parts(const GdnConfig&);
[[nodiscard]] LinearLayerSpec gdn_spec(const GdnConfig& config);

// The delta-rule part of one layer is linear_forward(proj, params, config, ctx) (linear_parts.hpp): proj
// [R, S_local, in_proj_width] (this rank's tokens) -> o [R, S_local, Hv*dv] before the gated norm, every
// value head's output for them, collective over ctx.comm. Its two paths: state passing
// (gdn_state_passing.cpp: two all-gathers forward, two reduce-scatters backward; K = 1: one each) and
// head_parallel (gdn.cpp; also one rank).
[[nodiscard]] at::Tensor state_passing_forward(const at::Tensor& proj, const GdnParams& params, const GdnConfig& config,
                                               const GdnStepContext& ctx);
[[nodiscard]] at::Tensor channel_parallel_forward(const at::Tensor& proj, const GdnParams& params,
                                                  const GdnConfig& config, const GdnStepContext& ctx);

// y = RMSNorm over each value head's dv channels (eps 1e-6, in float32 for low precision) * norm_w *
// silu(z); o, z [R, L, Hv*dv] -> [R, L, Hv*dv] in o's dtype.
[[nodiscard]] at::Tensor gdn_gated_norm(const at::Tensor& o, const at::Tensor& z, const at::Tensor& norm_w,
                                        const GdnConfig& config);
// The same for `heads` heads of dv channels, the gate silu(z) or (sigmoid_gate, KDA's) sigmoid(z).
[[nodiscard]] at::Tensor gated_rms_norm(const at::Tensor& o, const at::Tensor& z, const at::Tensor& norm_w,
                                        int64_t heads, int64_t dv, bool sigmoid_gate);
// x / sqrt(sum x^2 + 1e-6) over the last dim (q and k of the delta rule).
[[nodiscard]] at::Tensor delta_rule_l2_normalize(const at::Tensor& x);

// The delta rule's inputs from the conv's taps, as gdn_chunk_scan takes them, in the compute dtype `ct`.
// taps [R, L, K, cc] (cc = 2*hk*dk + hv*dv: [q | k | v] of hk key and hv value heads), conv_w [cc, K],
// ba [R, L, 2*hv] ([b | a]), valid [R, L], dt_bias and A_log [hv]. Key heads are mapped to value heads
// (value head i reads key head i / (hv / hk)).
struct GdnScanInputs {
  at::Tensor q, k, v, g, beta;  // g [R, L, hv] (GDN) or [R, L, hv, dk] (a per-channel gate)
};
[[nodiscard]] GdnScanInputs gdn_scan_inputs(const at::Tensor& taps, const at::Tensor& ba, const at::Tensor& valid,
                                            const at::Tensor& conv_w, const at::Tensor& dt_bias,
                                            const at::Tensor& A_log, int64_t hk, int64_t hv, int64_t dk, int64_t dv,
                                            at::ScalarType ct);

// Steps 2-5 of state passing (gdn_state_passing.cpp) for any delta-rule layer: `in` this rank's scan
// inputs over ctx.state_passing's local tokens (a scalar or per-channel g) -> o [R, L, H, dv] in the
// compute dtype; one all-gather of the chunk pairs (NVTX `<nvtx>:<phase>`). W = 1: the chunked form alone.
[[nodiscard]] at::Tensor delta_rule_state_passing(const GdnScanInputs& in, const LinearStepContext& ctx,
                                                  const char* phase);

}  // namespace cpbench
