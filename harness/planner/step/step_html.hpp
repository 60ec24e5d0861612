#pragma once
// `cpbench plan --gpus N --html FILE`: one self-contained page (inline SVG and CSS, no scripts, no
// network): the top cases' step split as stacked bars, and the best case at each CP size's step time and
// memory per GPU against the usable memory. Formats only (step_output.hpp's texts).
#include <string>

#include "harness/planner/step/step_types.hpp"

namespace cpbench::plan::step {

[[nodiscard]] std::string step_plan_to_html(const StepPlan& plan);
// Writes step_plan_to_html to `path` (UsageError naming --html when it cannot).
void write_step_html(const StepPlan& plan, const std::string& path);

}  // namespace cpbench::plan::step
