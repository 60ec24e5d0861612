#pragma once
// The non-attention mixer's part of a plan case (docs/planner.md, "SSM layers", "Gated DeltaNet layers"):
// FLOPs, time, bytes and memory of a model's layers of one linear mixer under one of its CP strategies.
// The numbers per layer come from the mixer itself (Mixer::layer_cost, kernels/mixers/: its recurrence's
// own FLOP count, its projections, its strategies' byte and memory formulas, which the layers are checked
// against when they run); this room only turns them into a case:
//   compute   x 3 with Pass::train (backward ~ 2 x forward, the scans' convention); the recurrence at the
//             cluster's ssm_flops, the projections and conv at its attention_flops (dense GEMMs)
//   comm      bytes / B + calls * (W - 1) * latency (each all-to-all and all-gather is W - 1 messages);
//             the layer waits for them: all exposed. B is the case's link (intra-node when W fits a node).
//   ideal     the unsharded row's compute on one device / W
// x the model's layers of that mixer.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/planner/plan_types.hpp"
#include "kernels/mixers/mixer.hpp"

namespace cpbench::plan {

// The model's one non-attention mixer (nullptr when every layer is attention); UsageError when it has
// layers of two (such a model is not planned).
[[nodiscard]] const Mixer* planned_mixer(const ModelShape& model);

// The strategies a request plans for `mixer` (its requested list on the mixer's axis, default every
// one); UsageError naming the flag (--ssm-cp for axis ssm_cp) for an unknown name.
[[nodiscard]] std::vector<std::string> planned_strategies(const Mixer& mixer, const PlanRequest& request);

// The mixer's part of a case: `strategy` at W over a padded row of P tokens whose ranks own at most
// `chunks_per_rank` contiguous runs, for the request's model, dtype (element_size), cluster and pass.
[[nodiscard]] SsmCase mixer_case(const PlanRequest& r, const Mixer& mixer, int64_t element_size,
                                 const std::string& strategy, int64_t W, int64_t P, int64_t chunks_per_rank);

// One device's time of the mixer's layers for the unsharded row of seq_len tokens (the request's pass);
// 0 without such layers.
[[nodiscard]] double mixer_unsharded_time(const PlanRequest& r);

// The mixer's activation bytes per rank under `strategy`, all its layers (what mixer_case reports), for admission.
[[nodiscard]] int64_t mixer_activation_bytes(const ModelShape& model, const Mixer& mixer, const std::string& strategy,
                                             int64_t batch, int64_t P, int64_t W, int64_t element_size,
                                             int64_t chunks_per_rank);

}  // namespace cpbench::plan
