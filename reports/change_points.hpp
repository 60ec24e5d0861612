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

// The newest-runs test: did the newest runs of `x` move up? The question a nightly check asks, and the
// step `resolution` (history_check.hpp) is worked for; E-Divisive, which must also place a change
// anywhere, has less power for a step in the last few points (a 17 % step in the newest 6 of 18 runs at
// 4.8 % spread went unseen on this machine). For each tail length n in [min_segment, m - min_segment]
// (m = x.size()) the one-sided rank-sum statistic of the newest n points against the m - n before them,
// standardised: z_n = (U_n - n (m - n) / 2) / sqrt(n (m - n) (m + 1) / 12), U_n counting the pairs
// (tail, head) with the tail's point above (ties a half: mid-ranks). Its significance is a permutation
// test of max_n z_n (x shuffled `permutations` times, seeded with `seed`; p = (1 + #{max z of a shuffle
// >= max z}) / (1 + permutations)), so scanning the n costs no false alarms: under exchangeable noise
// p <= alpha with probability about alpha. The split returned is placed by size, not rank: among the n
// with z_n > 0, the one whose E-Divisive Q (above, with k = m) is largest. Returns it as a ChangePoint
// (index m - n, q = its z_n, p), or index -1 and p = 1 when m < 2 x min_segment or no z_n > 0.
// x's direction is the caller's: pass values that grow when the run is worse (log seconds, -log rates).
[[nodiscard]] ChangePoint newest_step_up(const std::vector<double>& x, const ChangePointOptions& o);

}  // namespace cpbench
