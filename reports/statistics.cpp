#include "reports/statistics.hpp"

#include <algorithm>
#include <cmath>

namespace cpbench::stats {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double range_spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = median(v);
  if (m <= 0) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return (*hi - *lo) / m;
}

double median_noise(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const double n = static_cast<double>(s.size());
  const double m = median(s);
  if (m <= 0) return 0;
  const double half = 0.98 * std::sqrt(n);  // 1.96 / 2 * sqrt(n) ranks either side of n / 2
  const auto lo = static_cast<size_t>(std::max(0.0, std::floor(n / 2 - half)));
  const auto hi = static_cast<size_t>(std::min(n - 1, std::ceil(n / 2 + half) - 1));
  return (s[hi] - s[lo]) / (2 * m);
}

MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  MannWhitney r;
  const size_t n1 = a.size(), n2 = b.size();
  if (n1 == 0 || n2 == 0) return r;
  std::vector<std::pair<double, int>> all;
  for (double x : a) all.emplace_back(x, 0);
  for (double x : b) all.emplace_back(x, 1);
  std::sort(all.begin(), all.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
  const double N = static_cast<double>(n1 + n2);
  double rank_sum_a = 0, tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double mid = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1 .. j
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_a += mid;
    i = j;
  }
  const double d1 = static_cast<double>(n1), d2 = static_cast<double>(n2);
  r.u = rank_sum_a - d1 * (d1 + 1) / 2;
  const double mu = d1 * d2 / 2;
  const double var = d1 * d2 / 12 * ((N + 1) - tie_term / (N * (N - 1)));
  if (var <= 0) return r;  // every value equal: no evidence of a difference
  const double diff = r.u - mu;
  const double corrected = std::max(0.0, std::abs(diff) - 0.5);
  r.z = (diff < 0 ? -corrected : corrected) / std::sqrt(var);
  r.p_two_sided = std::min(1.0, std::erfc(std::abs(r.z) / std::sqrt(2.0)));
  return r;
}

}  // namespace cpbench::stats
