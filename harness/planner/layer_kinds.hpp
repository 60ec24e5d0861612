#pragma once
// The planner's choice per attention layer kind (Plan::per_kind): a model whose attention layers are not
// all alike (gpt-oss: sliding_attention and full_attention layers; DeepSeek-V3 / Kimi K2: MLA layers)
// gets one layout x transport per kind and W, each kind planned on its own layers as a model of those
// layers alone (make_plan on a sub-request), because each kind may run its own transport:
//
//   sliding_attention  its layers under mask sliding_window:N, the request's transports plus the
//                      window-only ones (ring_window): a window N far below the local chunk S/W needs
//                      only a halo of N - 1 keys, not the (W - 1) S/W a full ring moves
//   full_attention     its layers under the request's mask and transports
//   mla                every MLA layer under the request's mask, on the transports that carry MLA
//                      (Transport::unsupported_mla: allgather, ring); compute at MLA's FLOPs (QK^T at
//                      qk_nope + qk_rope, PV at v_head_dim); each of their cases' wires priced by
//                      price_mla_wires (mla_wire_price.hpp: expanded K/V bytes against the latent's
//                      bytes + up-projection FLOPs), the cheapest (case, wire) chosen
//
// Empty for a model whose attention layers are all of one plain kind, full or all sliding (its plan is the
// cases above, unchanged).
#include <vector>

#include "harness/planner/mla_wire_price.hpp"
#include "harness/planner/plan_types.hpp"

namespace cpbench::plan {

// The wire price's inputs for one case `c` of the MLA kind's sub-plan (`layers` MLA layers) under request
// `r`: the case's compute per layer, the link its W uses, and the cluster's contention with --kernel fitted
// (0 otherwise), the same inputs the case's own time formula got (cost_model.cpp make_case).
[[nodiscard]] MlaWireQuery mla_wire_query(const PlanRequest& r, const PlanCase& c, int64_t layers);

// The kinds of `plan`'s model (plan.request as make_plan resolved it), best case per kind and W.
[[nodiscard]] std::vector<KindChoice> plan_layer_kinds(const Plan& plan);

}  // namespace cpbench::plan
