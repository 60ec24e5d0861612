#pragma once
// Change-point detection over a series of runs: E-Divisive means (Matteson & James 2014), the method
// MongoDB's performance CI and Apache Otava (formerly Hunter) replaced threshold alerts with, with the
// permutation significance test.
//
// For a segment x[s, e), a split t and an end k (left L = x[s, t), right R = x[t, k), sizes a and b), the
// divergence
//   E(t) = 2 mean_{i in L, j in R} |x_i - x_j| - mean_{i<k in L} |x_i - x_k| - mean_{j<l in R} |x_j - x_l|
//   Q(t) = a b / (a + b) x E(t)
// (the energy distance with exponent 1, scaled by the sizes). The best split of a segment maximises Q
// over t and k with a, b >= min_segment (the end k makes a change that comes back findable too;
// O(m^3) per segment of m points). Hierarchically: among the current segments the one whose best split has
// the largest Q is tested; its significance is a permutation test (the segment shuffled `permutations`
// times with a generator seeded with `seed`, p = (1 + #{max Q of a shuffle >= Q}) / (1 + permutations));
// p <= alpha adds the change point and splits the segment, else the search stops. Under pure noise the
// first test rejects with probability about alpha: that is the false-alarm rate per series.
#include <cstdint>
#include <vector>

namespace cpbench {

struct ChangePointOptions {
  int64_t min_segment = 3;  // points on each side of a change point, at least 2
  double alpha = 0.05;      // the permutation test's level
  int permutations = 199;
  uint64_t seed = 1;
  double exponent = 1;  // |x - y|^exponent, in (0, 2]: below 2 any change of distribution, 2 the means only
};

struct ChangePoint {
  int64_t index = 0;  // the first point of the new segment
  double q = 0;       // Q at the split
  double p_value = 1;
};

// Change points of `x`, in index order. Fewer than 2 x min_segment points: none.
[[nodiscard]] std::vector<ChangePoint> e_divisive(const std::vector<double>& x, const ChangePointOptions& o);

}  // namespace cpbench
