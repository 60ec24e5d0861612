#pragma once
// `cpbench compare --ab BASE_CPBENCH SCENARIO`: an A/B comparison that holds on a shared machine. The
// baseline build and the new build (this executable, or --new-exe) run each case in many short rounds
// (`rounds` per side, each a `run --filter '^case$'`, its own process), in blocks of four: ABBA or BAAB,
// the order drawn per block and case from a generator seeded with `seed`; blocks go case after case, so
// every case's rounds spread over the whole session. The round is the unit: reports/paired_rounds.hpp
// judges the per-pair log-ratios of the rounds' medians against the session's own A/A spread. Returns
// its exit status (0, 1 regression, 4 inconclusive).
#include <string>
#include <vector>

#include "reports/compare.hpp"
#include "reports/paired_rounds.hpp"

namespace cpbench {

struct AbOptions {
  std::string base_exe;             // the baseline cpbench executable
  std::string new_exe;              // "" = this executable
  std::string scenario;             // scenario YAML both builds run
  std::string out_dir = "cpbench-ab";  // <out>/{base,new}/<case>-r<round>/ and their logs
  int rounds = 8;                   // per case and side, rounded up to a multiple of 2 (whole blocks)
  uint64_t seed = 1;                // the block orders' generator
  std::string filter;               // only cases whose name matches (as `run --filter`)
  std::vector<std::string> overrides;  // `-a key=[...]`, passed to both builds
  CompareOptions compare;          // metric, threshold, alpha
};

int run_ab_command(const AbOptions& options);

// A regex matching exactly `name` (its regex metacharacters escaped), for `run --filter`.
[[nodiscard]] std::string exact_name_regex(const std::string& name);

}  // namespace cpbench
