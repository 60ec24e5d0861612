#pragma once
// Runs one case on one rank, sequencing the rooms: set-up (case_context), the single-rank reference
// (reference_run), a checked step (train_step + step_check), the timed steps (measurement), a second
// checked step, the collectives alone (comm_bench), the ceilings (device_peaks) and the numbers
// (case_metrics). Every rank of the case calls it; the result is meaningful on global rank 0.
#include <string>

#include "harness/runner/case_context.hpp"
#include "harness/runner/scenario.hpp"
#include "reports/result.hpp"

namespace cpbench {

// Why this case cannot run here ("" if it can). Same answer on every rank.
[[nodiscard]] std::string skip_reason(const ScenarioSpec& scenario, const CaseSpec& c, int job_world_size);

// Throws on errors (the caller records the case as failed and ends the rank, since collectives of
// the other ranks may be out of step).
[[nodiscard]] RunResult run_case(const ScenarioSpec& scenario, const CaseSpec& c, RankRuntime& rt);

// Axes recorded for a case in the report.
[[nodiscard]] RunResult result_skeleton(const ScenarioSpec& scenario, const CaseSpec& c);

}  // namespace cpbench
