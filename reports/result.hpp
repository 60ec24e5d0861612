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
  double attention_flops = 0;  // per step (forward), under the actual mask
  double bytes_sent = 0;       // per step
  double comm_s = 0;           // per step, exposed: time the compute waited for communication
  double transfer_s = 0;       // per step, time communication was in flight (overlapped or not)
};

// One interval of a rank's timed step, relative to the step's common start (every rank of the CP group
// leaves a barrier, then reads its clock: the ranks' zeros differ by the barrier's exit skew).
//   lane "phases":   step > shard | forward | backward | gather (properly nested)
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
  std::vector<TensorError> errors;
  std::vector<Metric> metrics;
  std::vector<RankStats> ranks;
  Timeline timeline;  // empty for skipped and failed cases
  double wall_s = 0;

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
  // 3: per-case timeline; 2: per-tensor criterion, mismatch counts, bounds (1 had max_rel/tolerance only)
  int schema_version = 3;
  std::string scenario_name, scenario_file;
  Environment env;
  bool partial = false;       // true while running or after an interruption
  std::string partial_reason;
  int64_t total_cases = 0;
  std::vector<RunResult> results;
};

}  // namespace cpbench
