#include "kernels/mixers/attention/dsa/dsa_indexer.hpp"

#include <cmath>

#include "kernels/mixers/attention/dsa/dsa.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "kernels/mixers/attention/dsa/dsa_heads.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

DsaIndexer::DsaIndexer(const LayerInit& in, const AttentionConfig& config) : c_(config.dsa), d_(config.mla) {
  const double s_in = 1.0 / std::sqrt(static_cast<double>(in.hidden));
  wq_ = in.normal("idx_wq", {c_.index_heads * c_.index_head_dim, in.hidden}, s_in);
  wk_ = in.normal("idx_wk", {c_.index_head_dim, in.hidden}, s_in);
  k_norm_w_ = in.ones("idx_k_norm_w", c_.index_head_dim);
  k_norm_b_ = in.around("idx_k_norm_b", c_.index_head_dim, 0.0, 0.0);
  w_ = in.normal("idx_w", {c_.index_heads, in.hidden}, s_in);
}

at::Tensor DsaIndexer::attend(const at::Tensor& h, const at::Tensor& q, const at::Tensor& latent, const at::Tensor& w_up,
                              const std::function<at::Tensor(const at::Tensor&)>& rope, const LayerStep& step) const {
  DsaStepContext& ctx = dsa_context(step);
  const int64_t B = h.size(0), S = h.size(1), HI = c_.index_heads, dI = c_.index_head_dim, dr = d_.qk_rope_head_dim,
                L = d_.latent_dim(), dn = d_.qk_nope_head_dim;
  // Sparse stage: the indexer learns from its KL alone (its inputs detached); the control keeps the graph.
  const bool detach = c_.loss == DsaLoss::sparse && ctx.fault != kDsaFaultNoDetach;
  const at::Tensor hi = detach ? h.detach() : h;
  const auto rope_head = [&](const at::Tensor& x) {  // [B, n, S, dI]: RoPE on the first dr dims
    return at::cat({rope(x.narrow(-1, 0, dr)), x.narrow(-1, dr, dI - dr)}, -1);
  };
  const at::Tensor q_idx = rope_head(at::linear(hi, wq_).view({B, S, HI, dI}).transpose(1, 2)).transpose(1, 2);
  const at::Tensor k_idx =
      rope_head(at::layer_norm(at::linear(hi, wk_), {dI}, k_norm_w_, k_norm_b_, 1e-6).unsqueeze(1)).squeeze(1);
  const auto cd = kernels::dsa::score_dtype(h.scalar_type());
  const at::Tensor w = at::linear(hi.to(cd), w_.to(cd)) / std::sqrt(static_cast<double>(HI));  // [B, S, H_I]

  // THE dispatch by transport: a2a splits the heads (dsa_heads.hpp); allgather and one rank run below.
  if (ctx.head_split()) return dsa_head_split_attend({q, latent, w_up, q_idx, k_idx, w}, c_, d_, ctx);
  // The key side: this rank's latent and index key, every rank's in global order.
  const at::Tensor keys = ctx.gather_keys(at::cat({latent, k_idx}, -1));
  const at::Tensor lat = keys.narrow(-1, 0, L), kig = keys.narrow(-1, L, dI);
  const at::Tensor scores = kernels::dsa::index_scores(q_idx, w, kig, c_.scoring_relu);  // [B, S, Sk]
  CP_CHECK(ctx.visible.size(1) == S && ctx.visible.size(2) == scores.size(2), "model.attention.dsa: visibility ",
           shape_str(ctx.visible.sizes()), " for scores ", shape_str(scores.sizes()), " (rank ", ctx.rank, ")");
  const at::Tensor picks = ctx.fault == kDsaFaultBufferOrder
                               ? kernels::dsa::select_topk_unstable(scores, ctx.visible, c_.topk)
                               : kernels::dsa::select_topk(scores, ctx.visible, c_.topk);
  ctx.add_picks(picks);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const kernels::dsa::SparseMla sp = kernels::dsa::sparse_mla(q, lat, w_up, picks, dn, scale);

  at::Tensor kl;
  if (c_.loss == DsaLoss::dense) {
    kl = kernels::dsa::indexer_kl(kernels::dsa::dense_logits(q, lat, w_up, dn, scale), scores, ctx.visible);
  } else {
    const at::Tensor picked = scores.gather(-1, picks.clamp_min(0));
    kl = kernels::dsa::indexer_kl(sp.logits, picked, picks.ge(0));
  }
  const at::Tensor rows = ctx.row_valid.to(kl.scalar_type());
  ctx.add_loss((kl * rows).sum() * (c_.loss_coeff / ctx.loss_rows));
  return sp.out;
}

}  // namespace cpbench
