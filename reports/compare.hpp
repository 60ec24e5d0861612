#pragma once
// `cpbench compare BASE.json NEW.json [--threshold PCT] [--max-noise PCT]`: per-case throughput deltas
// and the regression gate. Verdicts per case of BASE:
//   regression    tokens/s fell by more than allowed = max(threshold, min(max_noise, spread)), where
//                 spread = max(spread of BASE, spread of NEW) and a run's spread is (max - min) / median
//                 of its timed steps; or the case was ok in BASE and is failed or skipped in NEW; or it
//                 is missing from NEW (coverage lost).
//   inconclusive  not a regression, but tokens/s fell by more than the threshold and the measured
//                 spread exceeds max_noise: too noisy to tell whether the drop is real (a 40% spread
//                 no longer hides a 30% drop: beyond max_noise it is a regression, below it unknown).
//   ok            otherwise.
// Cases only in NEW are listed, not gated. The CLI exits 1 on any regression, else
// kCompareInconclusive on any inconclusive case, else 0 (README "Exit codes").
#include <string>
#include <vector>

#include "reports/result.hpp"

namespace cpbench {

inline constexpr double kDefaultMaxNoise = 0.25;
inline constexpr int kCompareInconclusive = 4;

struct CaseDelta {
  std::string name;
  std::string base_status, new_status;  // new_status "missing" when NEW lacks the case
  double base_tps = 0, new_tps = 0;
  double delta = 0;      // (new - base) / base; 0 when either is missing
  double allowed = 0;    // the drop tolerated for this case (fraction)
  double spread = 0;     // the larger measured spread of the two runs (fraction)
  bool regression = false;
  bool inconclusive = false;
  std::string why;       // for regressions and inconclusive cases
};

struct Comparison {
  std::vector<CaseDelta> cases;      // every case of BASE, in name order
  std::vector<std::string> only_in_new;
  [[nodiscard]] bool regressed() const;
  [[nodiscard]] bool inconclusive() const;  // some case inconclusive (regardless of regressions)
  // 0, 1 (regression) or kCompareInconclusive.
  [[nodiscard]] int exit_status() const;
};

// threshold, max_noise: fractions (0.05 = 5%).
[[nodiscard]] Comparison compare_reports(const Report& base, const Report& next, double threshold,
                                         double max_noise = kDefaultMaxNoise);
[[nodiscard]] std::string comparison_table(const Comparison& c, double threshold, double max_noise = kDefaultMaxNoise);

}  // namespace cpbench
