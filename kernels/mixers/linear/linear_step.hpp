#pragma once
// What every linear-recurrence mixer (Mamba-2, Gated DeltaNet) shares under context parallelism, part 2:
// the step context and the two CP strategies' data movement, written once.
//
//   channel-parallel (Mamba's hidden_parallel, GDN's head_parallel; the seed's `mamba` module, PyTorch's
//   _context_parallel/_gated_delta.py): one all-to-all turns this rank's tokens of every channel,
//   [R, S/W, ...], into every token of this rank's channels, [R, S, ...]; the received sequence is in
//   rank order and goes to global order with the shard's own map (GlobalLayout::inverse()); the layer
//   convolves and scans the whole stream for its heads; the result goes back to rank order
//   (GlobalLayout::ranks) and a second all-to-all returns [R, S/W, out channels]. Which channels a rank
//   takes is the mixer's (its heads and their groups / key heads).
//   state passing: kernels/mixers/linear/state_passing.hpp.
//
// Every index tensor a layer uses is built here once per step on the host (linear_host_tensor), none
// inside a layer.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.hpp"
#include "kernels/mixers/linear/linear_costs.hpp"
#include "kernels/mixers/linear/scan_plan.hpp"
#include "kernels/mixers/mixer_step.hpp"
#include "sharders/layout.hpp"

namespace cpbench {

struct StatePassingPlan;  // kernels/mixers/linear/state_passing.hpp

struct LinearStepContext : MixerStepContext {
  int64_t chunk = 64;  // the chunked form's Q
  ScanPlan plan;  // over the stream this rank scans: channel-parallel the whole stream (global order),
                  // state passing this rank's own tokens (local order, a reset at each chunk start)
  // channel-parallel (and one rank):
  at::Tensor to_global;      // int64 [P]: rank-order index of global position p; undefined: identity
  at::Tensor to_rank_order;  // int64 [P]: global position of rank-order element i; undefined: identity
  at::Tensor send_channels;  // int64: proj channels sent, block q = rank q's
  at::Tensor conv_channels;  // int64: this rank's conv1d channels (the conv's coordinates)
  at::Tensor heads;          // int64 [H/W]: this rank's heads (Mamba heads, GDN value heads)
  // state passing:
  std::shared_ptr<const StatePassingPlan> state_passing;
  bool drop_incoming_state = false;  // the mixer's state-dropped negative control on this rank
};

// One mixer's step context: the shared part, the case's strategy and what one layer sends under it
// (`shape`, by linear_cp_bytes of the mixer's `terms`; the runner checks it every step). `Letter` keeps two
// mixers with the same strategies and shape (GDN, KDA) apart as types.
template <class Strategy, class Shape, char Letter>
struct LinearStepContextOf : LinearStepContext {
  static constexpr char kLetter = Letter;
  Strategy strategy{};  // the enum's first value: the channel-parallel default
  Shape shape;
  LinearCpTermsFn<Strategy, Shape> terms = nullptr;
  [[nodiscard]] int64_t bytes_per_layer() const override { return linear_cp_bytes(terms, strategy, shape).total(); }
  [[nodiscard]] std::string strategy_name() const override { return to_string(strategy); }
};

// How a mixer's CP context is asked for: the strategy and the negative controls a linear mixer can run.
template <class Strategy>
struct LinearCpOptions {
  Strategy strategy{};
  // state_passing: true is the negative control that makes this rank ignore the state arriving at its
  // chunks (it scans them from zero as if each started the sequence).
  bool drop_incoming_state = false;
  // channel-parallel: false is the negative control that scans the rank-order concatenation as if it
  // were the sequence (Mamba's ssm_rank_order).
  bool undo_chunk_order = true;
};

// Which proj channels rank q of W takes under channel-parallel CP; `conv_coords`: the same channels in
// the conv weight's coordinates (without the non-conv channels).
using RankChannels = std::function<std::vector<int64_t>(int64_t W, int64_t q, bool conv_coords)>;

// Appends start, start + 1, ..., start + n - 1 to `out` (a rank's slice of one proj channel block).
void push_range(std::vector<int64_t>& out, int64_t start, int64_t n);

// What a linear mixer's step contexts are built from: its layer's conv width, chunk and heads, which
// channels a rank takes under channel-parallel CP, and why that strategy cannot split it at cp ranks.
struct LinearLayerSpec {
  const char* who = "";  // the mixer, for messages ("mamba")
  int64_t conv = 1, chunk = 64, heads = 1;
  RankChannels channels;
  std::function<std::string(int64_t cp)> split_reason;
};
// The single-rank context (the reference): the batch's rows as given, `meta` [B, S].
void fill_single_rank_context(LinearStepContext& ctx, const LinearLayerSpec& spec, const TokenMeta& meta,
                              const MaskSpec& mask, at::ScalarType dtype, const at::Device& device);
// How a CP context is asked for: the strategy (state passing or channel-parallel) and the mixer's
// negative controls (drop the incoming state on this rank; scan the rank-order concatenation).
struct LinearCpRequest {
  bool state_passing = false;
  bool drop_incoming_state = false;
  bool undo_chunk_order = true;
};
// The CP context after the shard: `g` its layout, `all_meta` every rank's metadata in rank order
// ([R, W * S_local]). Returns the chunks per rank state passing exchanges (1 for channel-parallel).
// Throws naming the mixer's key when channel-parallel cannot split the layer.
[[nodiscard]] int64_t fill_cp_context(LinearStepContext& ctx, const LinearLayerSpec& spec,
                                      const comm::Communicator& comm, const GlobalLayout& g,
                                      const TokenMeta& all_meta, const MaskSpec& mask, at::ScalarType dtype,
                                      const at::Device& device, std::string nvtx, const LinearCpRequest& request);

// Channel-parallel forward, first half: proj [R, S_local, width] -> [R, L, sent channels] in scan order,
// this rank's channels of every token (NVTX `<nvtx>:<phase>`). Counts the bytes it sends.
[[nodiscard]] at::Tensor channel_parallel_gather(const at::Tensor& proj, const LinearStepContext& ctx,
                                                 const char* phase, const char* who);
// Second half: y [R, L, c] in scan order -> [R, S_local, W * c] (every rank's channels of this rank's
// tokens). Counts the bytes it sends.
[[nodiscard]] at::Tensor channel_parallel_return(const at::Tensor& y, const LinearStepContext& ctx, const char* phase);

// Each token's conv window: xs [R, L, cc] (compute dtype) -> taps [R, L, K, cc] through plan.conv_src
// (rows of xs zero-extended by one zero row per row).
[[nodiscard]] at::Tensor conv_taps(const at::Tensor& xs, const ScanPlan& plan, int64_t K);

}  // namespace cpbench
