#pragma once
// DeepSeek Sparse Attention in the plan (docs/planner.md, "DSA layers"): a DSA layer (DeepSeek-V3.2, GLM-5)
// is two stages, each with its own balance over the layout's ranks, and a key-side wire. Every FLOP and byte
// is dsa_costs' (kernels/mixers/attention/dsa/dsa_costs.hpp), called per query of the rank under the
// layout's token map:
//
//   indexer  sum over rank r's queries of indexer_flops(n_t)      grows with position: wants head-tail
//   sparse   sum over rank r's queries of sparse_core_flops(n_t)  min(k, n_t) + a per-token term: flat past k
//   wire     dsa_costs::forward_bytes + backward_bytes per call on the transports of dsa_key_side_transports()
//            (allgather: the latent, the rope key and the index key, r + dr + d_I values per token)
//
// n_t = the query's visible keys (mask_area's count, padding queries included as the transports count
// them). Time per layer: each stage's slowest rank at the cluster's attention FLOP/s (x kStepFactor for a
// training step), the stages one after the other (the sparse core waits for the picks), plus the wire,
// exposed: the indexer needs every key before it scores. GLM-5's shared layers reuse the previous full
// layer's picks: no indexer there.
#include <cstdint>
#include <vector>

#include "harness/planner/presets.hpp"
#include "kernels/mixers/attention/dsa/dsa_costs.hpp"

namespace cpbench::plan {

// The model's DSA dimensions (heads: the model's query heads); enabled() false without DSA.
[[nodiscard]] dsa_costs::DsaDims dsa_dims(const ModelShape& m);
[[nodiscard]] bool has_dsa(const ModelShape& m);
// Attention layers that run their own indexer (GLM-5's "full" indexer layers; every layer without
// indexer_types).
[[nodiscard]] int64_t dsa_indexer_layers(const ModelShape& m);

// Forward FLOPs per rank of one DSA layer's two stages, from each rank's queries' visible-key counts.
struct DsaRankWork {
  std::vector<double> indexer, sparse;
};
[[nodiscard]] DsaRankWork dsa_rank_work(const dsa_costs::DsaDims& d, const std::vector<std::vector<int64_t>>& rank_positions,
                                        const std::vector<int64_t>& visible);

// One case's DSA part (all DSA layers, one row): per stage the slowest rank's forward FLOPs, the balance
// (max / mean over ranks), the time; the wire.
struct DsaCase {
  bool enabled = false;
  double indexer_flops_max = 0, indexer_balance = 1, indexer_s = 0;
  double sparse_flops_max = 0, sparse_balance = 1, sparse_s = 0;
  double wire_bytes = 0, wire_s = 0;  // per rank per step (all DSA layers), all exposed
  double step_s = 0;                  // indexer_s + sparse_s + wire_s
};

}  // namespace cpbench::plan
