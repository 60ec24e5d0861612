#pragma once
// The `M` mixer: a selective-state-space layer (Mamba-2 style) and its context parallelism (the seed's
// `mamba` module, ../shared/reference/nemo-automodel-cp.md §10).
//
// Layer (MambaLayer, mamba.cpp): h = RMSNorm(x); proj = in_proj(h) = [z | x | B | C | dt]
// ([d_inner | d_inner | G*N | G*N | H] channels); xBC = silu(causal depthwise conv1d([x | B | C]));
// dt = softplus(dt + dt_bias); y = selective_scan(x, dt, A = -exp(A_log), B, C) + D * x;
// out = out_proj(y * silu(z)). Heads h use B/C group h / (H / G).
//
// Hidden-parallel CP (channel_parallel_forward): the sequence is not split. One all-to-all turns this rank's
// tokens of every channel, [R, S/W, ...], into every token of this rank's channels, [R, S, ...]: the
// x channels and dt of heads [r*H/W, (r+1)*H/W), and the B/C channels of their groups (G >= W: groups
// [r*G/W, (r+1)*G/W); G < W: group r / (W/G), so each group is sent to W/G ranks). The received
// sequence is in rank order; it is put in global order with the shard's own map
// (GlobalLayout::inverse(), the layout code's one index map), the conv and the scan run over the whole
// stream with this rank's slices of conv1d, dt_bias, A_log and D (index_select of the full parameters,
// so gradients reach them), the result goes back to rank order (GlobalLayout::ranks) and a second
// all-to-all returns [R, S/W, d_inner]. z never travels: the gate is applied on the local tokens.
//
// State-passing CP (ssm_cp: state_passing; kernels/mixers/linear/state_passing.hpp): the sequence stays
// split. Each rank convolves and scans its own tokens with every channel, each chunk (maximal run of
// consecutive stream positions it owns) from a zero state; one all-gather of every chunk's summary
// (final state and whole decay) lets each rank compose the state arriving at each of its chunks, and
// correct its outputs with it; the conv's K-1 earlier inputs at a chunk start come from one all-gather
// of every chunk's last K-1 real inputs. Bytes per rank: mamba_cp_costs.hpp.
//
// Mask semantics: kernels/mixers/linear/scan_plan.hpp (the conv and the state see earlier real tokens of
// the same row and document; pad slots get dt = 0 and pass the state unchanged).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/mixers/linear/linear_parts.hpp"
#include "kernels/mixers/mamba/mamba_config.hpp"
#include "kernels/mixers/mamba/mamba_cp_costs.hpp"
#include "kernels/mixers/mamba/ssm_scan.hpp"
#include "sharders/mask.hpp"

namespace cpbench {

// One SSM layer's parameters (the model's registered tensors).
struct SsmParams {
  at::Tensor conv_w;   // [conv_channels, K]; tap K-1 multiplies the current token (torch conv1d order)
  at::Tensor conv_b;   // [conv_channels]
  at::Tensor dt_bias;  // [H]
  at::Tensor A_log;    // [H], A = -exp(A_log)
  at::Tensor D;        // [H]
};

// What the Mamba layers need this step (linear_step.hpp has the shared part; built by
// single_rank_linear_context / cp_linear_context, linear_parts.hpp, whose options carry the strategy and
// the two negative controls: the rank-order scan, the dropped incoming state), and the mixer's parts
// (mamba.cpp, beside its layer) with its channel split under hidden_parallel and its refusal (mamba_spec).
using SsmStepContext = LinearStepContextOf<SsmCpStrategy, SsmCpShape, 'M'>;
[[nodiscard]] const LinearParts<SsmConfig, SsmCpStrategy, SsmCpShape, SsmStepContext>& linear_parts(const SsmConfig&);
[[nodiscard]] LinearLayerSpec mamba_spec(const SsmConfig& config);

// The SSM part of one layer is linear_forward(proj, params, config, ctx) (linear_parts.hpp): proj [R,
// S_local, in_proj_width] (this rank's tokens) -> y [R, S_local, d_inner] (before the gate), every head's
// output for them, collective over ctx.comm, by one of these two paths: hidden_parallel (mamba.cpp; also
// one rank) or state_passing (mamba_state_passing.cpp: two all-gathers forward, two reduce-scatters
// backward; K = 1: one each).
[[nodiscard]] at::Tensor channel_parallel_forward(const at::Tensor& proj, const SsmParams& params,
                                                  const SsmConfig& config, const SsmStepContext& ctx);
[[nodiscard]] at::Tensor state_passing_forward(const at::Tensor& proj, const SsmParams& params, const SsmConfig& config,
                                               const SsmStepContext& ctx);

// The scan's inputs after the causal conv, as ssm_scan takes them (shapes in its contract), in the
// compute dtype `ct`. `taps` [R, L, K, cc]: each token's conv window (tap K-1 = the token itself);
// conv_w [cc, K], conv_b [cc] for those channels; dt_raw [R, L, h]; valid [R, L]; dt_bias, A_log, D [h]
// for those heads; cc = h * head_dim + 2 * g * state.
struct SsmScanInputs {
  at::Tensor x, dt, A, B, C, D;
};
[[nodiscard]] SsmScanInputs conv_to_scan_inputs(const at::Tensor& taps, const at::Tensor& dt_raw, const at::Tensor& valid,
                                             const at::Tensor& conv_w, const at::Tensor& conv_b,
                                             const at::Tensor& dt_bias, const at::Tensor& A_log, const at::Tensor& D,
                                             int64_t head_dim, int64_t groups, int64_t state, at::ScalarType ct);

}  // namespace cpbench
