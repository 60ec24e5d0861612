#pragma once
// CP attention transports: attention for this rank's queries against the keys of every CP rank.
//
// Shapes (B batch, Hq query heads, Hkv key/value heads with Hq % Hkv == 0, S local tokens, D head dim):
//   q [B, Hq, S, D], k and v [B, Hkv, S, D]  -> out [B, Hq, S, D], differentiable in q, k, v.
// Every rank holds the same number S of local tokens (layouts guarantee it). Metadata:
//   ctx.local = TokenMeta of this rank's tokens [B, S]
//   ctx.all   = TokenMeta of all ranks' tokens in rank order [B, W*S] (rank j's block at [j*S, (j+1)*S))
// A transport must not change the mask: a mask it cannot evaluate is reported by unsupported_reason() and
// the case is skipped, never silently run with another mask.
#include <ATen/ATen.h>

#include <chrono>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/attention/flops.hpp"
#include "kernels/attention/mla.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/comm/device_time.hpp"
#include "sharders/mask.hpp"

namespace cpbench {

// One interval a transport spent, for the step's timeline (recorded only when
// AttentionStats::record_spans is set). Names follow the NVTX step ranges: "<transport>_<fwd|bwd>:<step>"
// (block maths and transfers of that step), "<transport>_<fwd|bwd>:prologue|epilogue" outside the steps.
struct AttentionSpan {
  enum class Kind { compute, wait, transfer, transfer_grad };  // wait: compute blocked on communication
  std::string name;
  Kind kind = Kind::compute;
  std::chrono::steady_clock::time_point begin, end;
};

// Measurement sink: transports add what they did (the harness reads and resets it per phase).
struct AttentionStats {
  double compute_seconds = 0;       // attention maths (forward and backward)
  double comm_seconds = 0;          // time blocked in communication (exposed, not overlapped)
  int64_t bytes_sent = 0;           // bytes this rank sent (forward and backward), per the transport's formula
  double flops = 0;                 // forward FLOPs of the work: visible (q, k) pairs between real tokens
                                    // (the work rule, sharders/mask.hpp; attention_flops, flops.hpp)
  double flops_computed = 0;        // forward FLOPs of what the kernels evaluate: whole tiles / bands, so a
                                    // causal diagonal tile counts whole, a skipped block 0; >= flops
  int64_t visible_pairs = 0;        // (q, k) pairs visible under the mask for this rank's real queries, summed over batch (per head)
  int64_t calls = 0;
  double transfer_seconds = 0;      // time the exchanges were in flight, post to completion (overlapped or not)
  std::map<std::string, int64_t> kernel_blocks;  // blocks evaluated per kernel route (fused_attention.hpp), fwd
  bool record_spans = false;                     // set by the caller after reset(): fill `spans`
  std::vector<AttentionSpan> spans;              // host steady clock, in the order they ended
  // On CUDA the spans above are timed on the device: compute and waits between events on the compute
  // stream, transfers from the event at their post to the one after their wait. The events wait
  // here until resolve_device_times() (after the step has synchronized) turns them into the seconds
  // and spans above. Always empty on the CPU, where the host clock times everything directly.
  struct DeviceSpan {
    AttentionSpan::Kind kind = AttentionSpan::Kind::compute;
    std::string name;
    comm::DeviceTime begin, end;
  };
  std::vector<DeviceSpan> device_spans;
  void reset() { *this = AttentionStats{}; }
};

// Adds the device-timed spans of `stats` to its compute / comm / transfer seconds and, when it records
// spans, to `spans` on the host clock: `anchor` is a DeviceTime taken on the same device at the host
// time `anchor_host`, with the device idle (right after a synchronization), so device times map to
// host times by their distance from it. Waits for the last event; clears device_spans.
void resolve_device_times(AttentionStats& stats, const comm::DeviceTime& anchor,
                          std::chrono::steady_clock::time_point anchor_host);

namespace kernels {
class PlanCache;
}  // namespace kernels
class Layout;

struct AttentionContext {
  const comm::Communicator* comm = nullptr;  // the CP group (size W); never null
  MaskSpec mask;
  TokenMeta local;
  TokenMeta all;
  double scale = 0;                          // softmax scale, usually 1/sqrt(D); 0 means 1/sqrt(D)
  AttentionStats* stats = nullptr;           // optional; forward AND backward add to it, so it must
                                             // outlive the backward of every attend() call given it
  std::string nvtx_prefix;                   // "cp:<sharder>" for NVTX ranges
  // The step's block plans (make_plan_cache): built once per step from CPU-side metadata and shared by
  // every attend() call of the step, so no call plans (or synchronizes with the host) again. Null: each
  // attend() call plans from local / all itself.
  std::shared_ptr<const kernels::PlanCache> plans;
  bool tiled_kernels = false;                // every block on the tiled kernel (the fused kernels' CPU twin)
  // The layout's own map (sharders/layout.hpp, GlobalLayout::ranks concatenated): int64 [W*S] on the
  // CPU, the global stream position of each column of `all`. The head-parallel transports put the
  // tokens their all-to-all gathers in that order (a diagonal block is then one causal block).
  // Undefined: unknown, and they keep rank order (still correct: the mask reads the metadata).
  at::Tensor global_index{};
  // Every block on the tiled kernel with FlashAttention-2's 16-bit roundings (the scenario key
  // `kernels: flash_numerics`; kernels/attention/tiled_kernel.hpp FlashRounding): a GPU's bf16 flash
  // numerics, on any device. Wins over tiled_kernels. No effect on float32 / float64 inputs.
  bool flash_numerics = false;
  // This call's learned attention sinks (model.attention.sinks; kernels/attention/sink.hpp): [Hq] logits,
  // one per query head, differentiable; undefined: none. Applied once per query after every key block
  // is merged; the head-parallel transports take their head slice. Set per call by the layer's
  // AttentionFn (a copy of the step's context).
  at::Tensor sinks{};
  // Negative control only (sink_per_step): the sink is added after every merged block, not once.
  bool sink_every_step = false;
  // MLA's latent wire (model.attention.mla_wire: latent; kernels/attention/mla.hpp): the up-projection
  // W_up [Hq*(dn+dv), r], differentiable. Then attend() takes k = the latent [B, 1, S, r + dr] (c and
  // the shared RoPE key) and v undefined, moves the latent, and up-projects every key block it
  // attends (q's head dim is dn + dr; the output's head dim dv). Undefined: k and v are K and V (their
  // head dims may differ: MLA's expanded wire). Set per call by the layer's AttentionFn.
  at::Tensor kv_up{};
};

// Plans this rank's queries (`local`, [B, S]) against every rank's keys (`all`, [B, W*S]) under `mask`,
// on the CPU (metadata elsewhere is copied once), and moves what the kernels read to `device`.
[[nodiscard]] std::shared_ptr<const kernels::PlanCache> make_plan_cache(const MaskSpec& mask, const TokenMeta& local,
                                                                        const TokenMeta& all, int rank, int world,
                                                                        const at::Device& device);
// Block plans built from metadata in this process so far (the plan-reuse tests read it).
[[nodiscard]] int64_t metadata_plans_built();

// ---- Cost model: what the planner (harness/planner) asks a transport without running it ----
//
// Convention shared by every transport's time formula and the planner: a training step's attention
// compute is kStepFactor x its forward, of which the backward is kBackwardFactor x the forward
// (kernels/attention/flops.hpp, which owns the FLOP formula; peers-and-limits §9.1).

// One attention call of one rank, as the bytes formulas see it (element_size: bytes per q/k/v element).
struct CallShape {
  int64_t cp = 1, batch = 1, q_heads = 1, kv_heads = 1, local_tokens = 0, head_dim = 0, element_size = 2;
  // ring_window only (the sliding layers' halo, kernels/transports/window_halo.hpp): tokens of its own
  // block this rank sends, tokens of other ranks' blocks it receives, and the ring steps it exchanges
  // at, per pass. 0 for every other transport.
  int64_t halo_sent = 0, halo_received = 0, halo_steps = 0;
  // K/V values one token puts on the wire; 0: 2*kv_heads*head_dim (K and V of one head dim). MLA:
  // mla_wire_elements_per_token (kernels/attention/mla.hpp), expanded or latent. Every MLA-capable
  // transport's formula reads it (allgather, ring; a2a and hybrid with the two fields below).
  int64_t kv_token_elements = 0;
  // MLA only, for the head-parallel transports' all-to-alls of q and the output: V's (and the output's)
  // head dim (0: head_dim), and whether kv_token_elements is the latent (shared by every head, so
  // all-gathered inside a Ulysses group rather than split by head).
  int64_t v_head_dim = 0;
  bool latent_wire = false;
};

// One attention call (one layer) of one rank, as the time formula sees it. Seconds, bytes, B/s.
// c_fwd and c_local are borrowed: they must outlive the time_per_call() call they are given to.
struct CallCostInputs {
  int64_t cp = 1;                   // W
  double c_fwd_max = 0;             // s, the slowest rank's forward attention compute
  double fwd_bytes = 0;             // bytes one rank sends in the forward
  double bwd_bytes = 0;             // bytes one rank sends in the backward
  double bandwidth = 0;             // B/s per GPU and direction of the link the call uses (> 0)
  double latency_s = 0;             // s per message
  std::span<const double> c_fwd;    // s, every rank's forward compute; empty: one rank at c_fwd_max
  std::span<const double> c_local;  // s, each rank's forward against its own keys (same size as
                                    // c_fwd); empty: c_fwd[r] / W
  // Optional, from the planner's kernel model (harness/planner/kernel_model.hpp); each empty or the
  // size of c_fwd, for the same ranks (every rank, or a subset that holds the slowest):
  std::span<const double> c_bwd;      // s, each rank's backward compute; empty: kBackwardFactor * c_fwd[r]
  std::span<const double> merge_fwd;  // s, each rank's forward merge passes (fp32 partial outputs by
                                      // log-sum-exp, one per block); empty: 0
  std::span<const double> merge_bwd;  // s, each rank's backward accumulation passes (dQ, dK, dV); empty: 0
  double contention = 0;              // s of compute lost per s of link transfer that overlaps compute
  // s, one rank's forward / backward compute when the whole row's work is split evenly over heads:
  // the unsharded row's time / W under the same kernel model (0: not given). a2a computes exactly that
  // (every rank attends the whole sequence for H/W heads, whatever the layout's imbalance); hybrid
  // falls back to it when c_fwd does not cover every rank.
  double c_even_fwd = 0, c_even_bwd = 0;
  // Every rank's attention work (visible pairs or priced block area; all W ranks, in rank order), or
  // empty: hybrid scales the slowest rank's compute by its most loaded Ulysses group's mean work.
  std::span<const double> rank_work;
  // B/s of the link inside a group of TransportOptions::ulysses consecutive ranks (hybrid's all-to-all:
  // one node when U <= GPUs per node while its ring crosses nodes); 0: `bandwidth`.
  double group_bandwidth = 0;
  // The call's shape (the planner sets it; head_dim 0 = not given): the hybrid transport splits its
  // bytes between its all-to-alls and its ring with it.
  CallShape call;
};

// Predicted time of one attention call, fwd + bwd, in seconds. step_s includes the slowest rank's
// compute (kStepFactor * c_fwd_max without the optional inputs; else its forward + backward compute and
// merges); exposed_s is the communication not hidden behind it (step_s - that compute); transfer_s the
// time the bytes need on the link, overlapped or not. forward_s and forward_exposed_s: the same for the
// forward pass alone (an inference call), forward_s <= step_s.
struct CallTime {
  double step_s = 0, exposed_s = 0, transfer_s = 0;
  double forward_s = 0, forward_exposed_s = 0;
};

// Per rank of CallCostInputs: forward time (compute + merges) and backward time, honouring the
// defaults documented there. Shared by the transports' formulas.
struct RankPassTimes {
  std::vector<double> fwd, bwd;  // s, same ranks as in.c_fwd (one rank at c_fwd_max when c_fwd is empty)
  double fwd_max = 0, bwd_max = 0;
};
[[nodiscard]] RankPassTimes rank_pass_times(const CallCostInputs& in);

// One rank's share of a model's attention path, for the transport's activation memory.
struct ActivationShape {
  int64_t cp = 1, layers = 1, batch = 1, q_heads = 0, kv_heads = 0, local_tokens = 0, head_dim = 0;
  int64_t element_size = 2;  // bytes per K/V element (dK/dV: the accumulation dtype, see below)
  int64_t halo_sent = 0, halo_received = 0;  // ring_window only: as in CallShape
};

// How a transport instance is configured beyond its name (scenario keys; the planner's sweep).
struct TransportOptions {
  int64_t ulysses = 0;  // hybrid: the Ulysses degree U of the U x (W/U) mesh (required, divides W)
};

class Transport {
 public:
  virtual ~Transport() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Empty if supported; otherwise the reason this transport cannot evaluate the mask / dtype / device.
  [[nodiscard]] virtual std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                                       int64_t cp) const = 0;
  // Empty if this transport can split `q_heads` query and `kv_heads` key/value heads over a CP group of
  // `cp` ranks; otherwise a one-line reason naming the numbers (the head-parallel transports need
  // q_heads % (their all-to-all degree) == 0; scenario validation and the planner ask it).
  [[nodiscard]] virtual std::string unsupported_heads(int64_t /*cp*/, int64_t /*q_heads*/, int64_t /*kv_heads*/) const {
    return "";
  }
  // How many consecutive ranks split their tokens' attention work evenly over heads (one all-to-all
  // group): W for a2a, U for hybrid, 1 for the sequence-parallel transports. The planner averages the
  // layout's per-rank attention FLOPs over such groups; the runner measures the same.
  [[nodiscard]] virtual int64_t head_parallel_degree(int64_t /*cp*/) const { return 1; }
  // Empty if this transport can run on `layout`'s token order; otherwise the reason (ring_window reads
  // the mask's positions as stream positions, which a packed layout's are not).
  [[nodiscard]] virtual std::string unsupported_layout(const Layout& /*layout*/) const { return ""; }
  // Empty if this transport runs MLA attention (kernels/attention/mla.hpp) with K/V on `wire`; otherwise
  // the reason. allgather, ring, a2a and hybrid run both wires; the others refuse (see the .cpp of each).
  [[nodiscard]] virtual std::string unsupported_mla(MlaWire /*wire*/) const {
    return "MLA (separate q/k and v head dims, the latent wire) is implemented on allgather, ring, a2a and "
           "hybrid only";
  }
  [[nodiscard]] virtual at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const AttentionContext& ctx) const = 0;
  // The step's block plans in the form this transport's attend() reads (AttentionContext::plans): by
  // default this rank's queries against every rank's key block (make_plan_cache); the head-parallel
  // transports plan the sequence their all-to-all gathers instead, in the global order of
  // `global_index` (AttentionContext::global_index; undefined: rank order).
  [[nodiscard]] virtual std::shared_ptr<const kernels::PlanCache> make_plans(const MaskSpec& mask,
                                                                            const TokenMeta& local,
                                                                            const TokenMeta& all,
                                                                            const at::Tensor& global_index, int rank,
                                                                            int world, const at::Device& device) const;
  // Bytes this rank sends for one forward + backward of one attention call (the transport's formula).
  [[nodiscard]] virtual int64_t bytes_per_call(const CallShape& shape) const = 0;
  // The forward's part of bytes_per_call; the rest is backward traffic. 0 <= it <= bytes_per_call.
  [[nodiscard]] virtual int64_t forward_bytes_per_call(const CallShape& shape) const = 0;
  // The transport's time formula for one call (docs/planner.md, "Step time"): how its transfers
  // overlap the compute. At W = 1 nothing moves: step_s = kStepFactor * c_fwd_max.
  [[nodiscard]] virtual CallTime time_per_call(const CallCostInputs& in) const = 0;
  // Bytes of activation memory the transport itself holds at a rank's peak, all layers: buffers it keeps
  // for the backward beyond each layer's q, k, v, output and log-sum-exp (which the planner counts), plus
  // the largest set of transient buffers in flight. 0 at W = 1.
  [[nodiscard]] virtual int64_t peak_activation_bytes(const ActivationShape& shape) const = 0;
};

// Lifetime: attend() builds an autograd node that keeps its own copies of the Communicator (a reference
// on the c10d backend), the mask and the metadata; only `stats` is borrowed. Backward is collective:
// every rank must run the backward of the same attend() calls in the same order.
//
// Transports (one file each in kernels/; both compute scores, softmax, partial outputs, log-sum-exp
// and dK/dV accumulation in float32 for 16-bit inputs, float64 for float64):
//   allgather  kernels/transports/allgather.cpp  one all-gather of K/V (overlapping the local block), blocks merged
//                                     online; backward reduce-scatters dK/dV.
//   ring       kernels/transports/ring.cpp       K/V blocks travel around the ring (double-buffered send/recv posted
//                                     before each block's maths); backward sends K/V round again and
//                                     dK/dV travel with their block back to its owner.
//   a2a        kernels/transports/a2a.cpp        Ulysses: all-to-all to head-sharded [B, H/W, W*S, D], whole-sequence
//                                     attention (one block), all-to-all back (head_parallel.hpp).
//   hybrid     kernels/transports/hybrid.cpp     Ulysses x ring: all-to-all inside groups of U consecutive ranks, the
//                                     ring code across the W/U groups, all-to-all back.
//   ring_window kernels/transports/windowed_ring.cpp  sliding-window masks only: the ring's steps cut to those
//                                     the window reaches, each sending only the halo (the keys the receiver's
//                                     queries see); halos kept for the backward, dK/dV of the halo sent home.
//   a2a_rank_order (a2a_rank_order.cpp): negative control, a2a with rank order taken for global order.
// All skip key blocks whose mask is empty and run all-visible blocks without a mask tensor.
//
// Cost formulas (kernels/transports/kv_passing_costs.cpp: allgather, ring; head_parallel_costs.cpp: a2a,
// hybrid), with kv = 2*B*Hkv*S*D*element_size, dkv the same in the accumulation dtype (element
// size max(4, element_size)), a = latency, Bw = bandwidth, c = c_fwd_max, per call:
//   bytes (fwd + bwd)   allgather (W-1)*(kv + dkv)                ring (W-1)*(2*kv + dkv)
//   forward bytes       allgather (W-1)*kv                        ring (W-1)*kv
//   step_s              allgather max_r [max(T_ag, local_r + w T_ag) + f_r - local_r + b_r] + T_rs,
//                                 T_ag = (W-1) a + fwd/Bw, T_rs = (W-1) a + bwd/Bw
//                       ring      f + b + (W-1) [max(w x_f, a + x_f - f/W) + max(w x_b, a + x_b - b/W)],
//                                 x_f = fwd/(W-1)/Bw, x_b = bwd/(W-1)/Bw
//   with f_r = c_fwd_r + merge_fwd_r, b_r = c_bwd_r + merge_bwd_r (defaults: c_r and 2.5 c_r), f and b
//   their maxima over ranks, w = contention (0 by default: the formulas of a pure pairs model)
//   peak activation     allgather layers*(W-1)*kv + W*dkv         ring 2*kv + 2*dkv
// ring_window (sliding-window layers; window_halo.hpp gives h_s / h_r, the tokens a rank sends / receives,
// and n, its ring steps; kvt, dkvt: kv and dkv of one token):
//   bytes h_s*kvt + h_r*dkvt (the halo's K/V forward, its dK/dV home in the backward), forward h_s*kvt
//   step_s as allgather's with T_ag = n a + fwd/Bw for both passes (every step posted before the local block)
//   peak activation  layers*h_r*kvt (halos kept for the backward) + kv + dkv + (h_s + h_r)*dkvt
// Head-parallel (U = W for a2a, R = W/U ring positions, Hk = lcm(Hkv, U) replicated kv heads, kv' and
// dkv' the blocks above with Hk, A = (U-1)/U * B*S*D*e * 2*(Hq + Hk) one pass's two all-to-alls):
//   bytes 2A + (R-1)(2 kv' + dkv'); forward A + (R-1) kv'
//   step_s  f + b + 2 T_a2a + the ring's exposure over R positions, T_a2a = 2 (U-1) a + A / Bw_group,
//           f, b: a2a the even split (c_even_*), hybrid that scaled by its most loaded group (rank_work)
//   peak activation  layers*(S*D*(Hq + 2Hk)*e + S*D*Hq*max(4,e) + 4*S*Hq)*B + 2*B*S*D*(Hq + 2Hk)*e
//           (+ 2 kv' + 2 dkv' when R > 1)
//
// Registry (kernels/transports/registry.cpp): a transport is one file here plus one line there; the
// planner and the CLI list known_transports(). Unknown names throw UsageError listing the known ones.
[[nodiscard]] std::shared_ptr<const Transport> make_transport(const std::string& name,
                                                            const TransportOptions& options = {});
// Every registered name that runs every mask, negative controls included (they are wrong on purpose: see
// below). make_transport also takes the window_transports().
[[nodiscard]] std::vector<std::string> known_transports();
// The transports that run sliding_window masks only (ring_window): the sliding_attention layers' choice
// (the scenario's transport_sliding), priced by the planner for sliding-window masks.
[[nodiscard]] std::vector<std::string> window_transports();
// True for transports registered as negative controls (the planner and recommendations skip them).
[[nodiscard]] bool is_negative_control_transport(const std::string& name);
// known_transports() without the negative controls: what the planner prices.
[[nodiscard]] std::vector<std::string> planned_transports();
// True for the transports that take the `ulysses` option (hybrid).
[[nodiscard]] bool takes_ulysses(const std::string& name);

}  // namespace cpbench
