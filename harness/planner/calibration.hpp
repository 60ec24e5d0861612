#pragma once
// Calibration (docs/planner.md, "Calibration"): effective FLOP/s and bandwidth fitted from a measured
// report (ok results only):
//   FLOP/s   = kStepFactor (3.5) * sum(attention_flops) / sum(attention_s) over every rank of every
//              result (attention_s: attention maths only, fwd + bwd; comm_s: time blocked in communication)
//   bandwidth: the value for which the transports' time formulas (Transport::time_per_call, latency 0),
//              fed with each result's measured bytes (split by the transport's forward_bytes_per_call
//              share) and slowest-rank compute, best reproduce that rank's measured comm_s (least
//              squares over results with cp > 1 and a registered transport).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/planner/presets.hpp"
#include "reports/result.hpp"

namespace cpbench::plan {

struct Calibration {
  double attention_flops = 0;      // FLOP/s (0: could not be fitted)
  double bandwidth = 0;            // B/s (0: could not be fitted)
  double flops_spread = 0;         // coefficient of variation of the per-rank FLOP/s samples
  double bandwidth_rms_error = 0;  // relative RMS error of the fitted exposed communication
  int64_t results = 0, rank_samples = 0, comm_samples = 0;
  std::vector<std::string> notes;
};
[[nodiscard]] Calibration calibrate(const Report& report);
// `cluster` with the fitted values applied (FLOP/s; both bandwidths when fitted). A fitted FLOP/s is
// an effective rate (reports carry no per-block times), so it comes with the neutral kernel model.
[[nodiscard]] Cluster calibrated(const Cluster& cluster, const Calibration& calibration);
[[nodiscard]] nlohmann::json calibration_to_json(const Calibration& calibration);
[[nodiscard]] std::string calibration_to_text(const Calibration& calibration);

}  // namespace cpbench::plan
