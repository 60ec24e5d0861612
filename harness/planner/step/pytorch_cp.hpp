#pragma once
// PyTorch's own context parallelism as a stack of its own (`cpbench plan --gpus N --stack pytorch-cp`;
// docs/planner.md, "The stack: cpbench's kernels or PyTorch's context_parallel"): what
// torch.distributed.tensor.experimental.context_parallel of torch 2.6 (the December 2024 nightlies
// torchtitan's CP rows ran) does per attention layer and CP rank, priced term by term instead of cpbench's
// transports. One causal layer at CP size W, s local tokens (round-robin / head-tail: two chunks of
// c = s / 2), H query heads, K/V with Hk heads as the op sees them (torchtitan expands them to the query's
// heads with repeat_kv before SDPA), head dim d, element size e; E = H d and K = Hk d elements per row:
//
//   calls      one SDPA flash call per CP step and pass (W per pass): step 0 the local q (s rows) against
//              the local k (s keys), is_causal (a triangle of s); each step i >= 1 one dense call: rank r
//              runs q (s rows) x its first chunk of the step's keys (c) when i <= r, else its second chunk
//              of q (c rows) x all the step's keys (s); each priced by the cluster's kernel model
//              (block_forward_s: launch + size-dependent rate), backward = launch + 2.5 x the forward's work;
//              the non-local calls at `pytorch_cp_remote_call_efficiency` of that (fitted, constants.hpp)
//   merges     forward (_SDPAMerger, eager fp32): step 0 out -> fp32 (e + 4 B per out element, s rows);
//              i <= r: -> fp32, then out - sigmoid(lse_i - lse) * (out - out_i) (12 + 8 + 12 B) = e + 36
//              over s rows; i > r: the same over c rows, then torch.cat rebuilds the whole fp32 out (8 B,
//              s rows); the result -> e (4 + e, s rows). The lse's own ops (H per row, not H d) are left out
//   copies     k, v .contiguous() once per pass and torch.cat([k, v]) at every step but the last, in both
//              passes (read + write, 4 s K e each)
//   backward   zeros for fp32 dq, dk, dv (4 B per element written); per call FlashAttention-2's own dO.O
//              and fp32 dQ-accumulator passes (14 B per dq element of its rows); accumulation: dk, dv += (10
//              B per element over s rows, or over c rows plus a torch.cat of the whole fp32 buffer, 8 B, when
//              i <= r), dq += (10 B over s rows, or c rows + an 8 B cat over s when i > r); the fp32
//              torch.cat([dk, dv]) each step (8 B per element of 2 s K); the casts back (4 + e)
//   wire       rotate `allgather` (the default): one all-gather of the flat [k, v] per pass, (W - 1) 2 s K e
//              bytes, issued before step 0 and waited at step 1: it hides behind the local call only;
//              rotate `ring` (all-to-all permutes): a hop of 2 s K e per step, waited at the next step.
//              Backward: the K/V again (the same rotate), and dk, dv travel a ring of fp32 permutes: W hops of
//              2 s K 4 bytes, each waited one step later (hidden behind that step's calls), the last exposed
//   HBM        every memory-bound byte above at the cluster's HBM bandwidth
//
// Per rank the forward and the backward are each summed over its W steps and the slowest rank is the
// layer's (ranks meet at every collective).
#include <cstdint>

#include "harness/planner/presets.hpp"

namespace cpbench::plan::step {

struct TorchCpQuery {
  int64_t cp = 1;            // W >= 2
  int64_t local_tokens = 0;  // s (even: two chunks)
  int64_t heads = 0;         // H, per GPU (heads / tp)
  int64_t kv_heads = 0;      // Hk as the op sees them (torchtitan: = heads)
  int64_t head_dim = 0;
  int64_t elem_bytes = 2;
  bool ring_rotate = false;  // the all-to-all rotate instead of the all-gather
};

// One layer, one row, one GPU (the slowest rank), seconds and bytes.
struct TorchCpLayer {
  double fwd_calls_s = 0, bwd_calls_s = 0;  // SDPA flash calls (kernel model; non-local ones at the efficiency)
  double fwd_hbm_s = 0, bwd_hbm_s = 0;      // merges, accumulations, copies, casts, zeros at HBM bandwidth
  double fwd_exposed_s = 0, bwd_exposed_s = 0;  // the wire not hidden behind the calls
  double bytes = 0;                         // sent per rank, forward + backward
  double fwd_hbm_bytes = 0, bwd_hbm_bytes = 0;  // what the HBM terms move (slowest rank)
  [[nodiscard]] double fwd_compute_s() const { return fwd_calls_s + fwd_hbm_s; }
  [[nodiscard]] double compute_s() const { return fwd_calls_s + bwd_calls_s + fwd_hbm_s + bwd_hbm_s; }
  [[nodiscard]] double step_s() const { return compute_s() + fwd_exposed_s + bwd_exposed_s; }
};

[[nodiscard]] TorchCpLayer pytorch_cp_layer(const Cluster& cluster, const TorchCpQuery& q);

}  // namespace cpbench::plan::step
