#include "kernels/mixers/attention/dsa/dsa_indexer.hpp"

#include <cmath>

#include "kernels/mixers/attention/dsa/dsa.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

DsaIndexer::DsaIndexer(const LayerInit& in, const AttentionConfig& config)
    : c_(config.dsa), d_(config.mla), kind_(config.dsa.kind_of(in.mixer_index)) {
  if (kind_ == DsaIndexerKind::shared) return;  // GLM-5's shared layer: no indexer of its own
  const double s_in = 1.0 / std::sqrt(static_cast<double>(in.hidden));
  wq_ = in.normal("idx_wq", {c_.index_heads * c_.index_head_dim, in.hidden}, s_in);
  wk_ = in.normal("idx_wk", {c_.index_head_dim, in.hidden}, s_in);
  k_norm_w_ = in.ones("idx_k_norm_w", c_.index_head_dim);
  k_norm_b_ = in.around("idx_k_norm_b", c_.index_head_dim, 0.0, 0.0);
  w_ = in.normal("idx_w", {c_.index_heads, in.hidden}, s_in);
}

DsaIndexer::Picked DsaIndexer::pick(const at::Tensor& hi, const at::Tensor& latent,
                                    const std::function<at::Tensor(const at::Tensor&)>& rope,
                                    const DsaStepContext& ctx) const {
  const int64_t B = hi.size(0), S = hi.size(1), HI = c_.index_heads, dI = c_.index_head_dim, dr = d_.qk_rope_head_dim,
                L = d_.latent_dim();
  const auto rope_head = [&](const at::Tensor& x) {  // [B, n, S, dI]: RoPE on the first dr dims
    return at::cat({rope(x.narrow(-1, 0, dr)), x.narrow(-1, dr, dI - dr)}, -1);
  };
  const at::Tensor q_idx = rope_head(at::linear(hi, wq_).view({B, S, HI, dI}).transpose(1, 2)).transpose(1, 2);
  const at::Tensor k_idx =
      rope_head(at::layer_norm(at::linear(hi, wk_), {dI}, k_norm_w_, k_norm_b_, 1e-6).unsqueeze(1)).squeeze(1);
  const auto cd = kernels::dsa::score_dtype(hi.scalar_type());
  const at::Tensor w = at::linear(hi.to(cd), w_.to(cd)) / std::sqrt(static_cast<double>(HI));  // [B, S, H_I]

  // The key side: this rank's latent and index key, every rank's in global order.
  const at::Tensor keys = ctx.gather_keys(at::cat({latent, k_idx}, -1));
  const at::Tensor kig = keys.narrow(-1, L, dI);
  const at::Tensor scores = kernels::dsa::index_scores(q_idx, w, kig, c_.scoring_relu);  // [B, S, Sk]
  CP_CHECK(ctx.visible.size(1) == S && ctx.visible.size(2) == scores.size(2), "model.attention.dsa: visibility ",
           shape_str(ctx.visible.sizes()), " for scores ", shape_str(scores.sizes()), " (rank ", ctx.rank, ")");
  const at::Tensor picks = ctx.fault == kDsaFaultBufferOrder
                               ? kernels::dsa::select_topk_unstable(scores, ctx.visible, c_.topk)
                               : kernels::dsa::select_topk(scores, ctx.visible, c_.topk);
  return {keys.narrow(-1, 0, L), scores, picks};
}

at::Tensor DsaIndexer::attend(const at::Tensor& h, const at::Tensor& q, const at::Tensor& latent, const at::Tensor& w_up,
                              const std::function<at::Tensor(const at::Tensor&)>& rope, const LayerStep& step) const {
  DsaStepContext& ctx = dsa_context(step);
  const int64_t dn = d_.qk_nope_head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  if (kind_ == DsaIndexerKind::shared) {
    if (ctx.fault == kDsaFaultSharedRecompute) {  // the control: its own picks, by the last full layer's indexer
      CP_CHECK(ctx.last_indexer != nullptr, "model.attention.dsa.indexer_types: a shared layer before any full layer");
      const Picked own = ctx.last_indexer->pick(h.detach(), latent, rope, ctx);
      ctx.add_picks(own.picks);
      return kernels::dsa::sparse_mla(q, own.latent, w_up, own.picks, dn, scale).out;
    }
    CP_CHECK(ctx.shared_picks.defined(), "model.attention.dsa.indexer_types: a shared layer with no full layer before "
                                         "it in this step (rank ", ctx.rank, ")");
    const at::Tensor lat = ctx.gather_keys(latent, /*shared=*/true);
    ctx.add_picks(ctx.shared_picks);
    return kernels::dsa::sparse_mla(q, lat, w_up, ctx.shared_picks, dn, scale).out;
  }
  // Sparse stage: the indexer learns from its KL alone (its inputs detached); the control keeps the graph.
  const bool detach = c_.loss == DsaLoss::sparse && ctx.fault != kDsaFaultNoDetach;
  const Picked p = pick(detach ? h.detach() : h, latent, rope, ctx);
  ctx.shared_picks = p.picks;  // what the shared layers after this one attend
  ctx.last_indexer = this;
  ctx.add_picks(p.picks);
  const kernels::dsa::SparseMla sp = kernels::dsa::sparse_mla(q, p.latent, w_up, p.picks, dn, scale);

  at::Tensor kl;
  if (c_.loss == DsaLoss::dense) {
    kl = kernels::dsa::indexer_kl(kernels::dsa::dense_logits(q, p.latent, w_up, dn, scale), p.scores, ctx.visible);
  } else {
    const at::Tensor picked = p.scores.gather(-1, p.picks.clamp_min(0));
    kl = kernels::dsa::indexer_kl(sp.logits, picked, p.picks.ge(0));
  }
  const at::Tensor rows = ctx.row_valid.to(kl.scalar_type());
  ctx.add_loss((kl * rows).sum() * (c_.loss_coeff / ctx.loss_rows));
  return sp.out;
}

}  // namespace cpbench
