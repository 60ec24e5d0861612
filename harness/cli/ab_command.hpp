#pragma once
// `cpbench compare --ab BASE_CPBENCH SCENARIO`: an A/B comparison that takes the machine out of the
// comparison. The baseline build and the new build (this executable, or --new-exe) run the scenario
// interleaved, case by case, on the same machine in one go: for each case, `rounds` rounds in ABBA
// order (A B, then B A, ...), so a slow drift of the machine's load hits both sides alike. Each side's
// samples of a case are pooled over its rounds and judged as `cpbench compare` judges two reports
// (reports/compare.hpp). Returns compare's exit status.
#include <string>
#include <vector>

#include "reports/compare.hpp"

namespace cpbench {

struct AbOptions {
  std::string base_exe;             // the baseline cpbench executable
  std::string new_exe;              // "" = this executable
  std::string scenario;             // scenario YAML both builds run
  std::string out_dir = "cpbench-ab";  // <out>/{base,new}/<case>-r<round>/ and their logs
  int rounds = 2;                   // per case and side
  std::string filter;               // only cases whose name matches (as `run --filter`)
  std::vector<std::string> overrides;  // `-a key=[...]`, passed to both builds
  CompareOptions compare;
};

int run_ab_command(const AbOptions& options);

// A regex matching exactly `name` (its regex metacharacters escaped), for `run --filter`.
[[nodiscard]] std::string exact_name_regex(const std::string& name);

}  // namespace cpbench
