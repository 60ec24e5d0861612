#include "reports/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

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

double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("normal_quantile: p must lie in (0, 1)");
  const auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  double lo = -40, hi = 40;
  while (hi - lo > 1e-12) {
    const double mid = 0.5 * (lo + hi);
    (cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double robust_sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = median(v);
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::abs(x - m));
  return 1.4826 * median(dev);
}

namespace {

// Mid-ranks (1-based) of `values`, and the tie term sum(t^3 - t) over groups of equal values.
std::vector<double> mid_ranks(const std::vector<double>& values, double& tie_term) {
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> rank(values.size());
  tie_term = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && values[order[j]] == values[order[i]]) ++j;
    const double mid = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1 .. j
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (size_t k = i; k < j; ++k) rank[order[k]] = mid;
    i = j;
  }
  return rank;
}

// ways[s] = how many k-subsets of the ranks {1..n} have rank sum s (s = 0 .. n(n+1)/2); doubles hold the
// counts exactly far enough (C(50, 25) ~ 1.3e14 < 2^53).
std::vector<std::vector<double>> subset_sum_counts(size_t n, size_t k_max) {
  const size_t s_max = n * (n + 1) / 2;
  std::vector<std::vector<double>> ways(k_max + 1, std::vector<double>(s_max + 1, 0.0));
  ways[0][0] = 1;
  for (size_t r = 1; r <= n; ++r)
    for (size_t k = std::min(r, k_max); k >= 1; --k)
      for (size_t s = s_max; s >= r; --s) ways[k][s] += ways[k - 1][s - r];
  return ways;
}

double normal_two_sided(double z) { return std::min(1.0, std::erfc(std::abs(z) / std::sqrt(2.0))); }
double normal_upper(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

}  // namespace

double mann_whitney_min_p(size_t n1, size_t n2) {
  if (n1 == 0 || n2 == 0) return 1;
  double c = 1;  // C(n1 + n2, n1)
  for (size_t i = 1; i <= n1; ++i) c = c * static_cast<double>(n2 + i) / static_cast<double>(i);
  return std::min(1.0, 2.0 / c);
}

MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  MannWhitney r;
  const size_t n1 = a.size(), n2 = b.size();
  if (n1 == 0 || n2 == 0) return r;
  std::vector<double> all = a;
  all.insert(all.end(), b.begin(), b.end());
  double tie_term = 0;
  const std::vector<double> rank = mid_ranks(all, tie_term);
  double rank_sum_a = 0;
  for (size_t i = 0; i < n1; ++i) rank_sum_a += rank[i];
  const double d1 = static_cast<double>(n1), d2 = static_cast<double>(n2), N = d1 + d2;
  r.u = rank_sum_a - d1 * (d1 + 1) / 2;
  if (tie_term == 0 && n1 + n2 <= kExactRankTestMax) {
    // U = rank sum - n1(n1+1)/2: its null distribution is that of a random n1-subset's rank sum.
    const auto ways = subset_sum_counts(n1 + n2, n1);
    const auto& w = ways[n1];
    double total = 0, le = 0, ge = 0;
    const auto s_obs = static_cast<size_t>(std::llround(rank_sum_a));
    for (size_t s = 0; s < w.size(); ++s) {
      total += w[s];
      if (s <= s_obs) le += w[s];
      if (s >= s_obs) ge += w[s];
    }
    r.exact = true;
    r.p_two_sided = std::min(1.0, 2 * std::min(le, ge) / total);
    return r;
  }
  const double mu = d1 * d2 / 2;
  const double var = d1 * d2 / 12 * ((N + 1) - tie_term / (N * (N - 1)));
  if (var <= 0) return r;  // every value equal: no evidence of a difference
  const double diff = r.u - mu;
  const double corrected = std::max(0.0, std::abs(diff) - 0.5);
  r.z = (diff < 0 ? -corrected : corrected) / std::sqrt(var);
  r.p_two_sided = normal_two_sided(r.z);
  return r;
}

SignedRank wilcoxon_signed_rank(const std::vector<double>& d) {
  SignedRank r;
  std::vector<double> nz, mag;
  for (double x : d)
    if (x != 0) {
      nz.push_back(x);
      mag.push_back(std::abs(x));
    }
  r.n = static_cast<int64_t>(nz.size());
  if (nz.empty()) return r;
  double tie_term = 0;
  const std::vector<double> rank = mid_ranks(mag, tie_term);
  for (size_t i = 0; i < nz.size(); ++i)
    if (nz[i] > 0) r.w_plus += rank[i];
  const size_t n = nz.size();
  if (tie_term == 0 && n <= kExactRankTestMax) {
    // Under the null each sign is a fair coin: W+ is the rank sum of a random subset of {1..n}.
    const auto ways = subset_sum_counts(n, n);
    std::vector<double> dist(n * (n + 1) / 2 + 1, 0.0);
    for (const auto& row : ways)
      for (size_t s = 0; s < dist.size(); ++s) dist[s] += row[s];
    double total = 0, le = 0, ge = 0;
    const auto s_obs = static_cast<size_t>(std::llround(r.w_plus));
    for (size_t s = 0; s < dist.size(); ++s) {
      total += dist[s];
      if (s <= s_obs) le += dist[s];
      if (s >= s_obs) ge += dist[s];
    }
    r.exact = true;
    r.p_greater = ge / total;
    r.p_two_sided = std::min(1.0, 2 * std::min(le, ge) / total);
    return r;
  }
  const double dn = static_cast<double>(n);
  const double mu = dn * (dn + 1) / 4;
  const double var = dn * (dn + 1) * (2 * dn + 1) / 24 - tie_term / 48;
  if (var <= 0) return r;
  const double z = (r.w_plus - mu) / std::sqrt(var);
  r.p_greater = normal_upper(z);
  r.p_two_sided = normal_two_sided(z);
  return r;
}

Interval bootstrap_median_ci(const std::vector<double>& v, double level, int resamples, uint64_t seed) {
  Interval out;
  if (v.empty()) return out;
  if (v.size() == 1 || resamples < 1) {
    out.lo = out.hi = v.front();
    return out;
  }
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  std::vector<double> meds, one(v.size());
  meds.reserve(static_cast<size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    for (auto& x : one) x = v[pick(gen)];
    meds.push_back(median(one));
  }
  std::sort(meds.begin(), meds.end());
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(meds.size() - 1);
    return meds[static_cast<size_t>(std::llround(pos))];
  };
  out.lo = at((1 - level) / 2);
  out.hi = at((1 + level) / 2);
  return out;
}

}  // namespace cpbench::stats
