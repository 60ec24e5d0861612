// The single-device reference: plain masked attention through ATen autograd. Deliberately no fast
// paths and no LSE merging, so the transports are checked against independent maths.
#include "kernels/attention/reference.hpp"

#include "kernels/attention/attention_math.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

at::Tensor local_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenMeta& q_meta,
                           const TokenMeta& k_meta, const MaskSpec& mask, double scale) {
  CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "local_attention: q, k, v must be [B, H, S, D]; got q ",
           shape_str(q.sizes()), ", k ", shape_str(k.sizes()), ", v ", shape_str(v.sizes()));
  CP_CHECK(k.sizes().equals(v.sizes()), "local_attention: k ", shape_str(k.sizes()), " and v ",
           shape_str(v.sizes()), " differ");
  CP_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "local_attention: q ", shape_str(q.sizes()),
           " and k ", shape_str(k.sizes()), " disagree on batch or head dim");
  CP_CHECK(q_meta.batch() == q.size(0) && q_meta.tokens() == q.size(2), "local_attention: query meta ",
           shape_str(q_meta.pos.sizes()), " does not match q ", shape_str(q.sizes()));
  CP_CHECK(k_meta.batch() == k.size(0) && k_meta.tokens() == k.size(2), "local_attention: key meta ",
           shape_str(k_meta.pos.sizes()), " does not match k ", shape_str(k.sizes()));
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor m = build_mask(mask, q_meta.to(q.device()), k_meta.to(q.device()));
  return kernels::reference_attention(q, k, v, m, s);
}

}  // namespace cpbench
