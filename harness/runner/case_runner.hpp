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

// The reference hand-off through the run's store (rt.store), so that the CP group's other ranks do not
// wait for cp-rank 0's single-rank references inside the step's first collective (on timeout_s): cp-rank
// 0 of DP replica dp_index sets reference/case<i>/dp<d>/started as it begins them and .../done ("ok", or
// "failed: <why>") after; the others wait for started on timeout_s, then for done on
// reference_timeout_s, and throw naming the key and the rank if either passes or done is not "ok".
inline constexpr const char* kReferenceStarted = "started";
inline constexpr const char* kReferenceDone = "done";
[[nodiscard]] std::string reference_key(int64_t case_index, int64_t dp_index, const char* what);
void signal_reference(RankRuntime& rt, const CaseSpec& c, int64_t dp_index, const char* what, const std::string& value);
void wait_for_reference(RankRuntime& rt, const ScenarioSpec& s, const CaseSpec& c, int64_t dp_index, int64_t cp_rank);

// Axes recorded for a case in the report.
[[nodiscard]] RunResult result_skeleton(const ScenarioSpec& scenario, const CaseSpec& c);

}  // namespace cpbench
