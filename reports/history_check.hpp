#pragma once
// `cpbench history check` and the data `history show` draws: per case and metric, the series of stored
// runs in the order they were added, its change points (reports/change_points.hpp, on the logarithm of
// the metric, so a step is relative) and the verdict on the newest one.
//
//   series       one point per run that has the case ok with the metric > 0: the metric's value and its
//                noise band value x (1 -/+ n), n = stats::median_noise of the run's samples (cpu_s samples
//                for cpu_s, step samples otherwise)
//   change       for each change point, the medians of the segment before and after it (to the next
//                change point); change = after / before - 1. Change points with |change| < min_effect
//                are dropped (weakest first, segments merged, medians recomputed).
//   newest runs  E-Divisive's change points, then the newest-runs test (change_points.hpp, newest_step_up)
//                on the newest segment, one-sided toward slower: a slowdown it finds at p <= alpha and of at
//                least min_effect becomes the newest change point
//   slowdown     a change the wrong way for the metric: down for rates (unit ending in "/s", mfu,
//                efficiencies), up for everything else (seconds, bytes)
//   regression   the newest change point of a case is a slowdown whose drop in rate (1 - before/after
//                for times) is beyond `threshold`
//   too short    fewer than 2 x min_segment points: the series cannot be judged
//   resolution   what the series' own noise lets the check see. s = the run-to-run spread (robust sd of the
//                log metric about its segments' medians); a step over the newest n of the N judged points
//                is seen by the newest-runs test at alpha with power kResolutionPower when its log size
//                exceeds  (z(1 - alpha/2) + z(power)) * kNewestRunsFactor * s * sqrt(1/n + 1/(N - n)).
//                `resolution` is that bound at n = min_segment, as a drop in rate; `runs_needed` the least
//                n >= min_segment at which a drop of `threshold` clears it (0: no n up to N - min_segment).
//   cannot tell  no regression, but runs_needed > min_segment or 0: a slowdown of `threshold` that began
//                in the newest runs could hide in the spread, so "no regression" would not be honest
//   the machine  runs the machine spoiled, and changes that came with it: reports/machine_runs.hpp
// exit_status(): 1 on any regression, else kCompareInconclusive (4) when any selected case is too short,
// cannot tell, is behind the others or unconfirmed (common_mode.hpp) or its newest change is the machine's, or one of
// the newest min_segment runs is the machine's (nothing honest can be said about them), else 0.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "reports/change_points.hpp"
#include "reports/history_store.hpp"

namespace cpbench {

// The power at which `resolution` and `runs_needed` (above) say a change is seen, and the factor that
// makes it so for the newest-runs test: measured by simulation (tests/unit/newest_step_test.cpp: normal
// noise, 18 runs, alpha 0.05), 1.45 gives power 0.8 at n = 3 and more beyond (a single rank test would
// need 1.05, a median 1.2533; the scan over n and the ranks' discreteness at n = 3 cost the rest).
inline constexpr double kResolutionPower = 0.8;
inline constexpr double kNewestRunsFactor = 1.45;

struct HistoryCheckOptions {
  std::string metric = "tokens_per_s";
  std::string filter;         // ECMAScript regex searched in case names ("" = every case)
  double threshold = 0.05;    // the drop in rate the newest change point must exceed to fail
  double min_effect = 0.05;   // change points smaller than this are not reported
  ChangePointOptions change;  // min_segment, alpha, permutations, seed
};

struct SeriesPoint {
  int64_t run_id = 0;
  std::string commit, started_at, label;
  double value = 0, lo = 0, hi = 0;  // the metric and its noise band
  bool busy = false;
  bool spoiled = false;    // its run is the machine's: left out of the change-point series
  bool disturbed = false;  // its own steps were far noisier than the case's (machine_runs.hpp): left out too
};

// One run's canary and whether the machine spoiled it (the rule above).
struct RunCanary {
  int64_t run_id = 0;
  std::string started_at;
  double memory_s = 0, compute_s = 0;  // medians over the run's cases; 0 without a canary
  double shift = 0;                    // slower than the canary's lower quartile over the runs, the larger part
  int64_t cases = 0, moved = 0;        // the run's judged cases, and those slower than their median
  bool spoiled = false;
};

struct SeriesChange {
  int64_t index = 0;         // the first point after the change
  int64_t first_run_id = 0;  // its run
  std::string last_commit_before, first_commit_after;
  double before = 0, after = 0;  // segment medians
  double change = 0;             // after / before - 1
  double rate_drop = 0;          // the drop in rate (> 0: slower), whatever the metric's direction
  double p_value = 1;
  bool newest_runs_test = false;  // found by the newest-runs test (change_points.hpp), not E-Divisive
  bool slowdown = false, regression = false;
  // A shared step: the canary's slowdown over the same runs (max of its parts, in time; 0 when the runs
  // have no canary), the cases that slowed with it, and whether the change is the machine's.
  double canary_step = 0;
  int64_t cases = 0, moved = 0;
  bool machine = false;
  // Common mode (reports/common_mode.hpp): the machine's because the case moved with the other cases (moved
  // of cases, itself included) and not against them, and the canary moved with it or no commit came between.
  bool common_mode = false;
};

// The case judged against the other cases (reports/common_mode.hpp): its relative series' changes (indices
// into the case's points), spread and verdict. judged is false when no run has enough other cases.
struct AgainstOthers {
  bool judged = false, too_short = false;
  std::vector<SeriesChange> changes;
  double spread = 0;
  bool regression = false;  // the relative series' newest change is a slowdown beyond the threshold
  double own_drop = 0;      // the case's own drop in rate over that change's runs (when regression)
  bool behind = false;      // regression at p <= kAgainstOthersAlpha x alpha, not named: own_drop within threshold
  // The case's own regression, not seen against the others, and not shared by them either: not named.
  bool unconfirmed = false;
  int64_t others = 0, others_moved = 0;  // then: the other cases, and those that slowed >= half its step
};

struct CaseHistory {
  std::string name, metric, unit;
  bool higher_is_better = true;
  std::vector<SeriesPoint> points;
  std::vector<SeriesChange> changes;
  bool too_short = false;
  bool regression = false;
  double spread = 0;        // s: the run-to-run spread of the log metric (about 1 x the relative noise)
  double resolution = 0;    // the smallest drop in rate over the newest min_segment runs the check sees
  int64_t runs_needed = 0;  // runs after a `threshold` slowdown before it is seen; 0: not within the series
  bool cannot_tell = false;
  bool machine = false;  // the newest change is a shared step or common mode (the machine's): no verdict
  AgainstOthers against;
  bool against_others = false;  // the regression is the relative series' (its own series did not show it)
};

struct HistoryCheck {
  HistoryCheckOptions options;
  std::string store;  // where the runs came from
  int64_t runs = 0;
  std::vector<CaseHistory> cases;  // by name
  std::vector<RunCanary> canary;   // per run, oldest first (empty when no run has a canary)
  bool newest_spoiled = false;     // one of the newest min_segment runs is the machine's
  [[nodiscard]] int exit_status() const;
};

// Whether more of `metric` is better (rates, utilisations) or worse (times, bytes), from its name and unit.
[[nodiscard]] bool higher_is_better(const std::string& metric, const std::string& unit);

// Builds every selected case's series and judges it. Throws std::invalid_argument when the metric is in
// no stored run (listing the ones that are), no case matches the filter, or the filter is not a regex.
[[nodiscard]] HistoryCheck check_history(const std::vector<HistoryRun>& runs, const HistoryCheckOptions& o,
                                         const std::string& store = "");

[[nodiscard]] std::string history_check_text(const HistoryCheck& h);
[[nodiscard]] nlohmann::json history_json(const HistoryCheck& h);
// A self-contained page in the style of report.html: one SVG chart per case (the metric per run in
// order, each run's noise band, change points marked with their commits), the verdicts, and the data
// as JSON in <script id='history-data' type='application/json'>.
[[nodiscard]] std::string history_html(const HistoryCheck& h);

}  // namespace cpbench
