#pragma once
// The statistics cpbench decides with, in one place: the measurement's stopping rule (harness) and the
// regression gate (cpbench compare) call these; nothing re-derives them.
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

// Mann-Whitney U test of two independent samples (ties get mid-ranks, the variance its tie
// correction; normal approximation with continuity correction, as scipy's mannwhitneyu(method=
// "asymptotic") and Google Benchmark's compare.py use). p_two_sided in [0, 1].
struct MannWhitney {
  double u = 0;            // U of the first sample
  double z = 0;
  double p_two_sided = 1;
};
[[nodiscard]] MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace cpbench::stats
