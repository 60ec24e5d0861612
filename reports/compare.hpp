#pragma once
// `cpbench compare BASE.json NEW.json`: the regression gate. It decides per case from the timed steps'
// samples (report schema 4: every step's time), not from two medians, as Google Benchmark's compare.py
// does: a two-sided Mann-Whitney U test at `alpha`, plus a threshold on the effect size.
//   regression    the case was ok in BASE and is failed or skipped in NEW, or missing from NEW; or NEW
//                 is slower: tokens/s fell by more than `threshold` (ratio of the medians) AND the U test
//                 rejects "same distribution" at alpha, with both runs quiet and well measured.
//   inconclusive  tokens/s fell by more than `threshold`, but the evidence does not hold: fewer than
//                 `min_samples` samples on a side (an older report has none), a run marked noisy (the
//                 machine was busy or the median never settled), a median noise above `max_noise`, or
//                 p >= alpha. Never a regression.
//   ok            otherwise (including faster).
// Cases only in NEW are listed, not gated. exit_status(): 1 on any regression, else
// kCompareInconclusive on any inconclusive case, else 0 (README "Exit codes").
#include <string>
#include <vector>

#include "reports/result.hpp"

namespace cpbench {

inline constexpr int kCompareInconclusive = 4;

struct CompareOptions {
  double threshold = 0.05;  // effect size: the drop in tokens/s that matters (fraction)
  double alpha = 0.05;      // the U test's significance level (two-sided)
  int64_t min_samples = 5;  // per side; fewer: inconclusive
  double max_noise = 0.10;  // a side whose median noise (stats::median_noise) exceeds this: inconclusive
  // A/B mode: both sides ran interleaved on the same machine, so its load is in both samples alike; a
  // run's noisy verdict is then no reason for inconclusive (the noise and significance rules still are).
  bool ignore_noisy_verdict = false;
  // Run-to-run noise: the samples of one run cannot show how much a whole run shifts against another
  // (a VM's slow phase, placement). With at least kMinCasesForSpread judged cases, their log-ratios of
  // the medians spread like that noise: a drop within between_run_k x their robust spread (1.4826 x
  // MAD) is inconclusive. A change that slows every case keeps the spread small and is still caught.
  // k = 3: under a normal model a twin pair's case crosses it with probability 0.13%, so a 12-case
  // scenario raises a false alarm in about 1.6% of twin pairs (k = 2 would be 2.3% a case, 24% a pair).
  double between_run_k = 3.0;
};
inline constexpr size_t kMinCasesForSpread = 6;

struct CaseDelta {
  std::string name;
  std::string base_status, new_status;  // new_status "missing" when NEW lacks the case
  double base_tps = 0, new_tps = 0;
  double delta = 0;      // (new - base) / base tokens/s, from the samples' medians; 0 when either is missing
  int64_t base_n = 0, new_n = 0;  // samples
  double p_value = 1;    // Mann-Whitney U, two-sided (1 when not tested)
  double noise = 0;      // the larger median noise of the two sides
  double between_run = 0;  // the pair's run-to-run noise floor (fraction), when enough cases estimate it
  bool regression = false;
  bool inconclusive = false;
  std::string why;       // for regressions and inconclusive cases
};

struct Comparison {
  CompareOptions options;
  std::vector<CaseDelta> cases;      // every case of BASE, in name order
  std::vector<std::string> only_in_new;
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
