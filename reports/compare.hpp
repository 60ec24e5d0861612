#pragma once
// `cpbench compare BASE.json NEW.json`: the regression gate. It decides per case from the timed steps'
// samples (report schema 4: every step's time, and on CPU ranks every step's CPU seconds), not from two
// medians, as Google Benchmark's compare.py does: a two-sided Mann-Whitney U test at `alpha` (exact for
// few samples), plus a threshold on the effect size, above every noise floor that applies.
//   regression    the case was ok in BASE and is failed or skipped in NEW, or missing from NEW; or NEW
//                 is slower: the metric's rate fell by more than `threshold` (ratio of the medians) and
//                 by more than every floor below, AND the U test rejects "same distribution" at alpha.
//   inconclusive  the rate fell by more than `threshold`, but the evidence does not hold: the sample
//                 sizes cannot reach alpha at all (stats::mann_whitney_min_p >= alpha; an older report
//                 has no samples), p >= alpha, or the drop is within a floor: the pair's run-to-run
//                 noise (between_run_k, below), a busy machine's between-invocation spread (busy_floor,
//                 when either run was busy), or the two medians' noise combined, sqrt(n1^2 + n2^2) (when a
//                 side's noise is above max_noise). Evidence widens the floor; nothing vetoes a drop beyond it.
//   ok            otherwise (including faster).
// Cases only in NEW are listed, not gated. exit_status(): 1 on any regression, else
// kCompareInconclusive on any inconclusive case, else 0 (README "Exit codes").
#include <string>
#include <vector>

#include "reports/result.hpp"

namespace cpbench {

inline constexpr int kCompareInconclusive = 4;

// The samples a comparison judges: "tokens_per_s" (the step time's samples, wall clock; the default)
// or "cpu_s" (CPU ranks' CPU seconds per step, measurement.cpu_s: the work, whatever the neighbours do;
// CUDA cases keep device time and carry none).
[[nodiscard]] const std::vector<std::string>& compare_metrics();

struct CompareOptions {
  double threshold = 0.05;  // effect size: the drop in the metric's rate that matters (fraction)
  double alpha = 0.05;      // the U test's significance level (two-sided)
  int64_t min_samples = 2;  // per side; fewer: inconclusive (whether a size can reach alpha: min_p)
  double max_noise = 0.10;  // a side whose median noise (stats::median_noise) exceeds this: the floor is
                            // the two sides' noise combined, sqrt(n1^2 + n2^2)
  // Either run measured on a busy machine (MachineState::busy): the floor is at least this, the spread
  // between invocations measured on such a machine (docs/measurement.md, "Floors"): plain twin runs
  // beside a build on the 2-core VM, ranks bound, had log-ratios of their medians with a standard
  // deviation of 0.15 (CPU seconds) and 0.17 (wall), at most 0.33 (a 28% drop), over 9 case pairs;
  // 30% is about two of those standard deviations and clears every one of them.
  double busy_floor = 0.30;
  // Run-to-run noise: the samples of one run cannot show how much a whole run shifts against another
  // (a VM's slow phase, placement). With at least kMinCasesForSpread judged cases, their log-ratios of
  // the medians spread like that noise: a drop within between_run_k x their robust spread (1.4826 x
  // MAD) is inconclusive. A change that slows every case keeps the spread small and is still caught.
  // k = 3: under a normal model a twin pair's case crosses it with probability 0.13%, so a 12-case
  // scenario raises a false alarm in about 1.6% of twin pairs (k = 2 would be 2.3% a case, 24% a pair).
  double between_run_k = 3.0;
  std::string metric = "tokens_per_s";  // one of compare_metrics()
};
inline constexpr size_t kMinCasesForSpread = 6;

struct CaseDelta {
  std::string name;
  std::string base_status, new_status;  // new_status "missing" when NEW lacks the case
  double base_tps = 0, new_tps = 0;  // tokens/s (metric tokens_per_s) or CPU seconds per step (cpu_s)
  double delta = 0;      // (new - base) / base rate, from the samples' medians; 0 when either is missing
  int64_t base_n = 0, new_n = 0;  // samples
  double p_value = 1;    // Mann-Whitney U, two-sided (1 when not tested)
  double noise = 0;      // the larger median noise of the two sides
  double between_run = 0;  // the pair's run-to-run noise floor (fraction), when enough cases estimate it
  double floor = 0;        // the largest other floor that applied (busy machine, noisy medians), fraction
  bool regression = false;
  bool inconclusive = false;
  std::string why;       // for regressions and inconclusive cases
};

struct Comparison {
  CompareOptions options;
  std::vector<CaseDelta> cases;      // every case of BASE, in name order
  std::vector<std::string> only_in_new;
  // The canary (CanaryReading): each report's medians over its ok cases (0 where a report has none), the
  // new run's shift (slower, the larger part), the judged cases and those slower by more than
  // kCaseShift. machine: the canary moved by more than kCanaryShift and at least half the cases with
  // it, a common-mode shift: every regression of an ok/ok case became inconclusive (the machine's).
  double base_canary_memory_s = 0, base_canary_compute_s = 0, new_canary_memory_s = 0, new_canary_compute_s = 0;
  double canary_shift = 0;
  int64_t judged = 0, moved = 0;
  bool machine = false;
  [[nodiscard]] bool regressed() const;
  [[nodiscard]] bool inconclusive() const;  // some case inconclusive (regardless of regressions)
  // 0, 1 (regression) or kCompareInconclusive.
  [[nodiscard]] int exit_status() const;
};

[[nodiscard]] Comparison compare_reports(const Report& base, const Report& next, const CompareOptions& options = {});
[[nodiscard]] std::string comparison_table(const Comparison& c);

// Several runs of one side of an A/B comparison as one report: per case, the samples of every run in
// run order, the worst status, noisy when any run was. Results keep the first run's other fields.
[[nodiscard]] Report pool_runs(const std::vector<Report>& runs);

}  // namespace cpbench
