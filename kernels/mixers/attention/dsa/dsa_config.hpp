#pragma once
// model.attention.dsa: DeepSeek Sparse Attention on an MLA model (DeepSeek-V3.2, GLM-5). The keys, their
// defaults and what they mean; the maths is in dsa.hpp, the CP path in dsa_context.hpp, the formulas in
// dsa_costs.hpp (all in this folder).
#include <cstdint>
#include <string>
#include <vector>

namespace cpbench {

// The indexer's loss stage (docs/correctness.md, "DeepSeek Sparse Attention"):
//   dense   KL(p || softmax(I)) over every visible key; p = the main attention's probabilities over the
//           visible keys (detached), summed over heads and L1-normalised. The indexer's inputs are not
//           detached (the warm-up stage).
//   sparse  the same KL restricted to the picked keys (both sides renormalised on them); the indexer's
//           inputs (the layer's normed input) are detached, so the indexer learns only from the KL and the
//           model only from the LM loss.
enum class DsaLoss { dense, sparse };
[[nodiscard]] const char* to_string(DsaLoss loss);

// GLM-5's indexer_types (transformers' GlmMoeDsaConfig / GlmMoeDsaAttention): a full layer runs its
// indexer; a shared layer has none (no indexer weights, no indexer loss) and attends the picks of the
// previous full layer (the last full layer before it: a run of shared layers all reuse one full layer's
// picks). The first DSA layer must be full (transformers raises at the forward; cpbench refuses the
// config, naming the key). Under CP a shared layer gathers only its latent (r + dr values per token).
enum class DsaIndexerKind { full, shared };
[[nodiscard]] const char* to_string(DsaIndexerKind kind);  // "full", "shared" (the names indexer_types uses)

struct DsaConfig {
  int64_t index_heads = 0;     // H_I (index_n_heads); 0: no DSA
  int64_t index_head_dim = 0;  // d_I (index_head_dim); > qk_rope_head_dim (RoPE on its first dr dims)
  int64_t topk = 0;            // k (index_topk)
  bool scoring_relu = true;    // ReLU on each head's q_I . k_I before the weighted sum (DeepSeek's; GLM-5's too)
  DsaLoss loss = DsaLoss::dense;
  double loss_coeff = 1.0;     // L = LM loss + loss_coeff * sum over DSA layers of L_I
  // One per attention layer, in layer order (model.attention.dsa.indexer_types); empty: every layer full.
  std::vector<DsaIndexerKind> indexer_kinds;
  [[nodiscard]] bool enabled() const { return index_heads > 0; }
  [[nodiscard]] DsaIndexerKind kind_of(int64_t attention_layer) const {
    return indexer_kinds.empty() ? DsaIndexerKind::full : indexer_kinds[static_cast<size_t>(attention_layer)];
  }
  [[nodiscard]] int64_t shared_layers() const {
    int64_t n = 0;
    for (const DsaIndexerKind k : indexer_kinds) n += k == DsaIndexerKind::shared ? 1 : 0;
    return n;
  }
};

}  // namespace cpbench
