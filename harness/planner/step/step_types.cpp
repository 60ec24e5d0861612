#include "harness/planner/step/step_types.hpp"

#include "harness/planner/step/constants.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan::step {

Recompute parse_recompute(const std::string& t) {
  if (t == "none") return Recompute::none;
  if (t == "selective") return Recompute::selective;
  if (t == "full") return Recompute::full;
  throw UsageError("--recompute: unknown policy '" + t + "' (known: none, selective, full)");
}

Precision parse_precision(const std::string& t) {
  if (t == "bf16") return Precision::bf16;
  if (t == "fp8") return Precision::fp8;
  throw UsageError("--precision: unknown precision '" + t + "' (known: bf16, fp8)");
}

Offload parse_offload(const std::string& t) {
  if (t == "none") return Offload::none;
  if (t == "optimizer") return Offload::optimizer;
  throw UsageError("--offload: unknown offload '" + t + "' (known: none, optimizer)");
}

Stack parse_stack(const std::string& t) {
  if (t == "cpbench") return Stack::cpbench;
  if (t == "pytorch-cp") return Stack::pytorch_cp;
  throw UsageError("--stack: unknown stack '" + t + "' (known: cpbench, pytorch-cp)");
}

std::string to_string(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}
std::string to_string(Precision p) { return p == Precision::fp8 ? "fp8" : "bf16"; }
std::string to_string(Offload o) { return o == Offload::optimizer ? "optimizer" : "none"; }
std::string to_string(Stack s) { return s == Stack::pytorch_cp ? "pytorch-cp" : "cpbench"; }

const StepConstants& constants() {
  static const StepConstants k;
  return k;
}

}  // namespace cpbench::plan::step
