#include "kernels/attention_math.hpp"

#include <limits>

#include "sharders/check.hpp"

namespace cpbench::kernels {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Grouped-query view: [B, Hq, S, D] -> [B, Hkv, G*S, D]. Query head h = kvh * G + g, so the G query
// heads sharing key head kvh are adjacent and one matmul per key head covers the whole group without
// materializing repeated K/V.
at::Tensor grouped(const at::Tensor& t, int64_t hkv) {
  return t.reshape({t.size(0), hkv, -1, t.size(3)});
}

// Scores [B, Hkv, G*Sq, Sk], masked entries -inf.
at::Tensor block_scores(const at::Tensor& qg, const at::Tensor& k, const at::Tensor& mask, double scale,
                        int64_t sq) {
  at::Tensor s = at::matmul(qg, k.transpose(-1, -2)).mul_(scale);
  if (mask.defined()) {
    const int64_t b = s.size(0), hkv = s.size(1), sk = s.size(3);
    s.view({b, hkv, -1, sq, sk}).masked_fill_(mask.logical_not().view({b, 1, 1, sq, sk}), kNegInf);
  }
  return s;
}

// -inf (a fully masked row) -> 0, so `x - shift` never evaluates (-inf) - (-inf).
at::Tensor finite_shift(const at::Tensor& x) { return x.masked_fill(at::isinf(x), 0); }
}  // namespace

at::ScalarType compute_dtype(at::ScalarType input) {
  return input == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                               double scale) {
  CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be [B, H, S, D]; got ",
           shape_str(q.sizes()), ", ", shape_str(k.sizes()), ", ", shape_str(v.sizes()));
  const int64_t hq = q.size(1), hkv = k.size(1);
  CP_CHECK(hkv > 0 && hq % hkv == 0, "attention: query heads ", hq, " are not a multiple of key/value heads ", hkv);
  const auto cd = compute_dtype(q.scalar_type());
  const int64_t g = hq / hkv;
  at::Tensor qc = q.to(cd);
  at::Tensor kc = k.to(cd).repeat_interleave(g, 1);
  at::Tensor vc = v.to(cd).repeat_interleave(g, 1);
  at::Tensor s = at::matmul(qc, kc.transpose(-1, -2)) * scale;
  s = s.masked_fill(mask.logical_not().unsqueeze(1), kNegInf);
  // softmax written out so a fully masked row is 0 (not NaN) in the forward AND the backward: the
  // shift is detached (the result does not depend on it), e = exp(-inf) = 0 carries no gradient, and
  // the zero row sum is replaced by 1 before dividing.
  at::Tensor shift = finite_shift(std::get<0>(s.detach().max(-1, /*keepdim=*/true)));
  at::Tensor e = (s - shift).exp();
  at::Tensor sum = e.sum(-1, /*keepdim=*/true);
  at::Tensor p = e / sum.masked_fill(sum == 0, 1);
  return at::matmul(p, vc).to(q.scalar_type());
}

BlockPlan plan_block(const at::Tensor& mask) {
  BlockPlan plan;
  plan.visible_pairs = mask.sum().item<int64_t>();
  if (plan.visible_pairs == 0) {
    plan.kind = BlockKind::empty;
  } else if (plan.visible_pairs == mask.numel()) {
    plan.kind = BlockKind::full;
  } else {
    plan.kind = BlockKind::masked;
    plan.mask = mask;
    const int64_t sq = mask.size(1), sk = mask.size(2);
    const at::Tensor row_any = mask.any(2).any(0), col_any = mask.any(1).any(0);
    const int64_t nr = row_any.sum().item<int64_t>(), nc = col_any.sum().item<int64_t>();
    // Trim only when it saves a real share of the block; index gathers are not free.
    if (nr * nc * 4 <= sq * sk * 3) {
      if (nr < sq) plan.rows = row_any.nonzero().flatten();
      if (nc < sk) plan.cols = col_any.nonzero().flatten();
      at::Tensor sub = mask;
      if (plan.rows.defined()) sub = sub.index_select(1, plan.rows);
      if (plan.cols.defined()) sub = sub.index_select(2, plan.cols);
      if (sub.numel() == plan.visible_pairs) {
        plan.kind = BlockKind::full;  // the visible pairs fill the trimmed block
        plan.mask = at::Tensor();
      } else {
        plan.mask = sub;
      }
    }
  }
  const int64_t b = mask.size(0);
  plan.computed_pairs = plan.kind == BlockKind::empty
                            ? 0
                            : b * (plan.rows.defined() ? plan.rows.numel() : mask.size(1)) *
                                  (plan.cols.defined() ? plan.cols.numel() : mask.size(2));
  return plan;
}

BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const BlockPlan& plan,
                          double scale) {
  const bool tr = plan.rows.defined(), tc = plan.cols.defined();
  if (!tr && !tc) return block_forward(q, k, v, plan.mask, scale);
  const at::Tensor qs = tr ? q.index_select(2, plan.rows) : q;
  const at::Tensor ks = tc ? k.index_select(2, plan.cols) : k;
  const at::Tensor vs = tc ? v.index_select(2, plan.cols) : v;
  BlockOutput r = block_forward(qs, ks, vs, plan.mask, scale);
  if (!tr) return r;
  BlockOutput full;
  full.out = at::zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, r.out.options()).index_copy_(2, plan.rows, r.out);
  full.lse = at::full({q.size(0), q.size(1), q.size(2)}, -INFINITY, r.lse.options()).index_copy_(2, plan.rows, r.lse);
  return full;
}

BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& lse, const at::Tensor& dsum, const BlockPlan& plan, double scale) {
  const bool tr = plan.rows.defined(), tc = plan.cols.defined();
  if (!tr && !tc) return block_backward(dout, q, k, v, lse, dsum, plan.mask, scale);
  auto rows = [&](const at::Tensor& t) { return tr ? t.index_select(2, plan.rows) : t; };
  auto cols = [&](const at::Tensor& t) { return tc ? t.index_select(2, plan.cols) : t; };
  BlockGrads g = block_backward(rows(dout), rows(q), cols(k), cols(v), rows(lse), rows(dsum), plan.mask, scale);
  if (tr) g.dq = at::zeros(q.sizes(), g.dq.options()).index_copy_(2, plan.rows, g.dq);
  if (tc) {
    g.dk = at::zeros(k.sizes(), g.dk.options()).index_copy_(2, plan.cols, g.dk);
    g.dv = at::zeros(v.sizes(), g.dv.options()).index_copy_(2, plan.cols, g.dv);
  }
  return g;
}

BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale) {
  const int64_t b = q.size(0), hq = q.size(1), sq = q.size(2), d = q.size(3), hkv = k.size(1);
  at::Tensor s = block_scores(grouped(q, hkv), k, mask, scale, sq);
  at::Tensor shift = mask.defined() ? finite_shift(std::get<0>(s.max(-1, true))) : std::get<0>(s.max(-1, true));
  at::Tensor p = s.sub_(shift).exp_();
  at::Tensor sum = p.sum(-1, true);
  at::Tensor out = at::matmul(p, v);
  if (mask.defined()) {
    out.div_(sum.masked_fill(sum == 0, 1));
  } else {
    out.div_(sum);
  }
  at::Tensor lse = sum.log_().add_(shift);  // log(0) + 0 = -inf on fully masked rows
  return {out.view({b, hq, sq, d}), lse.view({b, hq, sq})};
}

void merge_block(at::Tensor& out, at::Tensor& lse, const BlockOutput& block) {
  if (!out.defined()) {
    out = block.out;
    lse = block.lse;
    return;
  }
  // new_lse = m + log(e^(a-m) + e^(b-m)) with m = max(a, b) made finite: both weights are <= 1 and
  // one is 1 unless both sides are -inf, where the weights are 0, the sum is 0 and the output stays 0.
  at::Tensor m = finite_shift(at::maximum(lse, block.lse));
  at::Tensor wa = (lse - m).exp_();
  at::Tensor wb = (block.lse - m).exp_();
  at::Tensor sum = wa + wb;
  out = (out * wa.unsqueeze(-1)).add_(block.out * wb.unsqueeze(-1)).div_(sum.masked_fill(sum == 0, 1).unsqueeze(-1));
  lse = sum.log_().add_(m);
}

BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& lse, const at::Tensor& dsum, const at::Tensor& mask, double scale) {
  const int64_t hkv = k.size(1), sq = q.size(2);
  at::Tensor qg = grouped(q, hkv);
  at::Tensor dog = grouped(dout, hkv);
  at::Tensor s = block_scores(qg, k, mask, scale, sq);
  // A row whose global lse is -inf is masked in every block, so its scores here are all -inf and
  // P = exp(-inf - 0) = 0.
  at::Tensor p = s.sub_(finite_shift(lse.reshape({lse.size(0), hkv, -1, 1}))).exp_();
  at::Tensor dv = at::matmul(p.transpose(-1, -2), dog);
  at::Tensor ds = at::matmul(dog, v.transpose(-1, -2));
  ds.sub_(dsum.reshape({dsum.size(0), hkv, -1, 1})).mul_(p);
  at::Tensor dq = at::matmul(ds, k).mul_(scale).view(q.sizes());
  at::Tensor dk = at::matmul(ds.transpose(-1, -2), qg).mul_(scale);
  return {dq, dk, dv};
}

}  // namespace cpbench::kernels
