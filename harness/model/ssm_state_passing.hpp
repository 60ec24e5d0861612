#pragma once
// State-passing context parallelism for the Mamba layer (ssm_cp: state_passing; Megatron-LM PR #6808,
// fms-hf-tuning PR #642). The sequence stays split as the layout split it.
//
// A rank's tokens (GlobalLayout::ranks[r], local order) fall into chunks: maximal runs of consecutive
// global stream positions (contiguous_runs, ssm_cp_costs.hpp). Per layer, on each rank:
//   1. conv: each token's window is its K-1 earlier real tokens of its group (the same rule as
//      make_ssm_plan over the global stream). Earlier tokens of another chunk are among that chunk's last
//      K-1 real tokens (everything between them and the token is in the window), so one all-gather of
//      every chunk's last K-1 real conv inputs (the halo, [slots, R, K-1, conv_channels]) supplies them.
//   2. scan this rank's tokens with every head, each chunk from a zero state (ssm_scan over local groups
//      that restart at each chunk start as well as where the global groups change).
//   3. summary of each chunk c, per row and head: its final state S_c (the tokens after its last reset,
//      decayed to its end) and its carry a_c = exp(sum of dt A over the chunk), 0 when the chunk holds a
//      reset (its first token included): the state after c is a_c * (state before c) + S_c.
//   4. one all-gather of the summaries [slots, R, H, P*N + 1]; every rank runs the composition over all
//      chunks in stream order and takes the state arriving at each of its chunks.
//   5. correction: a token t of chunk c that no reset separates from the token before c's start adds
//      C[t] . (exp(sum of dt A over [start, t]) * state arriving at c).
// Both all-gathers are all_gather_autograd: their backward reduce-scatters the gradients of the states
// and halos to the chunks they came from, so dL/d(state) reaches the earlier chunks' tokens.
// Rows of an unpacked batch are independent streams with the same chunks; a packed thd stream is one row.
// Pad slots are transparent (dt = 0, no conv input) exactly as in the hidden-parallel layer.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/model/mamba.hpp"
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
  SsmPlan local;            // group (local scan groups), valid and conv_src over this rank's [R, L];
                            // conv_src indexes [R*L own inputs | W*slots*R*(K-1) gathered halo rows | a zero row]
  at::Tensor tail_src;      // int64 [slots*R*(K-1)]: rows of [R*L own inputs | zero row] this rank sends as
                            // its halo, chunk j row r tap k at (j*R + r)*(K-1) + k (k = K-2: the last real token)
  at::Tensor prefix_keep;   // bool [R, L]: the token reads its chunk's incoming state
  at::Tensor summary_keep;  // bool [R, L]: the token feeds its chunk's final state (no reset after it in the chunk)
  at::Tensor carry_keep;    // bool [slots, R]: the chunk holds no reset, so the state before it carries through
  bool drop_incoming_state = false;  // the negative control ssm_state_dropped on this rank
};

// `g`: the shard's layout; `all_meta` [R, W * L] every rank's metadata in rank order (the runner's
// gather); `document_reset` as make_ssm_plan; `conv` K. `drop_incoming_state`: the negative control.
[[nodiscard]] std::shared_ptr<const StatePassingPlan> make_state_passing_plan(
    const GlobalLayout& g, const TokenMeta& all_meta, bool document_reset, int64_t conv, int64_t rank,
    at::ScalarType dtype, const at::Device& device, bool drop_incoming_state = false);

// The SSM part of one layer under state passing: proj [R, L, in_proj_width] -> y [R, L, d_inner] before
// the gate. Collective over ctx.comm (two all-gathers forward, two reduce-scatters backward; K = 1: one).
[[nodiscard]] at::Tensor state_passing_forward(const at::Tensor& proj, const SsmParams& params,
                                               const SsmConfig& config, const SsmStepContext& ctx);

}  // namespace cpbench
