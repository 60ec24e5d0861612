#pragma once
// The whole-step plan as JSON and as a table (docs/planner.md, "The whole step: output" documents every
// JSON field). Formats only: the numbers come from search.hpp.
#include <nlohmann/json.hpp>
#include <string>

#include "harness/planner/step/step_types.hpp"

namespace cpbench::plan::step {

[[nodiscard]] nlohmann::json step_plan_to_json(const StepPlan& plan);
[[nodiscard]] std::string step_plan_to_table(const StepPlan& plan);
// "load_balanced: mla=allgather/latent, GDN=state_passing" (the one layout and a transport per kind).
[[nodiscard]] std::string layout_text(const StepCase& c);
// "tp8 pp4 dp2 cp4 ep8 zero3" (vp only when > 1).
[[nodiscard]] std::string degrees_text(const Parallel& p);

}  // namespace cpbench::plan::step
