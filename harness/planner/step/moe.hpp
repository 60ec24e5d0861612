#pragma once
// Mixture-of-experts layers and expert parallelism (docs/planner.md, "The whole step"). Per MoE layer,
// E routed experts of width f, top-k, s shared experts, hidden h:
//   params       routed E x 3 h f (gated; 2 h f otherwise), shared s x 3 h f, router h E; active per token
//                (k + s) x 3 h f + h E
//   FLOPs        2 x active / tp per token forward (routing balanced: every GPU's experts get k/E of the
//                tokens); x (3, or 4 under full recompute) per step
//   EP           the routed experts split over ep ranks (not over tp: expert tensor parallel 1); each token's
//                hidden vector goes to k experts, (ep - 1) / ep of them on another rank: dispatch
//                T k h e (ep - 1) / ep bytes per GPU and pass, T = its sequence-parallel tokens, and the
//                combine the same back; forward (twice under full recompute) + backward, so
//                (passes_fwd + 1) x 2 x T k h e (ep - 1) / ep per layer
//   activations  per token, bytes (e = 2), before / tp: none e (2h + (k + s)(h + 3f)) + 4 E (router
//                logits), selective e (h + (k + s)(h + 2f)) + 4 E, full 0
#include "harness/planner/step/case_shape.hpp"

namespace cpbench::plan::step {

struct MoeParams {
  double routed = 0, shared = 0, router = 0;  // per MoE layer
  double active = 0;                          // per token: (k + s) experts + router
};
[[nodiscard]] MoeParams moe_layer_params(const ModelShape& m);
[[nodiscard]] double moe_activation_per_token(const ModelShape& m, Recompute recompute);
// The MoE layers' expert GEMMs of a GPU's stage, every micro-batch.
[[nodiscard]] Component moe_component(const CaseShape& s);
// EP's dispatch and combine all-to-alls: bytes and transfer time (time_s left 0; the step exposes it).
[[nodiscard]] Component ep_component(const CaseShape& s);

}  // namespace cpbench::plan::step
