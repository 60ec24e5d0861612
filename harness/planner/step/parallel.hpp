#pragma once
// The parallel dimensions of a step (docs/planner.md, "Parallel degrees"): the degrees a request fixes
// checked against the model and the cluster, every other one enumerated, and the link each group runs on.
// Rank order: tp innermost, then cp, dp, pp; ep takes ep consecutive ranks of the dp x cp ones.
#include <cstdint>
#include <vector>

#include "harness/planner/step/step_types.hpp"

namespace cpbench::plan::step {

// The degrees a request gives, checked: one UsageError line naming the flag for a product that is not
// --gpus, TP beyond a node (an NVLink domain), heads or kv heads not divisible by TP, experts not
// divisible by EP, EP not dividing dp x cp, layers not divisible by PP x VP, --vp without --pp > 1.
void validate_degrees(const StepRequest& request);

// Every Parallel with tp x pp x dp x cp = request.gpus that honours the fixed degrees and the model:
// TP within a node dividing heads and kv heads, PP x VP dividing the layers, CP in request.attention.cps
// (every divisor when empty) with seq_len divisible by 2 cp, EP dividing the experts and dp x cp (1 for a
// dense model). zero: the request's, else {1, 3}.
[[nodiscard]] std::vector<Parallel> enumerate_parallel(const StepRequest& request);

// Ranks a group of this dimension spans (consecutive rank ids): tp; tp x cp; tp x cp x dp (ZeRO / DP);
// tp x ep; tp x cp x dp x pp (PP neighbours are tp x cp x dp apart).
enum class Dim { tp, cp, dp, ep, pp };
[[nodiscard]] int64_t span(const Parallel& p, Dim d);
// The link a group of `span` ranks runs on: intra-node (NVLink domain) when it fits in one, else inter.
[[nodiscard]] double group_bandwidth(const Cluster& c, int64_t span);

}  // namespace cpbench::plan::step
