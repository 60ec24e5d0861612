#pragma once
// What a Kimi Delta Attention layer's context parallelism costs in communication and memory, per rank
// and per layer (kda.hpp runs it; the `kda_cp` axis picks the strategy, with GDN's names). The delta
// rule is GDN's with a per-channel decay, so state passing exchanges the same pairs and halo
// (gdn_cp_costs.hpp, with Hk = Hv = H); head_parallel's all-to-all carries KDA's own channels:
//
//   head_parallel  per token a rank receives q, k, v of its H/W heads, b (1 per head) and the gate f
//                  (dk per head): (H/W) (3 dk + dv + 1) channels; it returns (H/W) dv.
//                  forward = backward = (W-1) * R * S/W * ((H/W)(3 dk + dv + 1) + (H/W) dv) * elem_bytes.
//   state_passing  gdn_cp_terms' blocks: (W-1) * (chunks R H dk (dk + dv) state_elem_bytes
//                  + chunks R (K-1) (2 H dk + H dv) elem_bytes) each way. No S in it.
//
// The layers count what they send and the runner checks the count against these every step; the
// planner and admission call the same functions.
#include "kernels/mixers/gdn/gdn_cp_costs.hpp"
#include "kernels/mixers/kda/kda_config.hpp"

namespace cpbench {

// A KDA layer on the shared sizes, as a GDN shape with Hk = Hv = H.
[[nodiscard]] GdnCpShape kda_cp_shape(const KdaConfig& config, const LinearCpShape& shared);
// head_parallel: proj channels one rank receives per token.
[[nodiscard]] int64_t kda_head_parallel_channels(const GdnCpShape& s);
// The strategy's terms (above): GDN's, with KDA's head-parallel channels. linear_cp_bytes of them is the
// formula above (W = 1 sends nothing); linear_cp_extra_memory_bytes the extra bytes one rank holds per layer
// for the backward because of CP: head_parallel the whole sequence of its channels and its output,
// R S (kda_head_parallel_channels + (H/W) dv) elem_bytes; state_passing GDN's.
[[nodiscard]] LinearCpTerms kda_cp_terms(GdnCpStrategy strategy, const GdnCpShape& s);

}  // namespace cpbench
