#pragma once
// The SSM layers' part of a plan case (docs/planner.md, "SSM layers"): FLOPs, time, bytes and memory of
// a model's Mamba layers under one SSM CP strategy. FLOPs come from the chunked scan's own count
// (ssm_scan_flops, harness/model/mamba.hpp) and the layer's projections; bytes, collective calls and the
// strategy's extra memory from its own formulas (harness/model/ssm_cp_costs.hpp), which the layers are
// checked against when they run. Per SSM layer and rank, with P the padded row, s = P / W, H heads of
// dimension Ph, state N, G groups, conv width K, Q the chunk, hidden d, e the element size:
//
//   scan FLOPs (fwd)   hidden_parallel: ssm_scan_flops(P, Q, Ph, N) * P * H/W (every token, its heads)
//                      state_passing:   ssm_scan_flops(s, Q, Ph, N) * s * H + 2 Ph N * s * H (each token's
//                                       C times the state arriving at its chunk, the correction)
//   other FLOPs (fwd)  2 s d (2 H Ph + 2 G N + H) (in_proj) + 2 s H Ph d (out_proj) + 2 K s (H Ph + 2 G N) (conv)
//   compute            x 3 with Pass::train (backward ~ 2 x forward, the scan's convention); the scan at the
//                      cluster's ssm_flops, the rest at its attention_flops (dense GEMMs)
//   comm               ssm_cp_bytes(strategy, shape) / B + calls * (W - 1) * latency (each all-to-all and
//                      all-gather is W - 1 messages); the layer waits for them: all exposed
//   memory             what the layer keeps (proj, conv output and y in e: s (2 H Ph + 2 G N + H + H Ph + 2 G N
//                      + H Ph) e, one fp32 state per chunk: s/Q H Ph N 4) + ssm_cp_extra_memory_bytes
//   ideal              the unsharded row's compute on one device / W
// x the model's SSM layers. B is the case's link (intra-node bandwidth when W fits a node).
#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/ssm_cp_costs.hpp"
#include "harness/planner/plan_types.hpp"

namespace cpbench::plan {

// The strategies a request plans (its ssm_strategies, default every known one); UsageError naming
// --ssm-cp for an unknown name.
[[nodiscard]] std::vector<std::string> planned_ssm_strategies(const std::vector<std::string>& requested);

// "" when `strategy` can run the model's SSM layers on `layout` at W, else the one-line reason:
// hidden_parallel needs heads % W == 0 and groups dividing W or divisible by it
// (SsmConfig::cp_unsupported_reason); state_passing needs a layout whose ranks own a fixed number of
// contiguous chunks (state_passing_unsupported_reason).
[[nodiscard]] std::string ssm_unsupported(const std::string& strategy, const ModelShape& model, const Layout& layout,
                                          int64_t W);

// The SSM part of a case: `strategy` at W over a padded row of P tokens whose ranks own at most
// `chunks_per_rank` contiguous runs, for the request's model, dtype (element_size), cluster and pass.
[[nodiscard]] SsmCase ssm_case(const PlanRequest& r, int64_t element_size, const std::string& strategy, int64_t W,
                               int64_t P, int64_t chunks_per_rank);

// One device's SSM time for the unsharded row of seq_len tokens (all SSM layers, the request's pass).
[[nodiscard]] double ssm_unsharded_time(const PlanRequest& r);

// The SSM layers' activation bytes per rank of `strategy` (what ssm_case reports), for admission.
[[nodiscard]] int64_t ssm_activation_bytes(const ModelShape& model, SsmCpStrategy strategy, int64_t batch, int64_t P,
                                           int64_t W, int64_t element_size, int64_t chunks_per_rank);

}  // namespace cpbench::plan
