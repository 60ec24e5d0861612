#pragma once
// Typed reads of one scenario YAML node: each checks the node's kind and range and fails with a
// UsageError "FILE: key.path: what was expected, got what was there" (the one shape of every
// bad-input message, exit 2). Used by the scenario parser (scenario.cpp) and its model section
// (scenario_model.cpp); nothing past parsing sees YAML.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sharders/core/check.hpp"

namespace cpbench::yaml_read {

// Parsing context: the file label and the key path of the node being read.
struct Ctx {
  std::string file;
  [[noreturn]] void fail(const std::string& path, const std::string& what) const;
};

// How a node reads in a message: "\"text\"", "a list", "a mapping" or "nothing".
std::string scalar_text(const YAML::Node& n);
// An integer >= min_value.
int64_t read_int(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t min_value);
// A number > 0 (and <= max_value when max_value > 0).
double read_positive(const Ctx& c, const YAML::Node& n, const std::string& path, double max_value = 0);
std::string read_str(const Ctx& c, const YAML::Node& n, const std::string& path);
bool read_bool(const Ctx& c, const YAML::Node& n, const std::string& path);
// A mapping whose keys are all in `known` (an unknown key names the closest known one).
void check_keys(const Ctx& c, const YAML::Node& map, const std::string& path, const std::vector<std::string>& known);
// A scalar or a list of scalars -> list of strings, each validated by `check(path, value)`.
std::vector<std::string> read_str_list(const Ctx& c, const YAML::Node& n, const std::string& path,
                                       const std::function<void(const std::string&, const std::string&)>& check);
std::vector<int64_t> read_int_list(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t min_value);

}  // namespace cpbench::yaml_read
