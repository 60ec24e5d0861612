#pragma once
// The statistics cpbench decides with, in one place: the measurement's stopping rule (harness) and the
// regression gate (cpbench compare) call these; nothing re-derives them.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cpbench::stats {

// Median (the mean of the two middle values for an even count); 0 for an empty sample.
[[nodiscard]] double median(std::vector<double> v);

// (max - min) / median; 0 for fewer than 2 values or a non-positive median.
[[nodiscard]] double range_spread(const std::vector<double>& v);

// The median's relative noise: half the width of its distribution-free ~95% confidence interval (the
// order statistics at n/2 -/+ 0.98 sqrt(n), the normal approximation to the binomial) over the median.
// Shrinks as 1/sqrt(n). Fewer than 2 values: 0 (no evidence either way); the interval is clamped to
// the sample's range for small n, where it is (max - min) / (2 median).
[[nodiscard]] double median_noise(const std::vector<double>& v);

// Robust standard deviation: 1.4826 x the median absolute deviation from the median (the normal's sigma
// for normal data); 0 for fewer than 2 values.
[[nodiscard]] double robust_sd(const std::vector<double>& v);

// The standard normal's quantile: x with Phi(x) = p, p in (0, 1) (bisection on std::erfc, to 1e-12).
[[nodiscard]] double normal_quantile(double p);

// Mann-Whitney U test of two independent samples, two-sided. Exact (the permutation distribution of U,
// counted; scipy's mannwhitneyu(method="exact")) when there are no ties and n1 + n2 <=
// kExactRankTestMax: with few samples the normal approximation misstates p, and only the exact
// distribution says what the samples can show (4 against 4 with no overlap: p = 2/70 = 0.029).
// Otherwise ties get mid-ranks and the normal approximation its tie and continuity corrections
// (method="asymptotic", as Google Benchmark's compare.py). p_two_sided in [0, 1].
inline constexpr std::size_t kExactRankTestMax = 50;
struct MannWhitney {
  double u = 0;            // U of the first sample
  double z = 0;            // the normal approximation's z (0 when exact)
  double p_two_sided = 1;
  bool exact = false;
};
[[nodiscard]] MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b);
// The smallest two-sided p any samples of sizes n1 and n2 can give: 2 / C(n1 + n2, n1) (no overlap at
// all), 1 when a side is empty. A gate at alpha can decide only when this is below alpha.
[[nodiscard]] double mann_whitney_min_p(std::size_t n1, std::size_t n2);

// Wilcoxon signed-rank test of paired differences d (zeros dropped, as scipy's zero_method="wilcox").
// Exact (the 2^n sign assignments, counted) for n <= kExactRankTestMax without ties in |d|; otherwise
// the normal approximation with the tie correction. p_greater: one-sided, the alternative that the
// differences lean positive; p_two_sided: twice the smaller tail, at most 1.
struct SignedRank {
  double w_plus = 0;   // sum of the ranks of |d| over the positive d
  int64_t n = 0;       // non-zero differences
  double p_greater = 1, p_two_sided = 1;
  bool exact = false;
};
[[nodiscard]] SignedRank wilcoxon_signed_rank(const std::vector<double>& d);

// Percentile bootstrap interval of the median: `resamples` resamples with replacement from a generator
// seeded with `seed` (deterministic), the (1 - level)/2 and (1 + level)/2 quantiles of their medians.
struct Interval {
  double lo = 0, hi = 0;
};
[[nodiscard]] Interval bootstrap_median_ci(const std::vector<double>& v, double level = 0.95, int resamples = 2000,
                                           uint64_t seed = 1);

}  // namespace cpbench::stats
