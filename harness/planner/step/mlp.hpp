#pragma once
// The dense MLP of a step (docs/planner.md, "The whole step"). Per dense MLP layer of width f:
//   params       gated (SwiGLU) 3 h f, else 2 h f; an MoE model's dense layers run (top-k + shared) x the
//                expert width (DeepSeek-V3 and Kimi K2: exactly their intermediate_size)
//   FLOPs        2 params / tp per token forward; x (3, or 4 under full recompute) per step
//   activations  per token, bytes (e = 2), before / tp: gated none e (2h + 3f) (norm input, GEMM input,
//                gate and up outputs, activation output), selective e (h + 2f), full 0 (the layer input is
//                the attention's); non-gated none e (2h + 2f), selective e (h + f)
#include "harness/planner/step/case_shape.hpp"

namespace cpbench::plan::step {

[[nodiscard]] double dense_mlp_layers(const ModelShape& m);  // mlp_layers - moe_layers
[[nodiscard]] double dense_mlp_width(const ModelShape& m);
[[nodiscard]] double mlp_layer_params(const ModelShape& m);
[[nodiscard]] double mlp_activation_per_token(const ModelShape& m, Recompute recompute);
// The dense MLP layers of a GPU's stage, every micro-batch of a step.
[[nodiscard]] Component mlp_component(const CaseShape& s);

}  // namespace cpbench::plan::step
