#pragma once
// Plain result records. The harness fills them; reporters only read them.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cpbench {

// A named measurement with its unit ("tokens/s", "s", "bytes", "B/s", "flop", "ratio").
struct Metric {
  std::string name;
  double value = 0;
  std::string unit;
  double spread = 0;  // for timed metrics: (max - min) / median over the timed iterations; 0 otherwise
};

// The comparison of one tensor of the CP run against the single-rank reference (docs/correctness.md).
//   elementwise (float64, float32; reference in the same dtype): element i mismatches when
//     |cp_i - ref_i| > atol + rtol * |ref_i|, with atol = atol_scale * max|ref|.
//   precision (bfloat16, float16; reference in float64): e_cp = |cp - ref64|, e_1 = |one rank in the
//     case's dtype - ref64|; passes when max e_cp <= k max e_1 + floor and the q-quantile of e_cp
//     <= k (q-quantile of e_1) + floor; an element mismatches when e_cp > k max e_1 + floor.
// score: how far past its bound the tensor is (<= 1 passes): max over elements of error / bound
// (elementwise), or the larger of the two ratios (precision).
struct TensorError {
  std::string tensor;           // "loss", "logits", "grad:inputs_embeds", "grad:layer0_wq", ...
  std::string criterion;        // elementwise | precision
  std::string step;             // first | last: the checked step this record comes from
  int64_t elements = 0;         // compared elements
  int64_t mismatches = 0;       // elements outside the bound
  double max_abs = 0;           // max |cp - ref|
  double max_rel = 0;           // max |cp - ref| / max |ref| (for scale; not the criterion)
  double score = 0;             // error / bound at the worst element (<= 1 passes)
  double rtol = 0, atol = 0;    // elementwise: the bound used (atol absolute)
  double k = 0, floor = 0, quantile = 0;  // precision: the rule's constants
  double single_rank_max = 0, single_rank_q = 0;  // precision: max and q-quantile of e_1
  double cp_q = 0;              // precision: q-quantile of e_cp (its max is max_abs)
  bool ok = true;
  std::string worst;            // "(b=0, s=17, v=3) owned by rank 1: cp=0.123 ref=0.456 bound=1e-6"
  [[nodiscard]] double fraction() const {
    return elements > 0 ? static_cast<double>(mismatches) / static_cast<double>(elements) : 0.0;
  }
};

struct RankStats {
  int rank = 0;
  double attention_s = 0;      // median per step: attention maths only (not time blocked in communication)
  double attention_flops = 0;  // per step (forward), visible (q, k) pairs under the actual mask
  double bytes_sent = 0;       // per step
  double comm_s = 0;           // per step, exposed: time the compute waited for communication
  double transfer_s = 0;       // per step, time communication was in flight (overlapped or not)
  // Schema 4 (0 in older reports):
  double step_s = 0;                    // median per step: this rank's whole timed training step
  double attention_flops_computed = 0;  // per step (forward): whole tiles and bands the kernels computed
  double ssm_s = 0;                     // median per step: the recurrent mixers' sections, fwd + bwd
  // Added within schema 4 (absent: empty): forward (query, key) blocks per step per kernel route
  // (kernels/attention/fused_attention.hpp: skipped, tiled, cpu_flash, cuda_flash, cuda_flash_window,
  // cuda_flash_varlen, cuda_efficient), every layer's call counted; routes with no block left out.
  std::map<std::string, int64_t> kernel_blocks;
  // Added within schema 4 (absent: 0): median per timed step of this rank's process CPU seconds (its
  // CPU clock: every thread, intra-op threads included); 0 on CUDA, where the gate keeps device time.
  double cpu_s = 0;
};

// The machine around one case's measurement (harness/runner/machine_state.hpp). Sampled on the
// reporting rank before the first and after every timed step.
struct MachineState {
  int64_t cores = 0;                  // cores this process may run on (its CPU affinity)
  double load1_before = 0, load1_after = 0;  // /proc/loadavg, 1-minute
  double others_runnable_mean = 0;    // runnable threads outside this run, mean over the samples
  int64_t others_runnable_max = 0;    // and their maximum
  int64_t samples = 0;
  double cpu_mhz = 0;                 // current frequency of CPU 0 where readable, else 0
  // Busy: on average half a runnable thread or more outside this run shared its cores while it
  // measured. The one rule judge_noise (noisy verdict) and the regression gate (inconclusive) apply.
  static constexpr double kBusyRunnableMean = 0.5;
  [[nodiscard]] bool busy() const { return others_runnable_mean >= kBusyRunnableMean; }
};

// The canary (harness/runner/canary.hpp): a fixed workload timed in the rank process right after the
// case's timed steps, on the cores they ran on. It does not change with cpbench's code, so when it moves
// the machine moved (docs/measurement.md, "The canary"). Medians of `repeats` timings, seconds.
struct CanaryReading {
  double memory_s = 0;   // streaming a buffer larger than a core's L2 share (memory-bound)
  double compute_s = 0;  // a register-resident multiply-add chain (compute-bound)
  int64_t repeats = 0;   // 0: not measured (reports before the canary)
};
// When a run is the machine's, not a change (`history check`, `compare`; docs/measurement.md, "The
// canary"): its canary slower by more than kCanaryShift in either part (the quiet canary's own spread on
// the 2-core VM reached +20 % against its lower quartile over 18 runs), and at least half of its cases
// slower by more than kCaseShift with it.
inline constexpr double kCanaryShift = 0.25;
inline constexpr double kCaseShift = 0.10;

// How a case was timed (harness/runner/measurement.hpp): nvbench-style, a warm-up, then timed steps
// until the median's relative noise is below max_noise (after at least min_iters) or max_time_s of
// timed steps has passed. Every timed step's sample is kept.
struct MeasurementRecord {
  std::vector<double> step_s;  // every timed step: the CP group's time (its slowest rank's), seconds
  // Added within schema 4 (absent: empty; empty on CUDA): every timed step's CPU seconds summed over
  // the CP group's ranks (each rank's process CPU clock around its step): the work, not the neighbours.
  std::vector<double> cpu_s;
  int64_t warmup = 0;
  int64_t min_iters = 0;
  double max_noise = 0;        // fraction
  double max_time_s = 0;
  double noise = 0;            // at the stop: half-width of the median's 95% interval / median
  std::string stopped_by;      // noise | max_time | max_iters
  int64_t threads_per_rank = 0;       // intra-op threads of each rank
  std::string rank_cpus;              // the cores rank 0's timed steps were bound to ("0", "2-3"); "" = unbound
  std::string omp_wait_policy;        // OMP_WAIT_POLICY in force (passive: no spinning)
  MachineState machine;
  std::string verdict;         // quiet | noisy (machine busy, or the median's noise above max_noise)
  std::string verdict_reason;  // why noisy
  double slowdown = 0;         // the CPBENCH_FAULT=slow test hook's fraction on this case (0: none)
  CanaryReading canary;        // rank 0's, read after the timed steps (absent in older reports: repeats 0)
  [[nodiscard]] bool noisy() const { return verdict == "noisy"; }
};

// One collective the case's step issues, measured alone on the case's process group the way
// nccl-tests does: `bytes` as nccl-tests sizes it, algbw = bytes / time, busbw = algbw * bus_factor
// (all_gather, reduce_scatter, all_to_all: (W-1)/W; all_reduce: 2(W-1)/W; sendrecv: 1).
struct CollectiveBandwidth {
  std::string collective;
  int64_t bytes = 0;
  int64_t calls_per_step = 0;  // how often the step issued it at this size
  double time_s = 0;           // median over the measurement's iterations, slowest rank
  double algbw = 0, busbw = 0, bus_factor = 0;  // B/s, B/s, ratio
};

// The hardware ceilings a case's rates are checked against (harness/runner/device_peaks.hpp).
struct PeakRecord {
  double flops = 0;           // FLOP/s per rank in the case's dtype (0: unknown)
  std::string flops_source;   // "table: H200 bf16 dense", "probe: CPU float32 GEMM", "measure.peak_flops"
  double link_bandwidth = 0;  // B/s per rank and direction of the link the CP group uses (0: unknown)
  std::string link_source;
  // FLOP/s per rank of attention blocks on each kernel route (route name -> ceiling), for a GPU in the
  // peak table (harness/runner/device_peaks.hpp route_peak_flops); empty: every route's is `flops`.
  std::map<std::string, double> route_flops;
};

// One interval of a rank's timed step, relative to the step's common start (every rank of the CP group
// leaves a barrier, then reads its clock: the ranks' zeros differ by the barrier's exit skew).
//   lane "phases":   step > shard | forward | backward (properly nested; the timed step has no gathers)
//   lane "compute":  the transport's attention maths, one event per block and step ("ring_fwd:1", ...),
//                    and "wait" events: the compute thread blocked on communication (exposed)
//   lane "comm":     K/V transfers in flight, post to completion (overlapped or not)
//   lane "comm_grad": dK/dV transfers in flight (the ring's partial sums, allgather's reduce-scatter)
struct TimelineEvent {
  std::string name;    // "step", "forward", "ring_fwd:1", "allgather_bwd:reduce_scatter", ...
  std::string lane;    // phases | compute | comm | comm_grad
  std::string kind;    // phase | compute | wait | transfer
  double start_s = 0;  // seconds since the common start
  double dur_s = 0;    // seconds
};

struct RankTimeline {
  int rank = 0;  // CP rank (of the first data-parallel replica)
  std::vector<TimelineEvent> events;
};

// The median timed step of a case (by the CP group's slowest rank) on every CP rank. `clock` says how
// the intervals were read ("steady": host steady clock; "steady+cuda_events": on CUDA, phase bounds
// follow a device synchronize, attention spans are CUDA events on the compute stream mapped onto
// the host clock).
struct Timeline {
  std::string clock;
  std::vector<RankTimeline> ranks;
  [[nodiscard]] bool empty() const { return ranks.empty(); }
};

struct RunResult {
  int64_t index = 0;
  std::string name;
  std::map<std::string, std::string> axes;  // sharder, transport, cp, dp, mask, dtype, device
  std::string expect = "match";
  std::string status = "ok";  // ok | skipped | failed
  std::string reason;         // why skipped / failed
  std::string outcome;        // match | mismatch (empty when the check did not run)
  // The case's single-rank references: "computed" by this case, or "reused" from an earlier case of
  // the same problem (harness/runner/reference_cache.hpp); empty when none ran (skipped, failed).
  std::string reference;
  // What a reader should know that does not fail the case (e.g. an all-reduce's busbw above the
  // link's per-direction rate, which NCCL's in-switch reduction reaches): one line each.
  std::vector<std::string> warnings;
  std::vector<TensorError> errors;
  std::vector<Metric> metrics;
  std::vector<RankStats> ranks;
  Timeline timeline;  // empty for skipped and failed cases
  double wall_s = 0;
  // Schema 4: how it was measured, the collectives measured alone, and the ceilings checked.
  MeasurementRecord measurement;
  std::vector<CollectiveBandwidth> collectives;
  PeakRecord peak;

  [[nodiscard]] const Metric* metric(const std::string& name) const {
    for (const auto& m : metrics)
      if (m.name == name) return &m;
    return nullptr;
  }
};

struct Environment {
  std::string cpbench_version, git_commit, torch_version, device, host, started_at;
  bool cuda_available = false;
  int world_size = 0;  // largest world size used
  std::string launcher;  // "spawned" | "joined"
  // GPU name and count, driver, CUDA runtime, NCCL, cuDNN, torch build, nodes, ranks per node
  // (harness/runner/platform.hpp); "n/a" where unknown.
  std::map<std::string, std::string> platform;
};

struct Report {
  // 4: training-step timing (no gathers), samples, machine state and noise verdict, FLOPs visible and
  //    computed, peaks and MFU, nccl-tests style collectives; 3: per-case timeline; 2: per-tensor
  //    criterion, mismatch counts, bounds (1 had max_rel/tolerance only)
  int schema_version = 4;
  std::string scenario_name, scenario_file;
  Environment env;
  bool partial = false;       // true while running or after an interruption
  std::string partial_reason;
  int64_t total_cases = 0;
  std::vector<RunResult> results;
};

}  // namespace cpbench
