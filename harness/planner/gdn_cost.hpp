#pragma once
// The Gated DeltaNet layers' part of a plan case (docs/planner.md, "Gated DeltaNet layers"): FLOPs,
// time, bytes and memory of a model's GDN layers under one GDN CP strategy, reported in the case's
// linear-mixer slot (SsmCase, mixer "GDN"). FLOPs come from the chunked delta rule's own count
// (gdn_scan_flops, harness/model/gdn_scan.hpp) and the layer's projections; bytes, collective calls and
// the strategy's extra memory from its own formulas (harness/model/gdn_cp_costs.hpp), which the layers
// are checked against every step. Per GDN layer and rank, with P the padded row, s = P / W, Hk key and
// Hv value heads of dims dk and dv, conv width K, Q the chunk, hidden d, e the element size:
//
//   delta FLOPs (fwd)  head_parallel: gdn_scan_flops(P, Q, dk, dv) * P * Hv/W (every token, its heads)
//                      state_passing: gdn_scan_flops(s, Q, dk, dv + dk) * s * Hv (the dk identity-started
//                                     columns give each chunk's transition and each token's readout)
//                                     + 2 dk dv * s * Hv (the correction S_in^T r_t)
//                                     + W * chunks * 2 dk dk dv * Hv (composing every chunk's pair)
//   other FLOPs (fwd)  2 s d (2 Hk dk + 2 Hv dv + 2 Hv) (in_proj) + 2 s Hv dv d (out_proj)
//                      + 2 K s (2 Hk dk + Hv dv) (conv)
//   compute            x 3 with Pass::train; the delta rule at the cluster's ssm_flops (the chunked form's
//                      inter-chunk pass and triangular solves are memory-bound like the SSD scan's), the
//                      rest at its attention_flops (dense GEMMs)
//   comm               gdn_cp_bytes(strategy, shape) / B + calls * (W - 1) * latency; all exposed
//   memory             what the layer keeps: proj, conv output and o in e, s (in_proj_width +
//                      conv_channels + Hv dv) e; the chunked form's intra-chunk matrices, 3 of [s, Q] per
//                      value head in fp32 (decay, A, q k^T); one fp32 state per chunk, s/Q Hv dk dv 4;
//                      + gdn_cp_extra_memory_bytes
// x the model's GDN layers. B is the case's link (intra-node bandwidth when W fits a node).
#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/gdn_cp_costs.hpp"
#include "harness/planner/plan_types.hpp"

namespace cpbench::plan {

// The strategies a request plans (its gdn_strategies, default every known one); UsageError naming
// --gdn-cp for an unknown name.
[[nodiscard]] std::vector<std::string> planned_gdn_strategies(const std::vector<std::string>& requested);

// "" when `strategy` can run the model's GDN layers on `layout` at W, else the one-line reason.
[[nodiscard]] std::string gdn_unsupported(const std::string& strategy, const ModelShape& model, const Layout& layout,
                                          int64_t W);

// The GDN part of a case (SsmCase with mixer "GDN").
[[nodiscard]] SsmCase gdn_case(const PlanRequest& r, int64_t element_size, const std::string& strategy, int64_t W,
                               int64_t P, int64_t chunks_per_rank);

// One device's GDN time for the unsharded row (all GDN layers, the request's pass).
[[nodiscard]] double gdn_unsharded_time(const PlanRequest& r);

// The GDN layers' activation bytes per rank under `strategy` (what gdn_case reports), for admission.
[[nodiscard]] int64_t gdn_activation_bytes(const ModelShape& model, GdnCpStrategy strategy, int64_t batch, int64_t P,
                                           int64_t W, int64_t element_size, int64_t chunks_per_rank);

}  // namespace cpbench::plan
