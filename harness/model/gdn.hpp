#pragma once
// The test model's Gated DeltaNet mixer (`G` in model.mixers; Qwen3-Next's linear-attention layer) and
// its context parallelism.
//
// Layer (harness/model/model.cpp): h = RMSNorm(x); proj = in_proj(h) = [q | k | v | z | b | a]
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
// state_passing CP (gdn_cp: state_passing; harness/model/gdn_state_passing.hpp): the sequence stays
// split; each rank's chunks from a zero state, one all-gather of every chunk's (transition,
// contribution) pair, composed in stream order; the conv halo as for Mamba. Bytes: gdn_cp_costs.hpp.
//
// Mask semantics (the Mamba layer's, mamba.hpp, through the same make_ssm_plan): the conv window and the
// state see only earlier REAL tokens of the same group (a row, and under a document mask one document:
// the state resets at a document start). Pad slots are transparent (g = beta = 0; the conv skips them).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "harness/model/gdn_cp_costs.hpp"
#include "harness/model/gdn_scan.hpp"
#include "harness/model/mamba.hpp"  // SsmPlan, make_ssm_plan
#include "kernels/comm/communicator.hpp"
#include "sharders/mask.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

struct GdnConfig {
  int64_t key_heads = 2;        // Hk (linear_num_key_heads)
  int64_t value_heads = 4;      // Hv (linear_num_value_heads), a multiple of Hk
  int64_t key_head_dim = 16;    // dk (linear_key_head_dim)
  int64_t value_head_dim = 16;  // dv (linear_value_head_dim)
  int64_t conv = 4;             // K (linear_conv_kernel_dim)
  int64_t chunk = kGdnChunk;    // Q of the chunked form
  [[nodiscard]] int64_t key_dim() const { return key_heads * key_head_dim; }
  [[nodiscard]] int64_t value_dim() const { return value_heads * value_head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q | k | v]
  [[nodiscard]] int64_t in_proj_width() const { return conv_channels() + value_dim() + 2 * value_heads; }
  // Throws UsageError naming model.gdn.<key>.
  void validate() const;
  // "" when head-parallel CP over `cp` ranks can split this layer, else the one-line reason naming the key.
  [[nodiscard]] std::string cp_unsupported_reason(int64_t cp) const;
};

// One GDN layer's parameters (the model's registered tensors).
struct GdnParams {
  at::Tensor conv_w;   // [conv_channels, K]; tap K-1 multiplies the current token
  at::Tensor dt_bias;  // [Hv]
  at::Tensor A_log;    // [Hv]
  at::Tensor norm_w;   // [dv], the gated RMSNorm's weight (shared by the value heads)
};

// What a GDN layer needs to run on this rank, built once per step on the host (no layer builds a host
// tensor: ssm_host_tensors_built() counts them, as for Mamba).
struct StatePassingPlan;  // harness/model/ssm_state_passing.hpp (the chunk plan is the Mamba one)
struct GdnStepContext {
  const comm::Communicator* comm = nullptr;  // null: one rank, the stream as given
  GdnCpStrategy strategy = GdnCpStrategy::head_parallel;
  SsmPlan plan;  // groups, valid, conv sources over the stream this rank runs (as SsmStepContext::plan)
  int64_t chunk = kGdnChunk;
  // head_parallel (and one rank):
  at::Tensor to_global, to_rank_order;  // as SsmStepContext's; undefined: identity
  at::Tensor send_channels;             // int64: proj channels sent, block q = rank q's (q, k, v, b, a; no z)
  at::Tensor conv_channels;             // int64: this rank's conv1d channels ([q | k | v] coordinates)
  at::Tensor value_heads;               // int64 [Hv/W]: this rank's value heads
  // state_passing:
  std::shared_ptr<const StatePassingPlan> state_passing;
  bool drop_incoming_state = false;  // the negative control gdn_state_dropped on this rank
  GdnCpShape shape;                  // what one layer sends (gdn_cp_costs.hpp), checked every step
  std::string nvtx;                  // "cp:<sharder>"
  int64_t* bytes_sent = nullptr;     // when set, += bytes this rank's collectives send, fwd + bwd
  class SectionClock* clock = nullptr;
};

struct GdnCpOptions {
  GdnCpStrategy strategy = GdnCpStrategy::head_parallel;
  // state_passing: true is the negative control that makes this rank ignore the state arriving at its
  // chunks.
  bool drop_incoming_state = false;
};

// The single-rank path (the reference): the batch's rows as given, `meta` [B, S].
[[nodiscard]] GdnStepContext single_rank_gdn_context(const TokenMeta& meta, const MaskSpec& mask,
                                                     const GdnConfig& config, at::ScalarType dtype,
                                                     const at::Device& device);
// The CP path: `layout` = sharder.shard_layout().global; `all_meta` every rank's metadata in rank order
// ([R, W * S_local], what the runner all-gathers). Throws naming the key when the strategy cannot split.
[[nodiscard]] GdnStepContext cp_gdn_context(const comm::Communicator& comm, const GlobalLayout& layout,
                                            const TokenMeta& all_meta, const MaskSpec& mask, const GdnConfig& config,
                                            at::ScalarType dtype, const at::Device& device, std::string nvtx,
                                            const GdnCpOptions& options = {});

// The delta-rule part of one layer: proj [R, S_local, in_proj_width] (this rank's tokens) -> o [R,
// S_local, Hv*dv] before the gated norm, every value head's output for this rank's tokens. Collective
// over ctx.comm.
[[nodiscard]] at::Tensor gdn_forward(const at::Tensor& proj, const GdnParams& params, const GdnConfig& config,
                                     const GdnStepContext& ctx);

// y = RMSNorm over each value head's dv channels (eps 1e-6, in float32 for low precision) * norm_w *
// silu(z); o, z [R, L, Hv*dv] -> [R, L, Hv*dv] in o's dtype.
[[nodiscard]] at::Tensor gdn_gated_norm(const at::Tensor& o, const at::Tensor& z, const at::Tensor& norm_w,
                                        const GdnConfig& config);

// The delta rule's inputs from the conv's taps, as gdn_chunk_scan takes them, in the compute dtype `ct`.
// taps [R, L, K, cc] (cc = 2*hk*dk + hv*dv: [q | k | v] of hk key and hv value heads), conv_w [cc, K],
// ba [R, L, 2*hv] ([b | a]), valid [R, L], dt_bias and A_log [hv]. Key heads are mapped to value heads
// (value head i reads key head i / (hv / hk)).
struct GdnScanInputs {
  at::Tensor q, k, v, g, beta;
};
[[nodiscard]] GdnScanInputs gdn_scan_inputs(const at::Tensor& taps, const at::Tensor& ba, const at::Tensor& valid,
                                            const at::Tensor& conv_w, const at::Tensor& dt_bias,
                                            const at::Tensor& A_log, int64_t hk, int64_t hv, int64_t dk, int64_t dv,
                                            at::ScalarType ct);

}  // namespace cpbench
