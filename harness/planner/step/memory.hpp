#pragma once
// Memory per GPU at its peak (docs/planner.md, "The whole step: memory"), from the same terms as the time:
//   params      P x param_bytes, / n under ZeRO 3 (P: params.hpp's GPU parameters; dense over n = dp x cp,
//               routed experts over n / ep)
//   grads       P x grad_bytes, / n under ZeRO >= 2
//   optimizer   P x optimizer_bytes, / n under ZeRO >= 1; 0 when offloaded to the CPU, whose resident set
//               on the GPU is then offload_resident_bytes_per_param (weights + the grads' term)
//   gathered    ZeRO 3: two layers unsharded in flight (the one computing, the one prefetched), weights
//               and their gradients: 2 x largest layer x (2 + grad_reduce_bytes)
//   activations per layer and token by kind (attention.hpp, mlp.hpp, moe.hpp; the linear mixers' own
//               layer_cost) under the recompute policy, x the micro-batch's tokens / tp (sequence
//               parallel) x the stage's layers x the micro-batches in flight (1F1B's first stage holds
//               min(m, pp); interleaved x (1 + (pp - 1) / (pp vp))); under full recompute one layer's whole
//               activations come back at a time (the largest, recompute none)
//   cp_buffers  per attention kind the transport's own peak_activation_bytes (its layers on the stage; one
//               under full recompute)
//   logits      embedding.hpp's, on the last stage (which holds one micro-batch's activations); they are
//               freed before the backward recomputes a layer, so the last stage's peak is its saved
//               activations + max(logits, the recomputed layer)
//   overhead    allocator_overhead x everything above (the caching allocator's reserve over the live peak)
// The peak is the larger of the first stage (most micro-batches in flight) and the last (the logits);
// fits_memory: total <= the GPU's memory (or --memory) less memory_reserve_bytes.
#include <vector>

#include "harness/planner/step/attention.hpp"
#include "harness/planner/step/case_shape.hpp"
#include "harness/planner/step/params.hpp"

namespace cpbench::plan::step {

[[nodiscard]] Memory gpu_memory(const CaseShape& s, const GpuParams& p, const std::vector<LayerKind>& kinds,
                                const std::vector<KindPrice>& prices);
// Micro-batches whose activations a first stage holds at once.
[[nodiscard]] double in_flight(const CaseShape& s);

}  // namespace cpbench::plan::step
