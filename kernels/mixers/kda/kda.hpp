#pragma once
// The `K` mixer: the Kimi Delta Attention layer (Kimi Linear, Moonshot AI 2025; flash-linear-attention's
// KimiDeltaAttention) and its context parallelism: Gated DeltaNet's delta rule (gdn_scan.hpp) with the
// decay per key channel instead of per head.
//
// Layer (KdaLayer, kda_mixer.cpp): h = RMSNorm(x); [q | k | v | b] = in_proj(h); f = f_b(f_a(h)) (the
// low-rank gate projection hidden -> r -> H*dk); z = g_b(g_a(h)) + g_bias (the low-rank output gate,
// hidden -> r -> H*dv); proj = [q | k | v | b | f]; [q | k | v] = silu(causal depthwise conv1d, no
// bias); q, k L2-normalised per head (eps 1e-6), q scaled by dk^-1/2; beta = sigmoid(b);
// g[h, c] = -exp(A_log[h]) softplus(f[h, c] + dt_bias[h*dk + c]) (the log decay, per head and key channel,
// <= 0); o = the delta rule with that per-channel g; y = RMSNorm_dv(o) * norm_w * sigmoid(z) per head;
// out = out_proj(y).
//
// head_parallel CP (kda_cp: head_parallel): as GDN's (gdn.hpp) with H key = value heads: one all-to-all
// gives a rank every token of its heads' [q | k | v | b | f] channels (f with its heads' offset: channel
// h*dk + c of the gate), the whole stream is scanned with its heads' conv1d, dt_bias and A_log slices, a
// second all-to-all returns [R, S/W, H*dv]. z never travels.
// state_passing CP (kda_cp: state_passing): GDN's steps (delta_rule_state_passing, gdn_state_passing.cpp)
// on the per-channel inputs; the same pairs and halo. Bytes: kda_cp_costs.hpp.
#include <ATen/ATen.h>

#include <string>

#include "kernels/mixers/gdn/gdn.hpp"
#include "kernels/mixers/kda/kda_config.hpp"
#include "kernels/mixers/kda/kda_cp_costs.hpp"

namespace cpbench {

// One KDA layer's parameters (the model's registered tensors) that the CP part reads.
struct KdaParams {
  at::Tensor conv_w;   // [conv_channels, K]; tap K-1 multiplies the current token
  at::Tensor dt_bias;  // [H*dk], per head and key channel
  at::Tensor A_log;    // [H]
  at::Tensor norm_w;   // [dv], the gated RMSNorm's weight
};

// Its step context (built by single_rank_linear_context / cp_linear_context with GdnCpOptions: the
// strategy and the state-dropped negative control) and its parts (kda_mixer.cpp).
using KdaStepContext = LinearStepContextOf<GdnCpStrategy, GdnCpShape, 'K'>;
[[nodiscard]] const LinearParts<KdaConfig, GdnCpStrategy, GdnCpShape, KdaStepContext>& linear_parts(const KdaConfig&);
// Its channel split: which proj channels each rank takes under head_parallel, and its refusal.
[[nodiscard]] LinearLayerSpec kda_spec(const KdaConfig& config);

// The delta-rule part of one layer: proj [R, S_local, proj_width] ([q | k | v | b | f] of this rank's
// tokens) -> o [R, S_local, H*dv] before the gated norm. Collective over ctx.comm.
[[nodiscard]] at::Tensor kda_forward(const at::Tensor& proj, const KdaParams& params, const KdaConfig& config,
                                     const KdaStepContext& ctx);

// The delta rule's inputs of h heads from the conv's taps [R, L, K, h*(2 dk + dv)], bf [R, L, h*(1 + dk)]
// ([b | f]), valid [R, L], conv_w [h*(2 dk + dv), K], dt_bias [h*dk], A_log [h], in the compute dtype
// `ct`: g [R, L, h, dk]; pad slots get g = beta = 0.
[[nodiscard]] GdnScanInputs kda_scan_inputs(const at::Tensor& taps, const at::Tensor& bf, const at::Tensor& valid,
                                            const at::Tensor& conv_w, const at::Tensor& dt_bias,
                                            const at::Tensor& A_log, int64_t h, int64_t dk, int64_t dv,
                                            at::ScalarType ct);

}  // namespace cpbench
