#pragma once
// What the scenario-parsing tests share: a scenario's refusal as the user sees it.
#include <string>

#include "harness/runner/scenario.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::scenario_test {

// The message parse_scenario refuses `yaml` with, or "accepted".
inline std::string refusal(const std::string& yaml) {
  try {
    (void)parse_scenario(yaml, "x.yaml");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace cpbench::scenario_test
