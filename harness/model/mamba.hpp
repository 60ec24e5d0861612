#pragma once
// The test model's selective-state-space mixer (Mamba-2 style) and its hidden-parallel context
// parallelism (the seed's `mamba` module, ../shared/reference/nemo-automodel-cp.md §10).
//
// Layer (harness/model/model.cpp): h = RMSNorm(x); proj = in_proj(h) = [z | x | B | C | dt]
// ([d_inner | d_inner | G*N | G*N | H] channels); xBC = silu(causal depthwise conv1d([x | B | C]));
// dt = softplus(dt + dt_bias); y = selective_scan(x, dt, A = -exp(A_log), B, C) + D * x;
// out = out_proj(y * silu(z)). Heads h use B/C group h / (H / G).
//
// Hidden-parallel CP (mamba_ssm_forward): the sequence is not split. One all-to-all turns this rank's
// tokens of every channel, [R, S/W, ...], into every token of this rank's channels, [R, S, ...]: the
// x channels and dt of heads [r*H/W, (r+1)*H/W), and the B/C channels of their groups (G >= W: groups
// [r*G/W, (r+1)*G/W); G < W: group r / (W/G), so each group is sent to W/G ranks). The received
// sequence is in rank order; it is put in global order with the shard's own map
// (GlobalLayout::inverse(), the layout code's one index map), the conv and the scan run over the whole
// stream with this rank's slices of conv1d, dt_bias, A_log and D (index_select of the full parameters,
// so gradients reach them), the result goes back to rank order (GlobalLayout::ranks) and a second
// all-to-all returns [R, S/W, d_inner]. z never travels: the gate is applied on the local tokens.
//
// State-passing CP (ssm_cp: state_passing; harness/model/ssm_state_passing.hpp): the sequence stays
// split. Each rank convolves and scans its own tokens with every channel, each chunk (maximal run of
// consecutive stream positions it owns) from a zero state; one all-gather of every chunk's summary
// (final state and whole decay) lets each rank compose the state arriving at each of its chunks, and
// correct its outputs with it; the conv's K-1 earlier inputs at a chunk start come from one all-gather
// of every chunk's last K-1 real inputs. Bytes per rank: harness/model/ssm_cp_costs.hpp.
//
// Mask semantics: the conv window and the scan state see only earlier REAL tokens of the same group:
// a group is one input row (segment), and under a document mask one document. Pad slots contribute
// nothing (dt = 0 there: the state passes them unchanged; the conv skips them), so a thd stream's pad
// slots between documents and a row's trailing padding never reach a real token. The mask's window
// and visibility (causal / full / sliding_window) are attention's business: the SSM is always causal.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/model/ssm_cp_costs.hpp"
#include "kernels/comm/communicator.hpp"
#include "sharders/mask.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

struct SsmConfig {
  int64_t heads = 4;     // H, SSM heads
  int64_t head_dim = 16;  // P; d_inner = H * P
  int64_t state = 16;    // N, state size per head
  int64_t groups = 2;    // G, B/C groups; divides H
  int64_t conv = 4;      // K, depthwise causal conv1d width
  [[nodiscard]] int64_t d_inner() const { return heads * head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return d_inner() + 2 * groups * state; }  // [x | B | C]
  [[nodiscard]] int64_t in_proj_width() const { return 2 * d_inner() + 2 * groups * state + heads; }
  // Throws UsageError naming model.ssm.<key>.
  void validate() const;
  // "" when hidden-parallel CP over `cp` ranks can split this layer, else the one-line reason
  // (heads % cp != 0; groups neither dividing cp nor divisible by it).
  [[nodiscard]] std::string cp_unsupported_reason(int64_t cp) const;
};

// One SSM layer's parameters (the model's registered tensors).
struct SsmParams {
  at::Tensor conv_w;   // [conv_channels, K]; tap K-1 multiplies the current token (torch conv1d order)
  at::Tensor conv_b;   // [conv_channels]
  at::Tensor dt_bias;  // [H]
  at::Tensor A_log;    // [H], A = -exp(A_log)
  at::Tensor D;        // [H]
};

// Where the conv and the scan may look, per row of a stream [R, L] (built once per step, shared by
// every SSM layer).
struct SsmPlan {
  at::Tensor group;     // int64 [R, L]: scan state flows only between tokens of one group
  at::Tensor valid;     // [R, L] 1 real token, 0 pad slot (compute dtype)
  at::Tensor conv_src;  // int64 [R * L * K]: row of the zero-extended input [R * (L + 1), C] that tap k of
                        // token t reads (its (K-1-k)-th previous real token of its group, else a zero row)
  int64_t rows = 0, length = 0;
};
// From token metadata [R, L] in scan order (sharders/stream.hpp's fields, on any device).
// `document_reset`: the mask separates documents (MaskSpec::same_document()).
[[nodiscard]] SsmPlan make_ssm_plan(const TokenMeta& meta, bool document_reset, int64_t conv, at::ScalarType dtype,
                                    const at::Device& device);

// What an SSM layer needs to run on this rank, built once per step: every index and mask tensor the
// layers use is built here on the host and moved to the device once, never inside a layer (a layer
// issues no host-to-device copy; ssm_host_tensors_built() counts them for the test that says so).
struct StatePassingPlan;  // harness/model/ssm_state_passing.hpp
struct SsmStepContext {
  const comm::Communicator* comm = nullptr;  // null: one rank, the stream as given
  SsmCpStrategy strategy = SsmCpStrategy::hidden_parallel;
  SsmPlan plan;  // over the stream this rank scans: hidden_parallel the whole stream (global order),
                 // state_passing this rank's own tokens (local order, a reset at each chunk start)
  // hidden_parallel (and one rank):
  at::Tensor to_global;       // int64 [P]: rank-order index of global position p; undefined: identity
  at::Tensor to_rank_order;   // int64 [P]: global position of rank-order element i; undefined: identity
  at::Tensor send_channels;   // int64: proj channels sent, block q = rank q's (x, B, C, dt; no z)
  at::Tensor conv_channels;   // int64: this rank's conv1d channels ([x | B | C] coordinates)
  at::Tensor heads;           // int64 [H/W]: this rank's SSM heads
  // state_passing:
  std::shared_ptr<const StatePassingPlan> state_passing;
  // What one layer sends under this strategy (ssm_cp_costs.hpp), from this step's shapes; the runner
  // checks every step that the layers' count equals it.
  SsmCpShape shape;
  std::string nvtx;  // "cp:<sharder>"
  // When set, += the bytes this rank's collectives send to other ranks, forward and backward (the
  // backward's collectives send as many as the forward's: counted when the forward runs).
  int64_t* bytes_sent = nullptr;
  // When set, times every layer's SSM section (scan and collectives, forward and backward).
  class SectionClock* clock = nullptr;
};
// How cp_ssm_context builds the step's context.
struct SsmCpOptions {
  SsmCpStrategy strategy = SsmCpStrategy::hidden_parallel;
  // hidden_parallel: false is the negative control that scans the rank-order concatenation as if it
  // were the sequence.
  bool undo_chunk_order = true;
  // state_passing: true is the negative control that makes this rank ignore the state arriving at its
  // chunks (it scans them from zero as if each started the sequence).
  bool drop_incoming_state = false;
};
// The single-rank path (the reference): the batch's rows as given, `meta` [B, S].
[[nodiscard]] SsmStepContext single_rank_ssm_context(const TokenMeta& meta, const MaskSpec& mask,
                                                     const SsmConfig& config, at::ScalarType dtype,
                                                     const at::Device& device);
// The CP path after `sharder` sharded the batch: `all_meta` is every rank's attention metadata in rank
// order ([R, W * S_local], what the runner all-gathers).
[[nodiscard]] SsmStepContext cp_ssm_context(const comm::Communicator& comm, const Sharder& sharder,
                                            const TokenMeta& all_meta, const MaskSpec& mask, const SsmConfig& config,
                                            at::ScalarType dtype, const at::Device& device, std::string nvtx,
                                            const SsmCpOptions& options = {});
// The same from the layout the shard used (`layout` = sharder.shard_layout().global).
[[nodiscard]] SsmStepContext cp_ssm_context(const comm::Communicator& comm, const GlobalLayout& layout,
                                            const TokenMeta& all_meta, const MaskSpec& mask, const SsmConfig& config,
                                            at::ScalarType dtype, const at::Device& device, std::string nvtx,
                                            const SsmCpOptions& options = {});

// The SSM part of one layer: proj [R, S_local, in_proj_width] (this rank's tokens) -> y [R, S_local,
// d_inner] (before the gate), every head's output for this rank's tokens. Collective over ctx.comm.
[[nodiscard]] at::Tensor mamba_ssm_forward(const at::Tensor& proj, const SsmParams& params, const SsmConfig& config,
                                           const SsmStepContext& ctx);

// Host-built tensors the SSM code has moved to a device since the process started (plans, index maps):
// a step builds them once in its context; a layer builds none.
[[nodiscard]] int64_t ssm_host_tensors_built();
// at::tensor(v) on `device`, counted by ssm_host_tensors_built(). The SSM code's one way to build one.
[[nodiscard]] at::Tensor ssm_host_tensor(const std::vector<int64_t>& v, const at::Device& device);

// The scan's inputs after the causal conv, as ssm_scan takes them (shapes in its contract below), in
// the compute dtype `ct`. `taps` [R, L, K, cc]: each token's conv window (tap K-1 = the token itself);
// conv_w [cc, K], conv_b [cc] for those channels; dt_raw [R, L, h]; valid [R, L]; dt_bias, A_log, D [h]
// for those heads; cc = h * head_dim + 2 * g * state.
struct SsmScanInputs {
  at::Tensor x, dt, A, B, C, D;
};
[[nodiscard]] SsmScanInputs conv_to_scan_inputs(const at::Tensor& taps, const at::Tensor& dt_raw, const at::Tensor& valid,
                                             const at::Tensor& conv_w, const at::Tensor& conv_b,
                                             const at::Tensor& dt_bias, const at::Tensor& A_log, const at::Tensor& D,
                                             int64_t head_dim, int64_t groups, int64_t state, at::ScalarType ct);

// exp(v) where `keep` (bool, broadcast to v), exactly 0 elsewhere, with finite gradients everywhere.
[[nodiscard]] at::Tensor masked_exp(const at::Tensor& keep, const at::Tensor& v);

// ---- the selective scan ----
// Every form computes, per row r and head h (heads h use B/C group h / (H / G)):
//   y[t] = sum_{s <= t, no reset in (s, t]} C[t]·B[s] exp(sum_{s < u <= t} dt[u] A) dt[s] x[s] + D x[t]
// i.e. the recurrence state[t] = exp(dt[t] A) state[t-1] + dt[t] x[t] B[t]^T, y[t] = state[t] C[t] + D x[t],
// with the state reset to zero where group[t] != group[t-1] (and at t = 0).
// Shapes: x [R, L, H, P], dt [R, L, H] (>= 0; 0 = a transparent slot: no decay, no input),
// A [H] (< 0), B/C [R, L, G, N], D [H], group int64 [R, L], groups contiguous runs along a row (as
// make_ssm_plan builds them) -> y [R, L, H, P] in x's dtype. Differentiable in x, dt, A, B, C, D.
// bfloat16 / float16 inputs are computed in float32 (decays summed in bfloat16 lose everything) and
// the result is rounded back; float32 and float64 compute in their own dtype.

// The chunk length the layer scans with (Q below).
inline constexpr int64_t kSsmChunk = 64;

// The layer's scan: Mamba-2's chunked state-space-duality (SSD) form. The row is cut into chunks of
// `chunk` tokens (the last one shorter when L is no multiple of it; chunk > L means one chunk of L):
// inside a chunk the quadratic form above, between chunks a sequential pass of the [R, H, P, N] chunk
// states. Time O(L·Q·(N + P)), memory O(L·Q·H) for the intra-chunk weights plus one state per chunk;
// no L × L tensor. Decays are differences of cumulative sums inside one chunk only.
[[nodiscard]] at::Tensor ssm_scan(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                                  const at::Tensor& C, const at::Tensor& D, const at::Tensor& group,
                                  int64_t chunk = kSsmChunk);

// FLOPs of ssm_scan's forward pass per token per head, for a row of `seq_len` tokens cut into chunks
// of `chunk` (effective chunk min(chunk, seq_len)) with head dim P and state size N. Convention: a
// multiply-add is 2 FLOPs; the dense chunk is counted (Q keys per token, not the causal half the
// result keeps); C·B is counted per head although the H/G heads of a group share it; exp, masks and
// the D skip are not counted. Backward ≈ 2 × forward by the usual convention.
//   intra-chunk: 2·Q·N (C[t]·B[s] for the Q keys of its chunk) + 2·Q·P (weights times x)
//   state:       2·P·N (dt x ⊗ B into the chunk state) + 2·P·N (C · the incoming state)
//                + 2·P·N / Q (the chunk state's decay and sum, once per chunk)
[[nodiscard]] double ssm_scan_flops(int64_t seq_len, int64_t chunk, int64_t head_dim, int64_t state);

// References (unit tests and tests/bench/ssm_scan_bench.cpp; the layer does not use them). Same
// contract as ssm_scan.
// The quadratic (SSD "attention") form over whole rows: one [R, L, L, H] decay matrix, decays as
// differences of one cumulative sum over the row. O(L^2) time and memory per head.
[[nodiscard]] at::Tensor ssm_scan_quadratic(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                            const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                                            const at::Tensor& group);
// The plain recurrence over time (state [R, H, P, N]): the readable definition, L sequential steps.
[[nodiscard]] at::Tensor ssm_scan_recurrence(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                             const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                                             const at::Tensor& group);

}  // namespace cpbench
