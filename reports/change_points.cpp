#include "reports/change_points.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>

namespace cpbench {
namespace {

// The best split of one segment: O(m^2) from 2-D prefix sums of the pairwise distances.
struct Split {
  int64_t t = -1;  // relative to the segment's start
  double q = 0;
};

// `allowed(t, k)`, when given, limits the splits searched (the newest-runs test's: k = m only).
Split best_split(const std::vector<double>& x, int64_t min_segment, double exponent,
                 const std::function<bool(int64_t, int64_t)>& allowed = {}) {
  const auto m = static_cast<int64_t>(x.size());
  Split best;
  if (m < 2 * min_segment) return best;
  // P[i][j] = sum of |x_k - x_l| over k < i, l < j.
  std::vector<double> P(static_cast<size_t>((m + 1) * (m + 1)), 0.0);
  const auto at = [&](int64_t i, int64_t j) -> double& { return P[static_cast<size_t>(i * (m + 1) + j)]; };
  const auto dist = [exponent](double a, double b) {
    const double d = std::abs(a - b);
    return exponent == 1 ? d : exponent == 2 ? d * d : std::pow(d, exponent);
  };
  for (int64_t i = 1; i <= m; ++i)
    for (int64_t j = 1; j <= m; ++j)
      at(i, j) = at(i - 1, j) + at(i, j - 1) - at(i - 1, j - 1) +
                 dist(x[static_cast<size_t>(i - 1)], x[static_cast<size_t>(j - 1)]);
  const auto block = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    return at(i1, j1) - at(i0, j1) - at(i1, j0) + at(i0, j0);
  };
  // Matteson & James: the right sample is [t, k) for every end k, so a change that comes back (a dip)
  // is found as well as a step.
  for (int64_t k = 2 * min_segment; k <= m; ++k)
    for (int64_t t = min_segment; t <= k - min_segment; ++t) {
      if (allowed && !allowed(t, k)) continue;
      const double a = static_cast<double>(t), b = static_cast<double>(k - t);
      const double cross = block(0, t, t, k) / (a * b);
      const double left = block(0, t, 0, t) / (a * (a - 1));  // ordered pairs: 2 x the unordered sum
      const double right = block(t, k, t, k) / (b * (b - 1));
      const double q = a * b / (a + b) * (2 * cross - left - right);
      if (best.t < 0 || q > best.q) best = {t, q};
    }
  return best;
}

// Mid-ranks (1-based) of x: tied values share the mean of their ranks.
std::vector<double> mid_ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> rank(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    const double mid = 0.5 * static_cast<double>(i + j) + 1;  // the ranks i+1 .. j+1
    for (size_t k = i; k <= j; ++k) rank[order[k]] = mid;
    i = j + 1;
  }
  return rank;
}

// The newest-runs scan over ranks: z_n for every tail length n in [min_segment, m - min_segment] (index
// n; the rest 0). The tail's rank sum grows one point at a time from the newest, so each n is O(1).
std::vector<double> tail_z(const std::vector<double>& rank, int64_t min_segment) {
  const auto m = static_cast<int64_t>(rank.size());
  std::vector<double> z(static_cast<size_t>(m + 1), 0.0);
  double tail_sum = 0;
  for (int64_t n = 1; n <= m - min_segment; ++n) {
    tail_sum += rank[static_cast<size_t>(m - n)];
    if (n < min_segment) continue;
    const double a = static_cast<double>(n), b = static_cast<double>(m - n);
    const double u = tail_sum - a * (a + 1) / 2;
    z[static_cast<size_t>(n)] = (u - a * b / 2) / std::sqrt(a * b * (a + b + 1) / 12);
  }
  return z;
}

}  // namespace

ChangePoint newest_step_up(const std::vector<double>& x, const ChangePointOptions& o) {
  if (o.min_segment < 2) throw std::invalid_argument("newest step: min_segment must be >= 2");
  const auto m = static_cast<int64_t>(x.size());
  ChangePoint out{-1, 0, 1};
  if (m < 2 * o.min_segment) return out;
  std::vector<double> rank = mid_ranks(x);
  const std::vector<double> z = tail_z(rank, o.min_segment);
  const double z_max = *std::max_element(z.begin(), z.end());
  if (!(z_max > 0)) return out;
  // Shuffling the ranks is shuffling x: the statistic reads only ranks.
  std::mt19937_64 gen(o.seed);
  int exceed = 0;
  for (int r = 0; r < o.permutations; ++r) {
    std::shuffle(rank.begin(), rank.end(), gen);
    const std::vector<double> zr = tail_z(rank, o.min_segment);
    exceed += *std::max_element(zr.begin(), zr.end()) >= z_max;
  }
  // Whether is the ranks' question, where is the size's: a rank statistic favours a long mild tail over a
  // short large step (on this machine's 17 % step in the newest 6 of 18 runs, z peaked at the newest 11),
  // so the split placed is E-Divisive's (the largest Q) among the tails that lean up.
  const Split at = best_split(x, o.min_segment, o.exponent,
                              [&](int64_t t, int64_t k) { return k == m && z[static_cast<size_t>(m - t)] > 0; });
  return {at.t, z[static_cast<size_t>(m - at.t)], (1.0 + exceed) / (1.0 + o.permutations)};
}

std::vector<ChangePoint> e_divisive(const std::vector<double>& x, const ChangePointOptions& o) {
  if (o.min_segment < 2) throw std::invalid_argument("change points: min_segment must be >= 2");
  if (!(o.exponent > 0 && o.exponent <= 2)) throw std::invalid_argument("change points: exponent must be in (0, 2]");
  std::vector<ChangePoint> found;
  std::vector<int64_t> bounds = {0, static_cast<int64_t>(x.size())};
  std::mt19937_64 gen(o.seed);
  for (;;) {
    // The segment whose best split diverges most.
    int64_t seg = -1;
    Split best;
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const std::vector<double> part(x.begin() + bounds[k], x.begin() + bounds[k + 1]);
      const Split s = best_split(part, o.min_segment, o.exponent);
      if (s.t >= 0 && (seg < 0 || s.q > best.q)) {
        seg = static_cast<int64_t>(k);
        best = s;
      }
    }
    if (seg < 0) break;
    const auto k = static_cast<size_t>(seg);
    std::vector<double> part(x.begin() + bounds[k], x.begin() + bounds[k + 1]);
    int exceed = 0;
    for (int r = 0; r < o.permutations; ++r) {
      std::shuffle(part.begin(), part.end(), gen);
      if (best_split(part, o.min_segment, o.exponent).q >= best.q) ++exceed;
    }
    const double p = (1.0 + exceed) / (1.0 + o.permutations);
    if (p > o.alpha) break;
    const int64_t index = bounds[k] + best.t;
    found.push_back({index, best.q, p});
    bounds.insert(bounds.begin() + seg + 1, index);
  }
  std::sort(found.begin(), found.end(), [](const ChangePoint& a, const ChangePoint& b) { return a.index < b.index; });
  return found;
}

}  // namespace cpbench
