#pragma once
// The planner's cost model (docs/planner.md, "The cost model"): per (layout, W) the work of every rank,
// counted with the layout code the runner shards with (sharders/) under the transports' mask semantics
// (sharders/mask_area.hpp); per transport, the bytes, time and activation memory that the transport's
// own formulas give (kernels/transports/transport.hpp: bytes_per_call, forward_bytes_per_call,
// time_per_call, peak_activation_bytes). This file names no transport: it asks the one it is given.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/planner/dsa_stages.hpp"
#include "harness/planner/kernel_model.hpp"
#include "harness/planner/plan_types.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/layout.hpp"
#include "sharders/mask_area.hpp"

namespace cpbench::plan {

// Per (sharder, W): the layout and its work per rank, shared by every transport. Per rank r:
// pairs[r] visible (q, k) pairs of its queries, local_pairs[r] those against its own keys, blocks[r]
// non-empty (local queries x one rank's keys) blocks (Kernel::blocks only), segments[r] contiguous
// one-document runs. P = padded length, s = local tokens. Kernel::fitted only: priced[i] is a rank
// whose blocks against every rank are block_areas[i] ([W] each): every rank when W * P <= 2^22, else
// kPricedRanks ranks that hold the most visible pairs, the two ends and two in between (the kernel model
// prices those; the slowest rank is assumed among them).
struct LayoutWork {
  int64_t P = 0, s = 0;
  std::vector<int64_t> pairs, local_pairs, blocks, segments;
  std::vector<int64_t> priced;
  std::vector<std::vector<mask_area::BlockArea>> block_areas;
  int64_t runs_per_rank = 0;  // most contiguous runs of stream positions on a rank (max_runs_per_rank; with ssm_runs)
  // A sliding-window mask's halo (kernels/transports/window_halo.hpp; with window_halo): the most tokens a
  // rank sends / receives and the most ring steps it exchanges at (ring_window's CallShape). 0 otherwise.
  int64_t halo_sent = 0, halo_received = 0, halo_steps = 0;
  // A DSA model's two stages per rank (dsa_stages.hpp; with dsa): one layer's forward FLOPs.
  DsaRankWork dsa;
};
inline constexpr size_t kPricedRanks = 8;

// Unpacked layouts at one W often pad to the same length and then share the stream and its
// per-position visible counts; building them is most of a case's cost at 1M tokens. One cache per W.
class StreamCache {
 public:
  struct Entry {
    Stream stream;
    std::vector<int64_t> visible;
  };
  const Entry& get(const GlobalLayout& g, const std::vector<int64_t>& docs, const MaskSpec& mask);

 private:
  static Entry make(const GlobalLayout& g, const std::vector<int64_t>& docs, const MaskSpec& mask);
  std::map<int64_t, Entry> unpacked_;
  Entry packed_;
};

// Peak attention-path activation bytes of one rank for one row (batch 1) of `local_tokens` tokens at
// CP size `cp`, element size `element_size`, all attention layers (ModelShape::attention_layers()): what each layer keeps for the backward plus
// the transport's own buffers (docs/planner.md, item 9). PlanCase::peak_activation_bytes, and
// admission control (harness/runner/admission.hpp), so the planner and the refusal to start agree.
// halo_sent / halo_received: ring_window's halo (LayoutWork), 0 for the other transports.
[[nodiscard]] int64_t attention_activation_bytes(const ModelShape& model, int64_t local_tokens, int64_t cp,
                                                 int64_t element_size, const Transport& transport,
                                                 int64_t halo_sent = 0, int64_t halo_received = 0);
// The same for a registered transport name.
[[nodiscard]] int64_t attention_activation_bytes(const ModelShape& model, int64_t local_tokens, int64_t cp,
                                                 int64_t element_size, const std::string& transport);

// The layout at W over a row of seq_len tokens with documents `docs` and its work per rank. A layout
// that rejects the request throws UsageError. `ssm_runs`: also count runs_per_rank (state passing's chunks).
// `window_halo`: also count a sliding-window mask's halo on an unpacked layout (ring_window is planned).
[[nodiscard]] LayoutWork layout_work(const Layout& layout, int64_t W, int64_t seq_len, const std::vector<int64_t>& docs,
                                     const MaskSpec& mask, Kernel kernel, StreamCache& cache, bool ssm_runs = false,
                                     bool window_halo = false, const dsa_costs::DsaDims* dsa = nullptr);

// The time one device takes for the unsharded row (one call per layer, all layers) under the request's
// kernel model and pass: what a case's ideal_s divides by W. `row_pairs` = visible pairs of the row,
// priced as one block of seq_len rows and keys (a causal row of one document is a triangle, a full row
// dense, any other row masked).
[[nodiscard]] double unsharded_time(const PlanRequest& r, int64_t row_pairs);
// One attention call (one layer) over one block of row_len x row_len with row_pairs visible pairs, all
// heads, under the request's kernel model: forward and backward seconds.
struct RowPassTimes {
  double fwd = 0, bwd = 0;
};
[[nodiscard]] RowPassTimes row_pass_times(const PlanRequest& r, int64_t row_pairs, int64_t row_len);

// One case: `sharder`'s work `w` at W moved and timed by `transport` (a registered name), for the
// request's model, cluster, kernel model and pass; element_size = bytes per K/V element of the request's
// dtype; ideal_s = the unsharded step time / W. Leaves `rank` at 0 (the recommendation ranks).
// `ulysses`: hybrid's Ulysses degree (0 for the other transports); the case's transport then reads
// "hybrid-u<N>".
[[nodiscard]] PlanCase make_case(const PlanRequest& r, int64_t element_size, const LayoutWork& w,
                                 const std::string& sharder, const std::string& transport, int64_t W, double ideal_s,
                                 int64_t ulysses = 0);

// The exposed-communication estimate of one attention call by `transport` (a registered name; unknown:
// UsageError listing the known ones): its time_per_call with the slowest rank's forward compute
// `c_fwd_max` (s), forward / backward bytes sent per rank, bandwidth (B/s), latency (s) and each
// rank's forward compute and local-block forward compute (may be empty, see CallCostInputs).
// step_s includes the kStepFactor (3.5) * compute.
using cpbench::CallTime;
[[nodiscard]] CallTime call_time(const std::string& transport, int64_t cp, double c_fwd_max, double fwd_bytes,
                                 double bwd_bytes, double bandwidth, double latency_s,
                                 const std::vector<double>& c_fwd = {}, const std::vector<double>& c_local = {});

}  // namespace cpbench::plan
