#include "kernels/mixers/attention/dsa/dsa.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "sharders/core/check.hpp"

namespace cpbench::kernels::dsa {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// The scores the top-k reads: invisible keys at -inf, no gradient.
at::Tensor masked_scores(const at::Tensor& scores, const at::Tensor& visible) {
  CP_CHECK(scores.dim() == 3 && visible.sizes() == scores.sizes() && visible.scalar_type() == at::kBool,
           "dsa top-k: scores ", shape_str(scores.sizes()), " and visible ", shape_str(visible.sizes()),
           " must both be [B, Sq, Sk] (visible bool)");
  return scores.detach().masked_fill(visible.logical_not(), -kInf);
}
}  // namespace

at::ScalarType score_dtype(at::ScalarType input) { return input == at::kDouble ? at::kDouble : at::kFloat; }

namespace {
// The score from every head's dot products dots [B, Sq, H_I, N] (compute dtype, unscaled): scale, ReLU,
// the weighted sum over heads -> [B, Sq, N]. Both forms of the score (all keys, per-query rows) call it.
at::Tensor weigh_heads(at::Tensor dots, const at::Tensor& w, int64_t d_i, bool relu) {
  dots = dots * (1.0 / std::sqrt(static_cast<double>(d_i)));
  if (relu) dots = at::relu(dots);
  return at::matmul(w.to(dots.scalar_type()).unsqueeze(2), dots).squeeze(2);  // [B, Sq, 1, H_I] @ [B, Sq, H_I, N]
}
}  // namespace

at::Tensor index_scores(const at::Tensor& q_idx, const at::Tensor& w, const at::Tensor& k_idx, bool relu) {
  CP_CHECK(q_idx.dim() == 4 && w.dim() == 3 && k_idx.dim() == 3 && q_idx.size(0) == k_idx.size(0) &&
               q_idx.size(3) == k_idx.size(2) && w.size(2) == q_idx.size(2) && w.size(1) == q_idx.size(1),
           "dsa indexer: q_I ", shape_str(q_idx.sizes()), " must be [B, Sq, H_I, d_I], w ", shape_str(w.sizes()),
           " [B, Sq, H_I], k_I ", shape_str(k_idx.sizes()), " [B, Sk, d_I]");
  const auto cd = score_dtype(q_idx.scalar_type());
  // [B, Sq, H_I, Sk]: every head's dot product with every key.
  return weigh_heads(at::matmul(q_idx.to(cd), k_idx.to(cd).transpose(1, 2).unsqueeze(1)), w, q_idx.size(3), relu);
}

at::Tensor index_scores_rows(const at::Tensor& q_idx, const at::Tensor& w, const at::Tensor& k_rows, bool relu) {
  CP_CHECK(q_idx.dim() == 4 && w.dim() == 3 && k_rows.dim() == 4 && q_idx.size(0) == k_rows.size(0) &&
               q_idx.size(1) == k_rows.size(1) && q_idx.size(3) == k_rows.size(3) && w.size(2) == q_idx.size(2) &&
               w.size(1) == q_idx.size(1),
           "dsa indexer: q_I ", shape_str(q_idx.sizes()), " must be [B, Sq, H_I, d_I], w ", shape_str(w.sizes()),
           " [B, Sq, H_I], the picked k_I ", shape_str(k_rows.sizes()), " [B, Sq, K, d_I]");
  const auto cd = score_dtype(q_idx.scalar_type());
  // [B, Sq, H_I, K]: every head's dot product with each of the query's own keys.
  return weigh_heads(at::matmul(q_idx.to(cd), k_rows.to(cd).transpose(2, 3)), w, q_idx.size(3), relu);
}

at::Tensor select_topk(const at::Tensor& scores, const at::Tensor& visible, int64_t k) {
  const at::Tensor s = masked_scores(scores, visible);
  const int64_t keff = std::min(k, s.size(2));
  // Stable and descending: equal scores keep their column order, i.e. ascending global key index.
  auto [vals, idx] = at::sort(s, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  at::Tensor picks = idx.narrow(-1, 0, keff).clone();
  return picks.masked_fill_(vals.narrow(-1, 0, keff).eq(-kInf), -1);
}

namespace {
// The rows of the kept candidates: candidate c < n_prev is the running top-k's row c, else block row c - n_prev.
at::Tensor kept_rows(const at::Tensor& prev, const at::Tensor& block_rows, const at::Tensor& kept, int64_t n_prev) {
  const int64_t B = kept.size(0), Sq = kept.size(1), K = kept.size(2), d = block_rows.size(2);
  const at::Tensor from_block = kept.ge(n_prev).unsqueeze(-1);
  const at::Tensor b = (kept - n_prev).clamp_min(0).view({B, Sq * K, 1}).expand({B, Sq * K, d});
  at::Tensor rows = block_rows.gather(1, b).view({B, Sq, K, d});
  if (n_prev == 0) return rows;
  const at::Tensor r = kept.clamp_max(n_prev - 1).unsqueeze(-1).expand({B, Sq, K, d});
  return at::where(from_block, rows, prev.gather(2, r));
}
}  // namespace

void merge_topk(RunningTopk& top, const at::Tensor& block_scores, const at::Tensor& block_visible,
                const at::Tensor& block_index, int64_t k, bool stable, const at::Tensor& block_rows) {
  const at::Tensor s = masked_scores(block_scores, block_visible);
  CP_CHECK(block_index.dim() == 1 && block_index.size(0) == s.size(2) && block_index.scalar_type() == at::kLong,
           "dsa running top-k: the block's key indices ", shape_str(block_index.sizes()), " for scores ",
           shape_str(s.sizes()), " (int64 [Sb])");
  at::Tensor vals = s, idx = block_index.to(s.device()).view({1, 1, -1}).expand(s.sizes());
  if (top.scores.defined()) {
    vals = at::cat({top.scores, vals.to(top.scores.scalar_type())}, -1);
    idx = at::cat({top.index, idx}, -1);
  }
  const int64_t keff = std::min(k, vals.size(2)), n_prev = top.scores.defined() ? top.scores.size(2) : 0;
  at::Tensor kept_vals, kept;  // the kept candidates' scores and positions in the list above, best first
  if (!stable) {
    std::tie(kept_vals, kept) = at::topk(vals, keff, -1, /*largest=*/true, /*sorted=*/true);
  } else {
    // THE order (select_topk's): global index ascending first, then a stable sort by score descending keeps
    // that order among equal scores.
    const at::Tensor by_index = std::get<1>(at::sort(idx, /*stable=*/true, /*dim=*/-1, /*descending=*/false));
    auto [v, p] = at::sort(vals.gather(-1, by_index), /*stable=*/true, /*dim=*/-1, /*descending=*/true);
    kept_vals = v.narrow(-1, 0, keff).contiguous();
    kept = by_index.gather(-1, p.narrow(-1, 0, keff));
  }
  at::Tensor rows;
  if (block_rows.defined()) {
    CP_CHECK(block_rows.dim() == 3 && block_rows.size(0) == s.size(0) && block_rows.size(1) == s.size(2) &&
                 (n_prev == 0 || top.rows.defined()),
             "dsa running top-k: the block's rows ", shape_str(block_rows.sizes()), " for scores ",
             shape_str(s.sizes()), " must be [B, Sb, d], in every merge or none");
    rows = kept_rows(top.rows, block_rows, kept, n_prev);
  }
  top = {kept_vals, idx.gather(-1, kept), rows};
}

at::Tensor running_picks(const RunningTopk& top) {
  CP_CHECK(top.scores.defined(), "dsa running top-k: no block was merged");
  return top.index.masked_fill(top.scores.eq(-kInf), -1);
}

at::Tensor select_topk_unstable(const at::Tensor& scores, const at::Tensor& visible, int64_t k) {
  const at::Tensor s = masked_scores(scores, visible);
  const int64_t keff = std::min(k, s.size(2));
  auto [vals, idx] = at::topk(s, keff, -1, /*largest=*/true, /*sorted=*/true);
  return idx.masked_fill(vals.eq(-kInf), -1);
}

namespace {

struct Absorbed {
  at::Tensor q;     // [B, H, Sq, r + dr]: W_UK_h^T q_nope_h, then q_rope
  at::Tensor w_uv;  // [H, dv, r]
};

// latent_dim: r + dr, the latent's last dim.
Absorbed absorb(const at::Tensor& q, int64_t latent_dim, const at::Tensor& w_up, int64_t dn) {
  CP_CHECK(q.dim() == 4 && w_up.dim() == 2, "dsa sparse MLA: q ", shape_str(q.sizes()),
           " must be [B, H, Sq, dn+dr], W_up ", shape_str(w_up.sizes()), " [H*(dn+dv), r]");
  const int64_t H = q.size(1), r = w_up.size(1), dr = latent_dim - r;
  CP_CHECK(dr >= 0 && q.size(3) == dn + dr && w_up.size(0) % H == 0 && w_up.size(0) / H > dn,
           "dsa sparse MLA: q ", shape_str(q.sizes()), ", a latent of ", latent_dim, " values and W_up ",
           shape_str(w_up.sizes()), " disagree (dn = ", dn, ")");
  const auto cd = score_dtype(q.scalar_type());
  const int64_t dv = w_up.size(0) / H - dn;
  const at::Tensor wu = w_up.to(cd).view({H, dn + dv, r});
  const at::Tensor qc = q.to(cd);
  const at::Tensor q_abs = at::einsum("bhsn,hnr->bhsr", {qc.narrow(-1, 0, dn), wu.narrow(1, 0, dn)});
  return {at::cat({q_abs, qc.narrow(-1, dn, dr)}, -1), wu.narrow(1, dn, dv)};
}

}  // namespace

SparseMla sparse_mla(const at::Tensor& q, const at::Tensor& latent, const at::Tensor& w_up, const at::Tensor& picks,
                     int64_t dn, double scale) {
  CP_CHECK(latent.dim() == 3 && picks.dim() == 3 && picks.size(0) == latent.size(0), "dsa sparse MLA: the latent ",
           shape_str(latent.sizes()), " must be [B, Sk, r+dr], picks ", shape_str(picks.sizes()), " [B, Sq, K]");
  const int64_t B = picks.size(0), Sq = picks.size(1), K = picks.size(2), L = latent.size(2);
  const at::Tensor safe = picks.clamp_min(0).reshape({B, Sq * K, 1}).expand({B, Sq * K, L});
  return sparse_mla_rows(q, latent.gather(1, safe).view({B, Sq, K, L}), w_up, picks, dn, scale);  // the picked latents
}

SparseMla sparse_mla_rows(const at::Tensor& q, const at::Tensor& rows, const at::Tensor& w_up, const at::Tensor& picks,
                          int64_t dn, double scale) {
  CP_CHECK(rows.dim() == 4, "dsa sparse MLA: the picked latents ", shape_str(rows.sizes()), " must be [B, Sq, K, r+dr]");
  const Absorbed a = absorb(q, rows.size(3), w_up, dn);
  const int64_t B = q.size(0), Sq = q.size(2), K = picks.size(-1), r = w_up.size(1);
  CP_CHECK(picks.dim() == 3 && picks.size(0) == B && picks.size(1) == Sq && rows.size(0) == B && rows.size(1) == Sq &&
               rows.size(2) == K,
           "dsa sparse MLA: picks ", shape_str(picks.sizes()), " must be [B, Sq, K] = [", B, ", ", Sq,
           ", K] and the picked latents ", shape_str(rows.sizes()), " [B, Sq, K, r+dr]");
  const at::Tensor lp = rows.to(a.q.scalar_type());
  const at::Tensor invalid = picks.lt(0).unsqueeze(1);                                       // [B, 1, Sq, K]
  const at::Tensor empty = invalid.all(-1, /*keepdim=*/true);                                // no pick at all
  at::Tensor logits = at::einsum("bhqd,bqkd->bhqk", {a.q, lp}) * scale;
  logits = logits.masked_fill(invalid, -kInf);
  const at::Tensor p = at::softmax(logits.masked_fill(empty, 0.0), -1).masked_fill(invalid, 0.0);
  const at::Tensor o = at::einsum("bhqk,bqkr->bhqr", {p, lp.narrow(-1, 0, r)});
  return {at::einsum("bhqr,hvr->bhqv", {o, a.w_uv}).to(q.scalar_type()), logits};
}

at::Tensor dense_logits(const at::Tensor& q, const at::Tensor& latent, const at::Tensor& w_up, int64_t dn,
                        double scale) {
  at::NoGradGuard no_grad;
  CP_CHECK(latent.dim() == 3 && q.dim() == 4 && latent.size(0) == q.size(0), "dsa dense logits: the latent ",
           shape_str(latent.sizes()), " must be [B, Sk, r+dr] for q ", shape_str(q.sizes()));
  const Absorbed a = absorb(q, latent.size(2), w_up, dn);
  return at::einsum("bhqd,bkd->bhqk", {a.q, latent.to(a.q.scalar_type())}) * scale;
}

at::Tensor head_probability_sum(const at::Tensor& target_logits, const at::Tensor& keep) {
  CP_CHECK(target_logits.dim() == 4 && keep.dim() == 3 && target_logits.size(0) == keep.size(0) &&
               target_logits.size(2) == keep.size(1) && target_logits.size(3) == keep.size(2),
           "dsa indexer loss: target ", shape_str(target_logits.sizes()), " must be [B, H, Sq, N], keep ",
           shape_str(keep.sizes()), " [B, Sq, N]");
  at::NoGradGuard no_grad;
  const at::Tensor drop = keep.logical_not();
  const at::Tensor empty = drop.all(-1, /*keepdim=*/true);  // [B, Sq, 1]
  at::Tensor t = target_logits.detach().masked_fill(drop.unsqueeze(1), -kInf).masked_fill(empty.unsqueeze(1), 0.0);
  return at::softmax(t, -1).sum(1).masked_fill(drop, 0.0);
}

at::Tensor indexer_kl_of_sum(const at::Tensor& probability_sum, int64_t heads, const at::Tensor& index,
                             const at::Tensor& keep) {
  CP_CHECK(index.dim() == 3 && keep.sizes() == index.sizes() && probability_sum.sizes() == index.sizes() && heads > 0,
           "dsa indexer loss: the target's head sum ", shape_str(probability_sum.sizes()), ", index ",
           shape_str(index.sizes()), " and keep ", shape_str(keep.sizes()), " must all be [B, Sq, N] (", heads, " heads)");
  const at::Tensor drop = keep.logical_not();
  const at::Tensor empty = drop.all(-1, /*keepdim=*/true);  // [B, Sq, 1]
  const at::Tensor p = (probability_sum.detach() / static_cast<double>(heads)).masked_fill(drop, 0.0);
  const at::Tensor li = index.masked_fill(drop, -kInf).masked_fill(empty, 0.0);
  const at::Tensor logq = at::log_softmax(li, -1).masked_fill(drop, 0.0);
  return (at::xlogy(p, p) - p * logq).sum(-1).masked_fill(empty.squeeze(-1), 0.0);
}

at::Tensor indexer_kl(const at::Tensor& target_logits, const at::Tensor& index, const at::Tensor& keep) {
  CP_CHECK(target_logits.dim() == 4 && index.dim() == 3 && keep.sizes() == index.sizes() &&
               target_logits.size(0) == index.size(0) && target_logits.size(2) == index.size(1) &&
               target_logits.size(3) == index.size(2),
           "dsa indexer loss: target ", shape_str(target_logits.sizes()), " must be [B, H, Sq, N], index ",
           shape_str(index.sizes()), " and keep ", shape_str(keep.sizes()), " [B, Sq, N]");
  return indexer_kl_of_sum(head_probability_sum(target_logits, keep), target_logits.size(1), index, keep);
}

}  // namespace cpbench::kernels::dsa
