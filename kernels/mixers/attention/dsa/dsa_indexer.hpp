#pragma once
// The lightning indexer of one MLA layer with model.attention.dsa, and the layer's DSA attention: what
// the MLA layer (kernels/mixers/attention/attention.cpp) calls instead of the attention at the hook point.
//
// Parameters (drawn after the MLA layer's own, in this order): idx_wq [H_I*d_I, hidden], idx_wk [d_I,
// hidden], idx_k_norm_w / idx_k_norm_b [d_I] (LayerNorm, eps 1e-6: ones / zeros), idx_w [H_I, hidden].
//   q_I = h idx_wq^T per head  (HF's wq_b reads the q latent; cpbench's MLA has no q LoRA, so h)
//   k_I = LayerNorm(h idx_wk^T)  one key per token shared by the indexer heads
//   RoPE (rotate-half, DeepSeek-V3.2's; not GLM-5's interleaved) on the first qk_rope_head_dim dims of
//   q_I and k_I (HF: config.qk_rope_head_dim, 64 at DeepSeek-V3.2's dims; the tiny test models' dr), so
//   d_I > dr is required
//   w = h idx_w^T * H_I^-0.5 in the compute dtype (float32 for 16-bit models: the fp32 head weights)
// Then (dsa.hpp): scores against the gathered keys, top-k, sparse MLA over the picks (softmax scale
// (dn + dr)^-0.5), the indexer's KL added to the step's loss (dsa_context.hpp) times loss_coeff, divided by
// the sequence's valid rows. In the sparse loss stage h is detached on the indexer's side.
//
// A shared layer (model.attention.dsa.indexer_types, GLM-5's): no parameters drawn, no indexer loss; it
// gathers its latent only and attends the picks of the last full layer before it (DsaStepContext::
// shared_picks, set by that layer's forward in the same step), which it also records for the picks check.
#include <ATen/ATen.h>

#include <functional>

#include "kernels/mixers/attention/attention_config.hpp"
#include "kernels/mixers/mixer.hpp"

namespace cpbench {

struct DsaStepContext;

class DsaIndexer {
 public:
  // The layer's kind is config.dsa.kind_of(in.mixer_index).
  DsaIndexer(const LayerInit& in, const AttentionConfig& config);
  // h [B, S, hidden] (the layer's normed input), q [B, H, S, dn + dr] (RoPE'd), latent [B, S, r + dr]
  // ([c, k_rope]), w_up = W_kv_b; rope applies the layer's RoPE to [B, n, S, dr] -> out [B, H, S, dv].
  [[nodiscard]] at::Tensor attend(const at::Tensor& h, const at::Tensor& q, const at::Tensor& latent,
                                  const at::Tensor& w_up, const std::function<at::Tensor(const at::Tensor&)>& rope,
                                  const LayerStep& step) const;

 private:
  // A full layer's key side and picks: the gathered latent [B, Sk, r + dr], the scores [B, S, Sk] and the
  // picks [B, S, K] of hi (h, or h detached in the sparse stage).
  struct Picked {
    at::Tensor latent, scores, picks;
  };
  // The indexer's projections of hi: q_I [B, S, H_I, d_I] and k_I [B, S, d_I] (RoPE'd), the head weights w
  // [B, S, H_I] in the score dtype.
  struct Projected {
    at::Tensor q_idx, k_idx, w;
  };
  [[nodiscard]] Projected project(const at::Tensor& hi, const std::function<at::Tensor(const at::Tensor&)>& rope) const;
  [[nodiscard]] Picked pick(const at::Tensor& hi, const at::Tensor& latent,
                            const std::function<at::Tensor(const at::Tensor&)>& rope, const DsaStepContext& ctx) const;

  DsaConfig c_;
  MlaDims d_;
  DsaIndexerKind kind_;
  at::Tensor wq_, wk_, k_norm_w_, k_norm_b_, w_;
};

}  // namespace cpbench
