#pragma once
// A mixer's config as its scenario keys and config readers see it: named integer fields
// (model.<config_key>.<name>), so a scenario, the planner's output and the model readers handle every
// mixer's sizes the same way without naming one.
#include <cstdint>
#include <string>
#include <vector>

namespace cpbench {

struct ConfigField {
  std::string name;        // the scenario key under model.<config_key>
  int64_t* value;          // the config struct's member
  int64_t min = 1;         // smallest value the key accepts
  bool flag = false;       // a yes / no key (true / false in YAML), held as 1 / 0
};
struct ConstConfigField {
  std::string name;
  int64_t value;
};

}  // namespace cpbench
