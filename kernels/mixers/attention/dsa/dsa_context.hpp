#pragma once
// DSA's step context (the attention mixer's MixerStepContext when model.attention.dsa is on): what every
// DSA layer of a step reads on this rank, built once per step from the metadata (never inside a layer).
//
// Under CP (the allgather path, Megatron's design): queries stay local; each layer's key side (the MLA
// latent [c, k_rope] and the indexer key k_I, r + dr + d_I values per token) is all-gathered over the CP
// group (backward: reduce-scatter of the gradient in the accumulation dtype) and put in GLOBAL order
// with the layout's own map (sharders/layout.hpp GlobalLayout::ranks), so the key columns, their
// metadata and hence the top-k's tie rule (dsa.hpp) are exactly the single rank's. The indexer loss is
// summed over this rank's valid query rows and divided by the count of valid rows of the WHOLE sequence
// (every rank knows it from the gathered metadata): the CP ranks' losses then sum to the single rank's.
// Bytes are checked against dsa_costs.hpp every call, forward and backward.
//
// On ring (dsa_ring.hpp) no rank holds every key: the sparse stage picks in two rounds (ring_topk, then
// ring_collect of the picked rows), the dense stage collects every row by the ring (gather_keys). The
// picks are the same global key indices as allgather's, so everything after them is one code.
//
// One rank (the reference): the same context with no communicator; keys are the batch's own.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/mixers/attention/attention_config.hpp"
#include "kernels/mixers/attention/dsa/dsa_costs.hpp"
#include "kernels/mixers/attention/dsa/dsa_ring.hpp"
#include "kernels/mixers/mixer.hpp"

namespace cpbench {

// The faults the DSA negative controls plant (kernels/controls/dsa_faults.cpp; CpStepInputs::fault).
inline constexpr const char* kDsaFaultBufferOrder = "dsa_buffer_order";  // keys in rank order, unstable top-k
inline constexpr const char* kDsaFaultKlPerRank = "dsa_kl_per_rank";     // KL / this rank's valid rows
inline constexpr const char* kDsaFaultNoDetach = "dsa_no_detach";        // sparse stage: inputs not detached
// A shared indexer layer recomputing its own picks (the previous full layer's indexer run on its input).
inline constexpr const char* kDsaFaultSharedRecompute = "dsa_shared_recompute";

class DsaIndexer;

struct DsaStepContext final : MixerStepContext {
  DsaConfig config;
  dsa_costs::DsaDims dims;
  int world = 1, rank = 0;
  int64_t batch = 0, local_tokens = 0;  // B, S (this rank's)
  int64_t element_size = 8;             // bytes per activation element (the step's dtype)
  std::string fault;                    // "" or one of the kDsaFault* above
  std::string transport = "allgather";  // one of dsa_transports(): how the key side travels
  kernels::dsa::DsaRing ring;           // ring: what its passes need (key_global: this rank's map)
  // int64 [W*S]: the rank-order columns of the gathered keys in global order; undefined: keep rank order
  // (W = 1, or the dsa_buffer_order control).
  at::Tensor order;
  at::Tensor visible;     // bool [B, S, W*S]: this rank's queries against the keys in that order
  at::Tensor row_valid;   // bool [B, S]: the query rows the indexer loss counts (real tokens)
  double loss_rows = 1;   // what a layer's KL sum is divided by (the sequence's valid rows)
  at::Tensor aux;         // this rank's part of the step's indexer loss (sum over layers); undefined: none yet
  std::vector<at::Tensor> picks;  // per layer, [B, S, k]: its picks as rank-order columns (key_picks)
  // The last full indexer layer's picks ([B, S, K], columns in the key order) and its indexer: what the
  // shared layers after it attend (GLM-5's indexer_types; the indexer only for the dsa_shared_recompute
  // control). Set by each full layer's forward.
  at::Tensor shared_picks;
  const DsaIndexer* last_indexer = nullptr;
  // The case's transport (CpStepInputs::strategy; "" on one rank). a2a and hybrid split the heads over
  // Ulysses groups of `ulysses` consecutive ranks (a2a: one group of W; dsa_heads.hpp): then visible_all is
  // bool [B, U*S, W*S], the group's queries (rank order) against the keys in `order`.
  int64_t ulysses = 1;
  at::Tensor visible_all;
  [[nodiscard]] bool head_split() const { return world > 1 && (transport == "a2a" || transport == "hybrid"); }

  // [B, S, n] of this rank -> [B, W*S, n] of every rank, columns in `order`. Differentiable (the
  // gradient is reduce-scattered home in the accumulation dtype); checks and counts its bytes (n: a full
  // layer's latent and index key, a shared layer's latent only).
  // On ring: every row collected by the ring (dsa_ring.hpp), the same columns and gradient (full layers).
  [[nodiscard]] at::Tensor gather_keys(const at::Tensor& local, bool shared = false) const;
  // Ring's sparse stage under CP: the picks by two rounds instead of gathering the keys (the layer asks).
  [[nodiscard]] bool two_rounds() const;
  // Round 1: the picks [B, S, K] (global key columns, -1 none) of this rank's queries and their index keys,
  // from every rank's index keys k_local [B, S, d_I]; q_idx, w as index_scores takes them (not differentiated).
  [[nodiscard]] kernels::dsa::RingPicks ring_picks(const at::Tensor& q_idx, const at::Tensor& w,
                                                   const at::Tensor& k_local) const;
  // Round 2: the key side's rows [B, S, K, n] of the picks (the latent collected by the ring, the index keys
  // round 1's), differentiable in `local` [B, S, n].
  [[nodiscard]] at::Tensor ring_rows(const at::Tensor& local, const kernels::dsa::RingPicks& picked) const;
  void add_loss(const at::Tensor& layer_loss);
  // Records a layer's picks [B, S, K] (columns in the layer's key order, -1 none) for key_picks.
  void add_picks(const at::Tensor& layer_picks);
  [[nodiscard]] at::Tensor aux_loss() const override { return aux; }
  [[nodiscard]] at::Tensor key_picks() const override;
  [[nodiscard]] int64_t bytes_per_layer() const override;  // a full layer's
  [[nodiscard]] int64_t bytes_of_layers(int64_t layers) const override;  // the shared layers send less
  [[nodiscard]] std::string strategy_name() const override { return transport + " (DSA)"; }
};

// The step's contexts (the attention mixer's single_rank_context / cp_context call these).
[[nodiscard]] std::shared_ptr<DsaStepContext> make_dsa_single_rank_context(const AttentionConfig& config,
                                                                           const TokenMeta& meta, const MaskSpec& mask,
                                                                           at::ScalarType dtype);
[[nodiscard]] std::shared_ptr<DsaStepContext> make_dsa_cp_context(const AttentionConfig& config,
                                                                  const CpStepInputs& in);

// The DSA context of a layer's step; throws naming model.attention.dsa when the step has none.
[[nodiscard]] DsaStepContext& dsa_context(const LayerStep& step);

// "" when a case can run DSA layers; else the one-line reason naming the key (admission asks it before
// any rank starts): the transports that carry DSA (allgather, ring, a2a, hybrid), the masks its top-k takes (causal,
// document), the transport routing, no learned sinks.
[[nodiscard]] std::string dsa_unsupported_reason(const AttentionConfig& config, const std::string& transport,
                                                 const MaskSpec& mask, bool sdpa_hook);
// The transports that carry DSA; of them, those whose wire is the key side alone (dsa_costs forward_bytes +
// backward_bytes: allgather, ring), the ones the planner prices (a2a / hybrid add the head split's score sums).
[[nodiscard]] std::vector<std::string> dsa_key_side_transports();
[[nodiscard]] std::vector<std::string> dsa_transports();

}  // namespace cpbench
