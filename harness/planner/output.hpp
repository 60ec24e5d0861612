#pragma once
// A plan as JSON (the schema in docs/planner.md) or as the table `cpbench plan` prints. Formats only.
#include <nlohmann/json.hpp>
#include <string>

#include "harness/planner/plan_types.hpp"

namespace cpbench::plan {

[[nodiscard]] nlohmann::json plan_to_json(const Plan& plan);
[[nodiscard]] std::string plan_to_table(const Plan& plan);

}  // namespace cpbench::plan
