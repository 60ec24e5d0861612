// The history check's and the A/B verdict's numbers against values worked by hand or from a second
// formula (issue 52, section 1):
//  - CanaryQuartile (reports/machine_runs.cpp): the quiet machine's canary is the lower quartile of the
//    runs' readings; with 5 or 9 runs the quartile's position (n - 1) / 4 is a whole index, so every
//    convention gives the same value, and each run's shift is read against it (the larger of its memory and
//    compute parts' ratios, less 1: a run below the quartile in both shows 0).
//  - AbInterval (reports/paired_rounds.cpp, stats::bootstrap_median_ci): the A/B interval is the percentile
//    bootstrap's 95 % interval of the median. For an odd number n of distinct differences the bootstrap
//    median is an order statistic, and P(median* <= x_(k)) = P(Binomial(n, k/n) >= (n+1)/2): the interval's
//    ends from that formula, not from resampling.
//  - CommonModeShares, BehindTheOthers (reports/common_mode.cpp): series built with a known answer (shares of
//    the other cases that moved, the case's own drop worked by hand).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "reports/history_check.hpp"
#include "reports/history_store.hpp"
#include "reports/paired_rounds.hpp"

using namespace cpbench;

namespace {

// A run per entry of `canary_ms` (the canary's memory part; its compute part fixed at 4 ms), four cases of a
// fixed 50 ms step reading the same canary.
std::vector<HistoryRun> runs_with_canary(const std::vector<double>& canary_ms) {
  std::vector<HistoryRun> out;
  for (size_t i = 0; i < canary_ms.size(); ++i) {
    HistoryRun r;
    r.id = static_cast<int64_t>(i + 1);
    r.commit = "c0";
    r.started_at = "run " + std::to_string(i + 1);
    for (const char* name : {"w1", "w2", "w3", "w4"}) {
      HistoryCase c;
      c.name = name;
      c.status = "ok";
      c.metrics["tokens_per_s"] = {"tokens_per_s", 20000, "tokens/s", 0};
      c.metrics["step_s"] = {"step_s", 0.05, "s", 0};
      c.step_s = {0.0499, 0.05, 0.0501};
      c.metrics[kCanaryMemoryMetric] = {kCanaryMemoryMetric, canary_ms[i] * 1e-3, "s", 0};
      c.metrics[kCanaryComputeMetric] = {kCanaryComputeMetric, 0.004, "s", 0};
      r.cases.push_back(c);
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST(CanaryQuartile, EachRunsShiftIsAgainstTheLowerQuartileOfTheRuns) {
  // Five runs, in time order 12 10 14 11 13 ms: sorted 10 11 12 13 14, the lower quartile (position 1) 11 ms.
  {
    const HistoryCheck h = check_history(runs_with_canary({12, 10, 14, 11, 13}), HistoryCheckOptions{}, "sim");
    ASSERT_EQ(h.canary.size(), 5u);
    // The compute part (4 ms every run) is at its quartile: a run below 11 ms shows 0.
    const double by_hand[5] = {12.0 / 11 - 1, 0, 14.0 / 11 - 1, 0, 13.0 / 11 - 1};
    for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(h.canary[i].shift, by_hand[i], 1e-9) << "run " << i + 1;
  }
  // Nine runs, 20 .. 28 ms shuffled: the lower quartile (position 2) 22 ms; the 28 ms run is 27 % slower.
  {
    const std::vector<double> ms = {25, 20, 28, 22, 27, 21, 24, 26, 23};
    const HistoryCheck h = check_history(runs_with_canary(ms), HistoryCheckOptions{}, "sim");
    ASSERT_EQ(h.canary.size(), 9u);
    for (size_t i = 0; i < ms.size(); ++i) EXPECT_NEAR(h.canary[i].shift, std::max(0.0, ms[i] / 22 - 1), 1e-9) << "run " << i + 1;
  }
}

namespace {

// P(Binomial(n, p) >= m).
double binomial_upper(int n, double p, int m) {
  double s = 0;
  for (int j = m; j <= n; ++j) {
    const double log_c = std::lgamma(n + 1.0) - std::lgamma(j + 1.0) - std::lgamma(n - j + 1.0);
    s += std::exp(log_c + j * std::log(p) + (n - j) * std::log1p(-p));
  }
  return s;
}

// The q-quantile of the bootstrap median of n distinct values (n odd), as an order statistic's rank k (1-based):
// the least k with P(median* <= x_(k)) >= q.
int bootstrap_median_quantile(int n, double q) {
  for (int k = 1; k <= n; ++k)
    if (binomial_upper(n, static_cast<double>(k) / n, (n + 1) / 2) >= q) return k;
  return n;
}

}  // namespace

TEST(AbInterval, TheIntervalIsTheBootstrapMediansNinetyFivePercentByTheBinomialFormula) {
  // 17 pairs, the new build slower by d_i = 0.002 i (i = 1..17) in log time: x_(k) = 0.002 k.
  const int n = 17;
  PairedCase c;
  c.name = "case";
  for (int i = 1; i <= n; ++i) {
    PairedRound r;
    r.base_first = i % 2 == 1;
    r.base_s = 0.1;
    r.new_s = 0.1 * std::exp(0.002 * i);
    c.pairs.push_back(r);
  }
  const PairedVerdict v = judge_paired(c, PairedOptions{});
  ASSERT_EQ(v.pairs, n);
  // By the formula: the 2.5 % quantile is x_(5), the 97.5 % one x_(13) (a 90 % interval: x_(6), x_(12)).
  const int lo = bootstrap_median_quantile(n, 0.025), hi = bootstrap_median_quantile(n, 0.975);
  EXPECT_EQ(lo, 5);
  EXPECT_EQ(hi, 13);
  // The verdict's interval is a rate change: delta_hi from the interval's low end, delta_lo from its high end.
  EXPECT_NEAR(-std::log1p(v.delta_hi), 0.002 * lo, 1e-12) << "the interval's low end in log time";
  EXPECT_NEAR(-std::log1p(v.delta_lo), 0.002 * hi, 1e-12) << "the interval's high end in log time";
  EXPECT_NEAR(-std::log1p(v.delta), 0.002 * 9, 1e-12) << "the median";
}

namespace {

// `cases` cases w1, w2, ... over `runs` runs of one build: step time 0.05 s x factor(case, run) x lognormal
// noise; the canary quiet (the same reading every run).
template <class Factor>
std::vector<HistoryRun> series(int cases, int runs, Factor factor, double noise, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> z(0, 1);
  std::vector<HistoryRun> out;
  for (int i = 0; i < runs; ++i) {
    HistoryRun r;
    r.id = i + 1;
    r.commit = "c0";
    r.started_at = "run " + std::to_string(i + 1);
    for (int k = 0; k < cases; ++k) {
      HistoryCase c;
      c.name = "w" + std::to_string(k + 1);
      c.status = "ok";
      const double step = 0.05 * factor(k, i) * std::exp(noise * z(g));
      c.metrics["tokens_per_s"] = {"tokens_per_s", 1000 / step, "tokens/s", 0};
      c.metrics["step_s"] = {"step_s", step, "s", 0};
      c.step_s = {step * 0.99, step, step * 1.01};
      c.metrics[kCanaryMemoryMetric] = {kCanaryMemoryMetric, 0.010, "s", 0};
      c.metrics[kCanaryComputeMetric] = {kCanaryComputeMetric, 0.004, "s", 0};
      r.cases.push_back(c);
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

// Five cases, one build, the canary quiet. From run 13 w1, w2 and w3 are 8 % slower, w4 and w5 unmoved. Each
// of the three slowed cases sees 2 of its 4 others move with it (by at least half its step): exactly half,
// which is "at least half" (common_mode.hpp): the machine's, common mode, no regression. Against the others w1
// moved 1.08 / 1.04 - 1 = 3.8 % (the median of 1.08, 1.08, 1.00, 1.00), inside the 5 % threshold, so only
// the common-mode rule decides.
TEST(CommonModeShares, HalfTheOtherCasesMovingWithItIsCommonMode) {
  const auto runs = series(5, 18, [](int k, int i) { return k < 3 && i >= 12 ? 1.08 : 1.0; }, 0.005, 52);
  const HistoryCheck h = check_history(runs, HistoryCheckOptions{}, "sim");
  ASSERT_EQ(h.cases.size(), 5u);
  for (size_t k = 0; k < 3; ++k) {
    const CaseHistory& c = h.cases[k];
    SCOPED_TRACE(c.name);
    ASSERT_FALSE(c.changes.empty()) << history_check_text(h);
    const SeriesChange& x = c.changes.back();
    EXPECT_EQ(x.first_run_id, 13) << history_check_text(h);
    EXPECT_FALSE(c.against.regression) << history_check_text(h);
    EXPECT_EQ(x.cases, 5) << history_check_text(h);
    EXPECT_EQ(x.moved, 3) << "itself and 2 of its 4 others: " << history_check_text(h);
    EXPECT_TRUE(x.common_mode) << history_check_text(h);
    EXPECT_TRUE(c.machine) << history_check_text(h);
    EXPECT_FALSE(c.against.unconfirmed) << history_check_text(h);
    EXPECT_FALSE(c.regression) << history_check_text(h);
  }
}

// Four cases, one build, the canary quiet: from run 13 the machine runs every case 13 % faster (x 0.87 in time)
// and w2's code makes it 15 % slower. w2's own time moves by 1.15 x 0.87 - 1 = 0.05 %: its own drop in rate,
// 1 - 1 / 1.0005, is nil, while against the others it fell 13 %. It is behind the others (not named, not
// passed): the rule reads the case's own drop, not the relative one.
TEST(BehindTheOthers, TheCasesOwnDropDecidesNotTheRelativeOne) {
  const auto runs = series(4, 18, [](int k, int i) { return (i >= 12 ? 0.87 : 1.0) * (k == 1 && i >= 12 ? 1.15 : 1.0); },
                           0.005, 53);
  const HistoryCheck h = check_history(runs, HistoryCheckOptions{}, "sim");
  ASSERT_EQ(h.cases.size(), 4u);
  const CaseHistory& w2 = h.cases[1];
  ASSERT_TRUE(w2.against.regression) << history_check_text(h);
  EXPECT_NEAR(w2.against.own_drop, 1 - 1 / (1.15 * 0.87), 0.01) << history_check_text(h);
  EXPECT_TRUE(w2.against.behind) << history_check_text(h);
  EXPECT_FALSE(w2.regression) << history_check_text(h);
}
