#pragma once
// What every linear-recurrence mixer (Mamba-2, Gated DeltaNet) shares under context parallelism, part 3:
// state passing (Mamba: Megatron-LM PR #6808, fms-hf-tuning PR #642; GDN: flash-linear-attention PR
// #1221, Megatron-LM #3282). The sequence stays split as the layout split it.
//
// A rank's tokens (GlobalLayout::ranks[r], local order) fall into chunks: maximal runs of consecutive
// global stream positions (contiguous_runs, scan_plan.hpp). Per layer, on each rank:
//   1. conv: each token's window is its K-1 earlier real tokens of its group (the same rule as
//      make_scan_plan over the global stream). Earlier tokens of another chunk are among that chunk's last
//      K-1 real tokens (everything between them and the token is in the window), so one all-gather of
//      every chunk's last K-1 real conv inputs (the halo, [slots, R, K-1, conv_channels]) supplies them
//      (state_passing_taps).
//   2. the mixer runs its recurrence over this rank's tokens, each chunk from a zero state (the plan's
//      local groups restart at each chunk start as well as where the global groups change), and
//      summarises each chunk: the affine map from the state entering it to the state leaving it (Mamba:
//      a decay and a state; GDN: a transition and a contribution), the map's linear part 0 where the
//      chunk holds a reset (carry_keep).
//   3. one all-gather of the summaries (gather_chunk_summaries); every rank composes them in stream
//      order (StatePassingPlan::stream_order, not rank order) and takes the state arriving at each of
//      its chunks (compose_incoming).
//   4. the mixer's correction: a token that no reset separates from its chunk's start (prefix_keep)
//      adds what the incoming state contributes to its output (the delta rule reruns its chunk's
//      factors from that state instead).
// Both all-gathers are all_gather_autograd: their backward reduce-scatters the gradients of the
// summaries and halos to the chunks they came from, so dL/d(state) reaches the earlier chunks' tokens.
// Rows of an unpacked batch are independent streams with the same chunks; a packed thd stream is one row.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/mixers/linear/linear_step.hpp"
#include "sharders/layout.hpp"

namespace cpbench {

// This rank's part of one step, built once per step on the host from the gathered metadata.
struct StatePassingPlan {
  int64_t cp = 1, rank = 0;
  int64_t rows = 0;    // R
  int64_t length = 0;  // L: this rank's tokens per row
  int64_t slots = 1;   // chunk slots per rank in the exchange: the most chunks any rank owns (max_runs_per_rank)
  int64_t conv = 1;    // K
  struct Chunk {
    int64_t begin = 0, length = 0;  // local token range [begin, begin + length)
    int64_t prefix = 0;  // the most leading tokens (over rows) that read the incoming state
  };
  std::vector<Chunk> chunks;          // this rank's chunks, local order (they tile [0, L))
  // Gathered slot ids (q * slots + j: rank q's chunk j) of every chunk of the stream, in stream order.
  std::vector<int64_t> stream_order;
  // For each own chunk j, its index in stream_order.
  std::vector<int64_t> own_position;
  ScanPlan local;            // group (local scan groups), valid and conv_src over this rank's [R, L];
                            // conv_src indexes [R*L own inputs | W*slots*R*(K-1) gathered halo rows | a zero row]
  at::Tensor tail_src;      // int64 [slots*R*(K-1)]: rows of [R*L own inputs | zero row] this rank sends as
                            // its halo, chunk j row r tap k at (j*R + r)*(K-1) + k (k = K-2: the last real token)
  at::Tensor prefix_keep;   // bool [R, L]: the token reads its chunk's incoming state
  at::Tensor summary_keep;  // bool [R, L]: the token feeds its chunk's final state (no reset after it in the chunk)
  at::Tensor carry_keep;    // bool [slots, R]: the chunk holds no reset, so the state before it carries through
  bool drop_incoming_state = false;  // the mixer's state-dropped negative control on this rank
};

// `g`: the shard's layout; `all_meta` [R, W * L] every rank's metadata in rank order (the runner's
// gather); `document_reset` as make_scan_plan; `conv` K. `drop_incoming_state`: the negative control.
[[nodiscard]] std::shared_ptr<const StatePassingPlan> make_state_passing_plan(
    const GlobalLayout& g, const TokenMeta& all_meta, bool document_reset, int64_t conv, int64_t rank,
    at::ScalarType dtype, const at::Device& device, bool drop_incoming_state = false);

// The step's plan (ctx.state_passing) for a layer of conv width `conv`; throws naming `who` (the mixer)
// and the rank when the context has none or was planned for another conv width.
[[nodiscard]] const StatePassingPlan& step_state_passing_plan(const LinearStepContext& ctx, int64_t conv,
                                                            const char* who);

// Step 1: the conv's taps over this rank's tokens. conv_in [R, L, cc] (this rank's conv inputs, any
// dtype) -> [R, L, K, cc] in conv_in's dtype; other ranks' inputs come from one all-gather of every
// chunk's halo (NVTX `<nvtx>:<phase>`; W = 1 or K = 1: no exchange). Counts the bytes it sends.
[[nodiscard]] at::Tensor state_passing_taps(const at::Tensor& conv_in, const LinearStepContext& ctx, const char* phase);

// Step 3, the exchange: `own` holds each own chunk's summary (local order, equal shapes [R, ...]); padded
// to the plan's slots with zeros and all-gathered -> [W * slots, R, ...], slot q*slots + j = rank q's
// chunk j (NVTX `<nvtx>:<phase>`). Counts the bytes it sends.
[[nodiscard]] at::Tensor gather_chunk_summaries(std::vector<at::Tensor> own, const LinearStepContext& ctx,
                                                const char* phase);

// Step 3, the composition: walks the gathered summaries `all` in stream order from `state` (the zero
// state), state = apply(summary, state), up to this rank's last chunk; returns the state arriving at each
// own chunk (local order).
using ComposeStep = std::function<at::Tensor(const at::Tensor& summary, const at::Tensor& state)>;
[[nodiscard]] std::vector<at::Tensor> compose_incoming(const StatePassingPlan& sp, const at::Tensor& all,
                                                       at::Tensor state, const ComposeStep& apply);

}  // namespace cpbench
