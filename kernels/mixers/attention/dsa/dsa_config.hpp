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

// GLM-5's indexer_types: a full layer runs its indexer; a shared layer reuses the picks of the previous
// full layer (and has no indexer weights, no indexer loss).
enum class DsaIndexerKind { full, shared };

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
};

}  // namespace cpbench
