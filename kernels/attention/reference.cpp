#include "kernels/attention/reference.hpp"

#include <limits>

#include "kernels/attention/lse_merge.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace kernels {
namespace {

// -inf (a fully masked row) -> 0, so `x - shift` never evaluates (-inf) - (-inf).
at::Tensor finite_shift(const at::Tensor& x) { return x.masked_fill(at::isinf(x), 0); }
}  // namespace

at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                               double scale, const at::Tensor& sinks) {
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
  const int64_t keys = s.size(-1);
  if (sinks.defined()) {
    CP_CHECK(sinks.dim() == 1 && sinks.size(0) == hq, "attention: sinks must be [", hq, "], got ",
             shape_str(sinks.sizes()));
    // The sink as a key column of its own: score s_h for every query, never masked.
    const at::Tensor column = sinks.to(cd).view({1, hq, 1, 1}).expand({s.size(0), hq, s.size(2), 1});
    s = at::cat({s, column}, -1);
  }
  // softmax written out so a fully masked row is 0 (not NaN) in the forward AND the backward: the
  // shift is detached (the result does not depend on it), e = exp(-inf) = 0 carries no gradient, and
  // the zero row sum is replaced by 1 before dividing.
  at::Tensor shift = finite_shift(std::get<0>(s.detach().max(-1, /*keepdim=*/true)));
  at::Tensor e = (s - shift).exp();
  at::Tensor sum = e.sum(-1, /*keepdim=*/true);
  at::Tensor p = e / sum.masked_fill(sum == 0, 1);
  if (sinks.defined()) p = p.narrow(-1, 0, keys);  // the sink's column has no value
  return at::matmul(p, vc).to(q.scalar_type());
}

}  // namespace kernels

at::Tensor local_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenMeta& q_meta,
                           const TokenMeta& k_meta, const MaskSpec& mask, double scale, const at::Tensor& sinks) {
  CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "local_attention: q, k, v must be [B, H, S, D]; got q ",
           shape_str(q.sizes()), ", k ", shape_str(k.sizes()), ", v ", shape_str(v.sizes()));
  // V's head dim may differ from K's (MLA); B, heads and tokens may not.
  CP_CHECK(k.sizes().slice(0, 3).equals(v.sizes().slice(0, 3)), "local_attention: k ", shape_str(k.sizes()),
           " and v ", shape_str(v.sizes()), " differ in B, heads or S");
  CP_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "local_attention: q ", shape_str(q.sizes()),
           " and k ", shape_str(k.sizes()), " disagree on batch or head dim");
  CP_CHECK(q_meta.batch() == q.size(0) && q_meta.tokens() == q.size(2), "local_attention: query meta ",
           shape_str(q_meta.pos.sizes()), " does not match q ", shape_str(q.sizes()));
  CP_CHECK(k_meta.batch() == k.size(0) && k_meta.tokens() == k.size(2), "local_attention: key meta ",
           shape_str(k_meta.pos.sizes()), " does not match k ", shape_str(k.sizes()));
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor m = build_mask(mask, q_meta.to(q.device()), k_meta.to(q.device()));
  return kernels::reference_attention(q, k, v, m, s, sinks);
}

}  // namespace cpbench
