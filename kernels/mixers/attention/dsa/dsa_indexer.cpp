#include "kernels/mixers/attention/dsa/dsa_indexer.hpp"

#include <cmath>

#include "kernels/mixers/attention/dsa/dsa.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "kernels/mixers/attention/dsa/dsa_heads.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

// A layer's KL rows [B, S] into the step's loss: this rank's valid rows, over the sequence's (dsa_context.hpp).
void add_layer_loss(DsaStepContext& ctx, const at::Tensor& kl, double coeff) {
  const at::Tensor rows = ctx.row_valid.to(kl.scalar_type());
  ctx.add_loss((kl * rows).sum() * (coeff / ctx.loss_rows));
}

// Ring's sparse stage (dsa_ring.hpp): round 1 picks among every rank's index keys as their blocks pass,
// round 2 collects the picked rows of the key side [B, S, L + d_I]; then the same sparse MLA and sparse KL
// as on gathered keys, over the collected rows.
at::Tensor attend_two_rounds(DsaStepContext& ctx, const DsaConfig& c, const at::Tensor& q, const at::Tensor& q_idx,
                             const at::Tensor& w, const at::Tensor& key_side, const at::Tensor& w_up, int64_t L,
                             int64_t dn) {
  const int64_t dI = key_side.size(2) - L;
  const kernels::dsa::RingPicks round1 = ctx.ring_picks(q_idx, w, key_side.narrow(-1, L, dI));
  const at::Tensor& picks = round1.picks;
  ctx.add_picks(picks);
  ctx.shared_picks = picks;  // what GLM-5's shared layers after this one attend
  const at::Tensor rows = ctx.ring_rows(key_side, round1);  // [B, S, K, L + d_I]
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const kernels::dsa::SparseMla sp = kernels::dsa::sparse_mla_rows(q, rows.narrow(-1, 0, L), w_up, picks, dn, scale);
  const at::Tensor picked = kernels::dsa::index_scores_rows(q_idx, w, rows.narrow(-1, L, dI), c.scoring_relu);
  add_layer_loss(ctx, kernels::dsa::indexer_kl(sp.logits, picked, picks.ge(0)), c.loss_coeff);
  return sp.out;
}

}  // namespace

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

DsaIndexer::Projected DsaIndexer::project(const at::Tensor& hi,
                                          const std::function<at::Tensor(const at::Tensor&)>& rope) const {
  const int64_t B = hi.size(0), S = hi.size(1), HI = c_.index_heads, dI = c_.index_head_dim, dr = d_.qk_rope_head_dim;
  const auto rope_head = [&](const at::Tensor& x) {  // [B, n, S, dI]: RoPE on the first dr dims
    return at::cat({rope(x.narrow(-1, 0, dr)), x.narrow(-1, dr, dI - dr)}, -1);
  };
  const at::Tensor q_idx = rope_head(at::linear(hi, wq_).view({B, S, HI, dI}).transpose(1, 2)).transpose(1, 2);
  const at::Tensor k_idx =
      rope_head(at::layer_norm(at::linear(hi, wk_), {dI}, k_norm_w_, k_norm_b_, 1e-6).unsqueeze(1)).squeeze(1);
  const auto cd = kernels::dsa::score_dtype(hi.scalar_type());
  const at::Tensor w = at::linear(hi.to(cd), w_.to(cd)) / std::sqrt(static_cast<double>(HI));  // [B, S, H_I]
  return {q_idx, k_idx, w};
}

DsaIndexer::Picked DsaIndexer::pick(const at::Tensor& hi, const at::Tensor& latent,
                                    const std::function<at::Tensor(const at::Tensor&)>& rope,
                                    const DsaStepContext& ctx) const {
  const int64_t S = hi.size(1), dI = c_.index_head_dim, L = d_.latent_dim();
  const Projected pr = project(hi, rope);
  const at::Tensor &q_idx = pr.q_idx, &k_idx = pr.k_idx, &w = pr.w;
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
  const at::Tensor hi = detach ? h.detach() : h;
  // ---- The key side by transport, the one dispatch (dsa_context.hpp): ring's sparse stage picks in two rounds
  // and collects only the picked rows; every other case (allgather; ring's dense stage) has every key in
  // global order; a2a / hybrid split the heads (dsa_heads.hpp). Each sets the picks the shared layers reuse.
  if (ctx.two_rounds()) {
    ctx.last_indexer = this;
    const Projected pr = project(hi, rope);
    return attend_two_rounds(ctx, c_, q, pr.q_idx, pr.w, at::cat({latent, pr.k_idx}, -1), w_up, d_.latent_dim(), dn);
  }
  if (ctx.head_split()) {
    ctx.last_indexer = this;
    const Projected pr = project(hi, rope);
    return dsa_head_split_attend({q, latent, w_up, pr.q_idx, pr.k_idx, pr.w}, c_, d_, ctx);
  }
  const Picked p = pick(hi, latent, rope, ctx);
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
  add_layer_loss(ctx, kl, c_.loss_coeff);
  return sp.out;
}

}  // namespace cpbench
