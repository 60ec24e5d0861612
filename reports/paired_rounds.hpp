#pragma once
// The A/B verdict (`cpbench compare --ab`): two builds ran one case in many short rounds, alternating in
// ABBA / BAAB blocks, and the round is the unit of replication. Steps of one round share one process and
// one stretch of the machine's load, so they are not independent samples of the build; rounds are.
//
// Per case, with a_i and b_i the medians of the judged samples (seconds per step: wall time, or CPU
// seconds with metric cpu_s) of the base and new rounds of pair i (the two adjacent rounds of a block
// half, in time order):
//   d_i          = ln(b_i / a_i)                 > 0: the new build is slower in that pair
//   effect       = median_i d_i; delta = exp(-effect) - 1, the change in the rate (tokens/s)
//   interval     = the percentile bootstrap 95% interval of the median (stats::bootstrap_median_ci,
//                  seed 1), as a rate change
//   p            = the exact Wilcoxon signed-rank test of the d_i, one-sided (new slower)
//   A/A spread   = s_AA, the robust standard deviation of the same session's A/A log-ratios: per block,
//                  the two middle rounds (BB of ABBA, AA of BAAB) are one build twice in adjacent slots,
//                  as far apart in time as a pair's two rounds; ln(second / first), mirrored (the sign
//                  is arbitrary) so their median is 0
//   floor        = kFloorK x 1.2533 x s_AA / sqrt(pairs) in log units: kFloorK standard errors of a
//                  median of `pairs` differences whose spread is the A/A spread. Rounds of one build
//                  that far apart in time would differ by that much with no change at all.
// regression     the rate fell by more than `threshold`, by more than the floor, and p < alpha; or a
//                round the base passed failed or was skipped in the new build
// inconclusive   the rate fell by more than `threshold` but p >= alpha (including too few pairs to
//                reach alpha: 2^-pairs >= alpha) or the drop is within the floor
// ok             otherwise (including faster)
#include <cstdint>
#include <string>
#include <vector>

namespace cpbench {

// kFloorK = 2, from a simulation of sessions of 8 pairs whose load walks 5-15% a round and whose rounds
// jitter 5% (tests/unit/paired_rounds_test.cpp's model, 1000 sessions each): twin sessions end in a
// regression 1.3-1.9% of the time per case, a 25% slowdown is named in 99%, 92% and 72%; k = 3 gives
// 0.5-0.8% and 92%, 71%, 48% (docs/measurement.md).
inline constexpr double kFloorK = 2.0;

struct PairedRound {
  double base_s = 0, new_s = 0;  // the rounds' medians of the judged samples
  bool base_first = true;        // the base round ran first (ABBA's first pair, BAAB's second)
  std::string base_status = "ok", new_status = "ok";
  std::string base_reason, new_reason;
};

// A case's rounds in time order: pairs[k] = the k-th (base, new) pair; pairs 2j and 2j+1 are block j
// (ABBA: the first pair base_first, the second not; BAAB the other way round).
struct PairedCase {
  std::string name;
  std::vector<PairedRound> pairs;
};

struct PairedOptions {
  double threshold = 0.05;  // the rate drop that matters (fraction)
  double alpha = 0.05;      // the signed-rank test's level (one-sided: slower)
};

struct PairedVerdict {
  std::string name;
  int64_t pairs = 0;                  // pairs with both rounds ok
  double base_s = 0, new_s = 0;       // median over the pairs of each side's round medians
  double delta = 0;                   // rate change, exp(-median d) - 1
  double delta_lo = 0, delta_hi = 0;  // its bootstrap 95% interval
  double p_value = 1;                 // one-sided Wilcoxon signed-rank (new slower)
  double aa_spread = 0;               // s_AA (log units, ~ a fraction)
  double floor = 0;                   // the floor as a rate drop (fraction)
  bool regression = false, inconclusive = false;
  std::string why;
};

[[nodiscard]] PairedVerdict judge_paired(const PairedCase& c, const PairedOptions& o);

// The table `compare --ab` prints, one row per case, and a summary line.
[[nodiscard]] std::string paired_table(const std::vector<PairedVerdict>& v, const PairedOptions& o,
                                       const std::string& metric);
// 1 on any regression, else 4 (kCompareInconclusive) on any inconclusive case, else 0.
[[nodiscard]] int paired_exit_status(const std::vector<PairedVerdict>& v);

}  // namespace cpbench
