#include "kernels/mixers/attention/dsa/dsa.hpp"

#include <limits>

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

at::Tensor index_scores(const at::Tensor& q_idx, const at::Tensor& w, const at::Tensor& k_idx, bool relu) {
  CP_CHECK(q_idx.dim() == 4 && w.dim() == 3 && k_idx.dim() == 3 && q_idx.size(0) == k_idx.size(0) &&
               q_idx.size(3) == k_idx.size(2) && w.size(2) == q_idx.size(2) && w.size(1) == q_idx.size(1),
           "dsa indexer: q_I ", shape_str(q_idx.sizes()), " must be [B, Sq, H_I, d_I], w ", shape_str(w.sizes()),
           " [B, Sq, H_I], k_I ", shape_str(k_idx.sizes()), " [B, Sk, d_I]");
  const auto cd = score_dtype(q_idx.scalar_type());
  const double scale = 1.0 / std::sqrt(static_cast<double>(q_idx.size(3)));
  // [B, Sq, H_I, Sk]: every head's dot product with every key.
  at::Tensor dots = at::matmul(q_idx.to(cd), k_idx.to(cd).transpose(1, 2).unsqueeze(1)) * scale;
  if (relu) dots = at::relu(dots);
  return at::matmul(w.to(cd).unsqueeze(2), dots).squeeze(2);  // [B, Sq, 1, H_I] @ [B, Sq, H_I, Sk]
}

at::Tensor select_topk(const at::Tensor& scores, const at::Tensor& visible, int64_t k) {
  const at::Tensor s = masked_scores(scores, visible);
  const int64_t keff = std::min(k, s.size(2));
  // Stable and descending: equal scores keep their column order, i.e. ascending global key index.
  auto [vals, idx] = at::sort(s, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  at::Tensor picks = idx.narrow(-1, 0, keff).clone();
  return picks.masked_fill_(vals.narrow(-1, 0, keff).eq(-kInf), -1);
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

Absorbed absorb(const at::Tensor& q, const at::Tensor& latent, const at::Tensor& w_up, int64_t dn) {
  CP_CHECK(q.dim() == 4 && latent.dim() == 3 && w_up.dim() == 2 && q.size(0) == latent.size(0),
           "dsa sparse MLA: q ", shape_str(q.sizes()), " must be [B, H, Sq, dn+dr], the latent ",
           shape_str(latent.sizes()), " [B, Sk, r+dr], W_up ", shape_str(w_up.sizes()), " [H*(dn+dv), r]");
  const int64_t H = q.size(1), r = w_up.size(1), dr = latent.size(2) - r;
  CP_CHECK(dr >= 0 && q.size(3) == dn + dr && w_up.size(0) % H == 0 && w_up.size(0) / H > dn,
           "dsa sparse MLA: q ", shape_str(q.sizes()), ", latent ", shape_str(latent.sizes()), " and W_up ",
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
  const Absorbed a = absorb(q, latent, w_up, dn);
  const int64_t B = q.size(0), Sq = q.size(2), K = picks.size(-1), L = latent.size(2), r = w_up.size(1);
  CP_CHECK(picks.dim() == 3 && picks.size(0) == B && picks.size(1) == Sq, "dsa sparse MLA: picks ",
           shape_str(picks.sizes()), " must be [B, Sq, K] = [", B, ", ", Sq, ", K]");
  const at::Tensor safe = picks.clamp_min(0).reshape({B, Sq * K, 1}).expand({B, Sq * K, L});
  const at::Tensor lp = latent.to(a.q.scalar_type()).gather(1, safe).view({B, Sq, K, L});  // the picked latents
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
  const Absorbed a = absorb(q, latent, w_up, dn);
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
