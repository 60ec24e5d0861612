#pragma once
// A case's numbers from what its ranks measured: throughput, the step's parts, work and rate (FLOPs
// visible and computed, TFLOP/s, MFU), bytes, imbalance, and the check of every rate against the
// hardware. Reads plain records and writes RunResult (metrics, ranks, status); reporters read that.
//
// Definitions (docs/measurement.md):
//   step_s                     median of the CP group's step time (its slowest rank's, per step)
//   attention_s                the slowest rank's transport time per step: forward + backward over all
//                              layers, compute + time blocked on communication
//   ssm_s                      the slowest rank's recurrent mixers' sections (scan + collectives), fwd + bwd
//   other_s                    step_s - attention_s - ssm_s (projections, MLP, loss, shard, all-reduce)
//   attention_flops_visible    per rank and step, training (fwd + bwd): the visible (q, k) pairs'
//                              FLOPs, the FlashAttention convention (causal ~ half)
//   attention_flops_computed   the same for the whole tiles and bands the kernels computed
//   attention_kernel_efficiency  visible / computed (summed over ranks)
//   attention_tflops_per_s     visible FLOPs / attention_s; per rank, and the slowest rank's
//   tokens_per_step            real tokens of one replica's (the CP group's) batch
//   tokens_per_s               tokens_per_step x dp / step_s: every replica's
//   model_tflops_per_s         (6 N tokens + visible attention FLOPs + the mixers' own FLOPs) x dp / step_s,
//                              every replica's (model_flops is one replica's); N = parameters in matrix
//                              products (all but the embedding table)
//   model_flops                real tokens and the work rule's attention pairs only (sharders/mask.hpp:
//                              padding a layout inserts is hardware work, in attention_flops_computed)
//   mfu                        flops_utilization(model_flops x dp, step_s, cp x dp, peak): the job's model
//                              FLOP/s over cp x dp x the peak FLOP/s of one rank in the case's dtype
//   attention_mfu              flops_utilization(sum over ranks of attention_flops_visible, attention_s,
//                              cp, peak)
#include <map>
#include <string>
#include <vector>

#include "harness/runner/case_context.hpp"
#include "harness/runner/reference_run.hpp"
#include "reports/result.hpp"

namespace cpbench {

// One rank's medians over the timed steps (seconds per step) and its per-step work.
struct RankSummary {
  double step_s = 0, attention_compute_s = 0, attention_wait_s = 0, transfer_s = 0;
  double mixer_s = 0;  // the non-attention mixers' sections (the report's ssm_s)
  double flops_visible = 0, flops_computed = 0;  // forward, per step
  double bytes = 0;
  double shard_s = 0, forward_s = 0, backward_s = 0;
  // Forward blocks per step per kernel route (AttentionStats::kernel_blocks: every layer's call).
  std::map<std::string, int64_t> kernel_blocks;
  double cpu_s = 0;  // median per timed step of this rank's process CPU seconds (0 on CUDA)
  // What each non-attention mixer's collectives sent per step, by mixer letter.
  std::map<char, double> mixer_bytes;
  [[nodiscard]] double attention_s() const { return attention_compute_s + attention_wait_s; }
};

// Every CP rank's summary, in rank order (a collective over the CP group).
[[nodiscard]] std::vector<RankSummary> gather_rank_summaries(const CaseContext& x, const RankSummary& mine);

// MFU by its definition: `flops` done by a group of `ranks` ranks in `seconds`, over the group's peak,
// ranks x `peak_per_rank` (FLOP/s of one rank in the case's dtype). 0 when any of them is not positive.
[[nodiscard]] double flops_utilization(double flops, double seconds, int64_t ranks, double peak_per_rank);

// FLOPs in matrix products per token and forward pass: 2 x the parameters of every >= 2-D weight but
// the embedding table (a lookup).
[[nodiscard]] double model_matmul_params(const CaseContext& x);

// Training FLOPs of the non-attention mixers' cores for `tokens` tokens: each mixer's own count per token
// (Mixer::train_flops_per_token, forward + backward) x its layers; 0 for mixers that count none.
[[nodiscard]] double mixer_train_flops(const CaseContext& x, double tokens);

// Why the kernel routes the ranks' blocks ran on (res.ranks' kernel_blocks, skipped blocks aside)
// differ from the case's `routes` key ("" if they do not, or the key is absent): a listed route no
// block ran on, or a block on a route not listed (a fused kernel that fell back, say). Names both sets.
[[nodiscard]] std::string route_mismatch(const CaseSpec& c, const RunResult& res);

// Sets status / outcome / reason from the check's errors and the case's expectation.
void record_outcome(const CaseSpec& c, RunResult& res);

// Fills res.metrics and res.ranks (global rank 0 only).
void record_metrics(const CaseContext& x, const MeasurementRecord& m, const std::vector<RankSummary>& ranks,
                    const Outputs& got, double reference_s, RunResult& res);

// The ceiling of a rank's attention FLOP/s: the largest res.peak.route_flops of the routes any rank's
// blocks ran on (res.ranks' kernel_blocks; fp32 attention on CUDA runs on tensor cores, above the
// CUDA-core fp32 peak), else res.peak.flops.
[[nodiscard]] double attention_ceiling(const RunResult& res);

// Why the result's rates are impossible on its hardware ("" if they are not): the fastest rank's
// computed attention FLOPs over its attention compute time above attention_ceiling; the model FLOP/s
// per rank above the larger of res.peak.flops and that ceiling; a collective's busbw above
// res.peak.link_bandwidth, or for all_reduce / reduce_scatter (in-switch reduction) above twice it.
// Names both numbers.
[[nodiscard]] std::string impossible_rates(const RunResult& res);

// What is possible but worth a line (RunResult::warnings): an all_reduce / reduce_scatter busbw above
// the link's per-direction rate and within twice it (NCCL NVLS's in-switch reduction on NVSwitch).
[[nodiscard]] std::vector<std::string> rate_warnings(const RunResult& res);

}  // namespace cpbench
