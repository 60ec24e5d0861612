#pragma once
// Parameter counts of the whole model and of one GPU (docs/planner.md, "The whole step"), summed from the
// components' own per-layer counts (attention, mixers, mlp, moe, embedding). Norms and biases are left out.
#include "harness/planner/step/case_shape.hpp"

namespace cpbench::plan::step {

struct ModelParams {
  double total = 0;   // every parameter
  double active = 0;  // what one token runs through: MoE layers count their top-k + shared experts
  double expert = 0;  // routed experts (EP shards them)
  double embedding = 0;  // the input embedding (left out of the 6 N of model FLOPs)
};
[[nodiscard]] ModelParams model_params(const ModelShape& m);

// What one GPU holds before ZeRO shards it: its stage's layers (the heaviest stage: layers / pp plus the
// larger of the embedding and the head; both when pp = 1), dense parts / tp, routed experts / ep.
struct GpuParams {
  double dense = 0, expert = 0;
  double largest_layer = 0;  // the largest layer's parameters on this GPU (what FSDP gathers at a time)
  [[nodiscard]] double total() const { return dense + expert; }
};
[[nodiscard]] GpuParams gpu_params(const CaseShape& s);

}  // namespace cpbench::plan::step
