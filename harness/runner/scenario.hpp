#pragma once
// Scenario: a YAML file parsed and validated in one place into plain structs with defaults.
// Nothing downstream sees YAML. Errors are UsageError "FILE: key.path[i]: what was expected, got X".
// The schema (every key, default and unit) is documented in docs/scenarios.md.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/model/model.hpp"

namespace cpbench {

struct BatchSpec {
  int64_t batch_size = 1;
  int64_t seq_len = 128;                         // tokens per row (S)
  std::vector<std::vector<int64_t>> documents;   // per row; one list applies to every row; empty = one document filling the row
  int64_t padding_token_id = 0;
  std::string primary = "input_ids";             // input_ids | inputs_embeds
  bool loss_mask = false;                        // generate a loss_mask with some zeros
  bool mrope = false;                            // position_ids as [3, B, S]
  uint64_t seed = 7;
};

struct MeasureSpec {
  int64_t warmup = 0;  // untimed iterations before timing
  int64_t iters = 1;   // timed iterations (the first also feeds the reference check)
};

struct CaseSpec {
  int64_t index = 0;        // position in the scenario's expanded case list
  std::string sharder;
  std::string transport;
  int64_t cp = 1;
  int64_t dp = 1;
  std::string mask = "causal";
  std::string dtype = "float64";
  std::string expect = "match";  // match | mismatch
  [[nodiscard]] int64_t world_size() const { return cp * dp; }
  // "load_balanced/ring/cp2/causal/float64" (+ "/dp2" when dp > 1)
  [[nodiscard]] std::string name() const;
};

struct ScenarioSpec {
  std::string file;          // as given on the command line
  std::string name;
  std::string description;
  ModelConfig model;
  BatchSpec batch;
  std::string device = "cpu";  // cpu | cuda
  MeasureSpec measure;
  int64_t timeout_s = 120;     // collective timeout per case, seconds
  std::vector<CaseSpec> cases;
};

// `overrides`: "key=[v1,v2]" or "key=v" replacing a sweep axis (sharder, transport, cp, dp, mask,
// dtype, expect) in every sweep block. Throws UsageError.
[[nodiscard]] ScenarioSpec load_scenario(const std::string& file, const std::vector<std::string>& overrides = {});
[[nodiscard]] ScenarioSpec parse_scenario(const std::string& yaml_text, const std::string& file_label,
                                          const std::vector<std::string>& overrides = {});

// Keeps the cases whose name matches `regex` (ECMAScript, search semantics).
[[nodiscard]] std::vector<CaseSpec> filter_cases(const std::vector<CaseSpec>& cases, const std::string& regex);

// The closest of `known` to `word` within a small edit distance, or "".
[[nodiscard]] std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);

}  // namespace cpbench
