#pragma once
// The whole-step search (`cpbench plan --gpus N`): every Parallel enumerate_parallel allows, every layout
// that runs all of the model's kinds at its (tp, cp) (attention.hpp; priced once per (tp, cp)), every
// recompute policy asked for; each priced by price_case (step.hpp). Cases are ranked: those that fit
// first, by tokens/s/GPU, then those that do not, by memory. Degrees all given on the command line: every
// case has them (the first is the best layout of that configuration). UsageError (one line naming the
// flag) for bad degrees (parallel.hpp), FP8 on a GPU without it, a cluster without GEMM peaks, a global
// batch that is not a multiple of micro-batch x dp.
#include "harness/planner/step/step_types.hpp"

namespace cpbench::plan::step {

[[nodiscard]] StepPlan make_step_plan(const StepRequest& request);

}  // namespace cpbench::plan::step
