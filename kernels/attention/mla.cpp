#include "kernels/attention/mla.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

const char* to_string(MlaWire wire) { return wire == MlaWire::latent ? "latent" : "expanded"; }

MlaWire parse_mla_wire(const std::string& name, const std::string& where) {
  for (MlaWire w : {MlaWire::expanded, MlaWire::latent})
    if (name == to_string(w)) return w;
  throw UsageError(detail::concat(where, ": unknown mla_wire '", name, "'; known: expanded, latent"));
}

int64_t mla_expanded_elements_per_token(const MlaDims& d, int64_t heads) {
  return heads * d.qk_head_dim() + heads * d.v_head_dim;
}

int64_t mla_latent_elements_per_token(const MlaDims& d) { return d.latent_dim(); }

int64_t mla_wire_elements_per_token(const MlaDims& d, int64_t heads, MlaWire wire) {
  return wire == MlaWire::latent ? mla_latent_elements_per_token(d) : mla_expanded_elements_per_token(d, heads);
}

double mla_up_projection_flops(const MlaDims& d, int64_t heads, double tokens) {
  return 2.0 * tokens * static_cast<double>(d.kv_lora_rank) * static_cast<double>(heads) *
         static_cast<double>(d.qk_nope_head_dim + d.v_head_dim);
}

namespace kernels {

namespace {
struct UpShape {
  int64_t heads, r, dr, dn, dv;
};
UpShape up_shape(const at::Tensor& latent, const at::Tensor& w_up, int64_t heads, int64_t dn) {
  CP_CHECK(w_up.dim() == 2 && heads > 0 && w_up.size(0) % heads == 0 && w_up.size(0) / heads > dn,
           "MLA: w_up ", shape_str(w_up.sizes()), " is not [H*(dn+dv), r] for H = ", heads, ", dn = ", dn);
  const int64_t r = w_up.size(1);
  CP_CHECK(latent.size(-1) > r, "MLA: the latent ", shape_str(latent.sizes()), " has no RoPE key beyond r = ", r);
  return {heads, r, latent.size(-1) - r, dn, w_up.size(0) / heads - dn};
}
}  // namespace

std::pair<at::Tensor, at::Tensor> mla_expand(const at::Tensor& latent, const at::Tensor& w_up, int64_t heads,
                                             int64_t qk_nope_head_dim) {
  CP_CHECK(latent.dim() == 3, "MLA: the latent must be [B, S, r + dr], got ", shape_str(latent.sizes()));
  const UpShape u = up_shape(latent, w_up, heads, qk_nope_head_dim);
  const int64_t B = latent.size(0), S = latent.size(1);
  const at::Tensor kv = at::linear(latent.narrow(-1, 0, u.r), w_up).view({B, S, u.heads, u.dn + u.dv});
  const at::Tensor k_rope = latent.narrow(-1, u.r, u.dr).unsqueeze(2).expand({B, S, u.heads, u.dr});
  const at::Tensor k = at::cat({kv.narrow(-1, 0, u.dn), k_rope}, -1).transpose(1, 2).contiguous();
  const at::Tensor v = kv.narrow(-1, u.dn, u.dv).transpose(1, 2).contiguous();
  return {k, v};
}

std::pair<at::Tensor, at::Tensor> mla_up_project_block(const at::Tensor& latent, const at::Tensor& w_up,
                                                       int64_t heads, int64_t qk_nope_head_dim) {
  CP_CHECK(latent.dim() == 4 && latent.size(1) == 1, "MLA: a latent block must be [B, 1, S, r + dr], got ",
           shape_str(latent.sizes()));
  const UpShape u = up_shape(latent, w_up, heads, qk_nope_head_dim);
  const int64_t B = latent.size(0), S = latent.size(2);
  const at::Tensor w = w_up.to(latent.scalar_type()).view({u.heads, u.dn + u.dv, u.r});
  const at::Tensor c = latent.narrow(-1, 0, u.r);                      // [B, 1, S, r]
  const at::Tensor k_rope = latent.narrow(-1, u.r, u.dr);              // [B, 1, S, dr], every head's
  const at::Tensor w_uk = w.narrow(1, 0, u.dn), w_uv = w.narrow(1, u.dn, u.dv);  // head h's slices [h]
  const at::Tensor k_nope = at::matmul(c, w_uk.transpose(1, 2));        // [B, H, S, dn]
  const at::Tensor k = at::cat({k_nope, k_rope.expand({B, u.heads, S, u.dr})}, -1);
  const at::Tensor v = at::matmul(c, w_uv.transpose(1, 2)).contiguous();  // [B, H, S, dv]
  return {k, v};
}

at::Tensor mla_up_project_block_grad(const at::Tensor& latent, const at::Tensor& w_up, int64_t heads,
                                     int64_t qk_nope_head_dim, const at::Tensor& dk, const at::Tensor& dv,
                                     at::Tensor& dw_up) {
  const UpShape u = up_shape(latent, w_up, heads, qk_nope_head_dim);
  const auto cd = dk.scalar_type();
  const at::Tensor w = w_up.to(cd).view({u.heads, u.dn + u.dv, u.r});
  const at::Tensor c = latent.narrow(-1, 0, u.r).to(cd);  // [B, 1, S, r]
  const at::Tensor w_uk = w.narrow(1, 0, u.dn), w_uv = w.narrow(1, u.dn, u.dv);
  const at::Tensor dk_nope = dk.narrow(-1, 0, u.dn);                          // [B, H, S, dn]
  const at::Tensor dk_rope = dk.narrow(-1, u.dn, u.dr).sum(1, /*keepdim=*/true);  // shared: summed over heads
  const at::Tensor dc = (at::matmul(dk_nope, w_uk) + at::matmul(dv.to(cd), w_uv)).sum(1, /*keepdim=*/true);
  const at::Tensor dw_uk = at::matmul(dk_nope.transpose(-1, -2), c).sum(0);        // [H, dn, r]
  const at::Tensor dw_uv = at::matmul(dv.to(cd).transpose(-1, -2), c).sum(0);      // [H, dv, r]
  const at::Tensor dw = at::cat({dw_uk, dw_uv}, 1).view({u.heads * (u.dn + u.dv), u.r});
  if (dw_up.defined())
    dw_up.add_(dw);
  else
    dw_up = dw.clone();
  return at::cat({dc, dk_rope}, -1);
}

}  // namespace kernels
}  // namespace cpbench
