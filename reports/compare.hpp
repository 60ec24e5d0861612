#pragma once
// `cpbench compare BASE.json NEW.json [--threshold PCT]`: per-case throughput deltas and the
// regression gate. A case regresses when its tokens/s falls by more than
// max(threshold, spread of BASE, spread of NEW) (spread = (max - min) / median of the timed steps),
// or when it was ok in BASE and is failed in NEW. Cases only in one report are listed, not gated.
#include <string>
#include <vector>

#include "reports/result.hpp"

namespace cpbench {

struct CaseDelta {
  std::string name;
  std::string base_status, new_status;
  double base_tps = 0, new_tps = 0;
  double delta = 0;      // (new - base) / base; 0 when either is missing
  double allowed = 0;    // the drop tolerated for this case (fraction)
  bool regression = false;
  std::string why;       // for regressions
};

struct Comparison {
  std::vector<CaseDelta> cases;
  std::vector<std::string> only_in_base, only_in_new;
  [[nodiscard]] bool regressed() const;
};

// threshold: fraction (0.05 = 5%).
[[nodiscard]] Comparison compare_reports(const Report& base, const Report& next, double threshold);
[[nodiscard]] std::string comparison_table(const Comparison& c, double threshold);

}  // namespace cpbench
