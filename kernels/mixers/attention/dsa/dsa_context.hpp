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
// One rank (the reference): the same context with no communicator; keys are the batch's own.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/mixers/attention/attention_config.hpp"
#include "kernels/mixers/attention/dsa/dsa_costs.hpp"
#include "kernels/mixers/mixer.hpp"

namespace cpbench {

// The faults the DSA negative controls plant (kernels/controls/dsa_faults.cpp; CpStepInputs::fault).
inline constexpr const char* kDsaFaultBufferOrder = "dsa_buffer_order";  // keys in rank order, unstable top-k
inline constexpr const char* kDsaFaultKlPerRank = "dsa_kl_per_rank";     // KL / this rank's valid rows
inline constexpr const char* kDsaFaultNoDetach = "dsa_no_detach";        // sparse stage: inputs not detached

struct DsaStepContext final : MixerStepContext {
  DsaConfig config;
  dsa_costs::DsaDims dims;
  int world = 1, rank = 0;
  int64_t batch = 0, local_tokens = 0;  // B, S (this rank's)
  int64_t element_size = 8;             // bytes per activation element (the step's dtype)
  std::string fault;                    // "" or one of the kDsaFault* above
  // int64 [W*S]: the rank-order columns of the gathered keys in global order; undefined: keep rank order
  // (W = 1, or the dsa_buffer_order control).
  at::Tensor order;
  at::Tensor visible;     // bool [B, S, W*S]: this rank's queries against the keys in that order
  at::Tensor row_valid;   // bool [B, S]: the query rows the indexer loss counts (real tokens)
  double loss_rows = 1;   // what a layer's KL sum is divided by (the sequence's valid rows)
  at::Tensor aux;         // this rank's part of the step's indexer loss (sum over layers); undefined: none yet
  std::vector<at::Tensor> picks;  // per layer, [B, S, k]: its picks as rank-order columns (key_picks)
  // The case's transport (CpStepInputs::strategy; "" on one rank). a2a and hybrid split the heads over
  // Ulysses groups of `ulysses` consecutive ranks (a2a: one group of W; dsa_heads.hpp): then visible_all is
  // bool [B, U*S, W*S], the group's queries (rank order) against the keys in `order`.
  std::string transport;
  int64_t ulysses = 1;
  at::Tensor visible_all;
  [[nodiscard]] bool head_split() const { return world > 1 && (transport == "a2a" || transport == "hybrid"); }

  // [B, S, n] of this rank -> [B, W*S, n] of every rank, columns in `order`. Differentiable (the
  // gradient is reduce-scattered home in the accumulation dtype); checks and counts its bytes.
  [[nodiscard]] at::Tensor gather_keys(const at::Tensor& local) const;
  void add_loss(const at::Tensor& layer_loss);
  // Records a layer's picks [B, S, K] (columns in the layer's key order, -1 none) for key_picks.
  void add_picks(const at::Tensor& layer_picks);
  [[nodiscard]] at::Tensor aux_loss() const override { return aux; }
  [[nodiscard]] at::Tensor key_picks() const override;
  [[nodiscard]] int64_t bytes_per_layer() const override;
  [[nodiscard]] std::string strategy_name() const override { return head_split() ? transport + " (DSA)" : "allgather (DSA)"; }
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
// any rank starts): the transports that carry DSA (allgather, a2a), the masks its top-k takes (causal,
// document), the transport routing, no learned sinks.
[[nodiscard]] std::string dsa_unsupported_reason(const AttentionConfig& config, const std::string& transport,
                                                 const MaskSpec& mask, bool sdpa_hook);
// The transports that carry DSA.
[[nodiscard]] std::vector<std::string> dsa_transports();

}  // namespace cpbench
