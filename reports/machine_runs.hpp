#pragma once
// The canary rule of `history check` (docs/measurement.md, "The canary"): which runs the machine spoiled,
// and which changes came with the machine, from the canary each run stores (harness/runner/canary.hpp)
// and the cases' own series. Called by check_history (reports/history_check.hpp) in this order:
// mark_machine_runs before the series are judged, mark_shared_steps after.
//
//   the machine  a run is the machine's (spoiled) when its canary (harness/runner/canary.hpp: the median
//                over its cases of canary_memory_s and of canary_compute_s) is slower than the canary's
//                lower quartile over all runs (the quiet machine's) by more than kCanaryShift in either
//                part, and at least half of the run's cases moved with it: their metric is slower than
//                the case's own median over the runs by more than kCaseShift. A common-mode shift is the
//                machine's, not a change: its points stay in `points` (marked spoiled) but not in the
//                series the change points are searched in. Runs without a canary are never spoiled.
//   a shared step  a machine that slows and stays slow (a neighbour that arrives and stays) spoils no
//                single run against the others, yet moves every case at one run. A slowdown change of a
//                case is the machine's when, over the same runs before and after it, the canary slowed by
//                at least kCanaryStep and at least half as much as the case (in time), and at least half
//                of the cases slowed by at least half the canary's step with it. It is then no
//                regression, and no verdict either (a code change landing with it could hide in it).
//   a disturbed point  a machine can also spoil one case's run without the canary seeing it (the canary
//                times 30 ms after the steps; a stolen vCPU for a second of a case's steps is missed). Its
//                mark is in the case's own samples: the run's median noise (stats::median_noise of its
//                steps) beyond both kDisturbedNoise x the case's median noise over the runs and the check's
//                threshold. More work, as a code change adds, moves the steps together and keeps their
//                relative spread; preemption makes them erratic. Such a point is left out of that case's
//                series only (marked `disturbed`): a run whose own median is that uncertain cannot speak to
//                a threshold-sized change.
#include <set>
#include <vector>

#include "reports/history_check.hpp"

namespace cpbench {

// A shared step (above): the least slowdown of the canary's segment medians, in time. Segment medians of
// a quiet canary (3-5 % run-to-run on the 2-core VM) move by about 2 %.
inline constexpr double kCanaryStep = 0.10;

// A disturbed point (above): its median noise over the case's median noise beyond this.
inline constexpr double kDisturbedNoise = 2.5;

// Fills h.canary (per run, oldest first; empty when no run has a canary), marks the spoiled runs' points
// in every case of h (SeriesPoint::spoiled) and sets h.newest_spoiled. h.cases hold their points.
void mark_machine_runs(const std::vector<HistoryRun>& runs, HistoryCheck& h);

// After every case is judged: marks each slowdown change that is a shared step (SeriesChange::machine,
// canary_step, cases, moved) and clears the regression of a case whose newest change is one.
void mark_shared_steps(HistoryCheck& h);

// The runs of ch's kept (not spoiled) points in the segments before and after its change k, each to the
// neighbouring change or the series' end: the runs a change's step is measured over.
struct ChangeRuns {
  std::set<int64_t> before, after;
};
[[nodiscard]] ChangeRuns change_runs(const CaseHistory& ch, size_t k);

// The median of c's values over its kept points in `runs`; 0 when it has none there.
[[nodiscard]] double median_over(const CaseHistory& c, const std::set<int64_t>& runs);

// The slowdown in time from `before` to `after`, two values of c's metric, whichever way it points (> 0: slower).
[[nodiscard]] double time_step(const CaseHistory& c, double before, double after);

// Marks each case's disturbed points (above; SeriesPoint::disturbed), from their noise bands.
void mark_disturbed_points(HistoryCheck& h);

}  // namespace cpbench
