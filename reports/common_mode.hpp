#pragma once
// The cases as each other's canary (docs/measurement.md, "Against the other cases"). A machine that slows
// or speeds every case for some runs moves them together, whether or not the canary (machine_runs.hpp)
// saw it: the canary times 30 ms after each case, a small sample of what the machine did to the case's
// seconds. A code change that slows one case moves it alone. So, where a run has at least
// kCommonModeOthers other cases, each case is judged a second time, against the others:
//
//   relative series  the case's value at a run over the run's common factor: the median, over the other
//                    cases with a kept point there (neither spoiled nor disturbed), of value / level, where
//                    level is that case's median over its kept points. A point with fewer other cases kept
//                    at its run is left out. The series is judged like the case's own (change points, the
//                    newest-runs test, resolution, verdict).
//   against the others  the relative series' newest change a slowdown beyond the threshold at p <=
//                    kAgainstOthersAlpha x alpha, and the case's own metric slower beyond the threshold too
//                    over the same runs (the segments around that change): the case's regression, even where
//                    its own series could not tell it (its spread, mostly the machine's, CANNOT TELL; or a
//                    faster machine took part of the step). The relative series lends the significance (the
//                    machine's common part removed from the spread); the size must hold in what the user sees.
//                    Without its own slowdown it is not named: a case the machine slowed less (or more) than
//                    the others looks fast (slow) against them while it lasts, and a change that sped up every
//                    other case leaves this one behind unmoved. It is then "behind the others" (AgainstOthers::
//                    behind, exit 4): the machine's speed moved at the same runs, and which of the two moved
//                    it cannot be told from the history.
//   common mode      a regression of the case's own series that its relative series does not show is the
//                    machine's when, over the same runs (the segments around the change), at least half of
//                    the other cases slowed by at least half the case's step (in time), and either the canary
//                    slowed by at least half the case's step too or no commit came between the runs either
//                    side of the change (the same commit: nothing in the code moved). No regression, and no
//                    verdict (CaseHistory::machine; exit 4). With a new commit there and a quiet canary it
//                    stays a regression: a change on a path every case runs slows them all alike.
//   not confirmed    a regression of the case's own series that its relative series does not show, and that
//                    some but fewer than half of the other cases shared (slowed by half its step at the same
//                    runs): neither every case's nor the case's alone. Part of the step is the machine's moving
//                    the cases unequally, and the rest does not clear the relative spread: not named
//                    (AgainstOthers::unconfirmed; exit 4). Where no other case moved, the step is the case's
//                    own and stays a regression, whatever the relative series' power.
#include <cstdint>

#include "reports/history_check.hpp"

namespace cpbench {

// The least number of other cases a run needs for its common factor: with two, their median is their mean and
// one case's own change moves it by half; from three on, one mover cannot.
inline constexpr int64_t kCommonModeOthers = 3;

// The share of the check's alpha a regression named against the others alone must reach: a case is looked at
// twice (its own series, then against the others), and half of alpha for the second look keeps its false
// alarms near those of one look (Bonferroni). Measured: tests/unit/common_mode_test.cpp.
inline constexpr double kAgainstOthersAlpha = 0.5;

// The relative series of h.cases[i] (above): the same name, metric and points (ids, commits, flags), each
// value and band divided by its run's common factor; a point without enough others is marked disturbed (left
// out). Empty points when the case has no point with enough others. Call after the points are marked.
[[nodiscard]] CaseHistory relative_series(const HistoryCheck& h, size_t i);

// After every case, its relative series (CaseHistory::against) and mark_shared_steps are judged: a case
// regressed against the others is a regression; a regression that moved with the others and the canary is
// the machine's (above).
void settle_common_mode(HistoryCheck& h);

}  // namespace cpbench
