#include "kernels/attention/flash_calls.hpp"

#include <ATen/ops/_flash_attention_backward.h>
#include <ATen/ops/_flash_attention_forward.h>

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {
// The kernels give a row that sees no key out 0 and lse +inf; the merge needs lse -inf.
BlockOutput fix_empty_rows(at::Tensor out, at::Tensor lse, const at::Tensor& empty_rows) {
  const at::Tensor none = empty_rows.unsqueeze(1);  // [B, 1, n]
  return {out.masked_fill(none.unsqueeze(-1), 0), lse.masked_fill(none, kNegInf).contiguous()};
}
// The backward's lse: a row with lse -inf sees nothing anywhere, so every P of it is 0 with lse 0.
at::Tensor backward_lse(const at::Tensor& lse) { return at::nan_to_num(lse, 0.0, 0.0, 0.0).to(at::kFloat); }
at::Tensor no_rng(const at::Tensor& like) { return at::empty({0}, like.options().dtype(at::kLong)); }
}  // namespace

BlockOutput flash_window_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const FlashWindow& win,
                                 const at::Tensor& empty_rows, double scale) {
  const auto cd = compute_dtype(q.scalar_type());
  const int64_t b = q.size(0), h = q.size(1), n = q.size(2), sq = win.q1 - win.q0, sk = win.k1 - win.k0;
  auto r = at::_flash_attention_forward(to_flash_dense(q.narrow(2, win.q0, sq)),
                                        to_flash_dense(k.narrow(2, win.k0, sk)),
                                        to_flash_dense(v.narrow(2, win.k0, sk)), std::nullopt, std::nullopt, sq, sk,
                                        0.0, false, false, scale, win.left, win.right);
  const at::Tensor lse_part = std::get<1>(r);
  CP_CHECK(lse_part.dim() == 3 && lse_part.size(0) == b && lse_part.size(1) == h && lse_part.size(2) == sq,
           "flash_window_forward: the kernel's lse is ", shape_str(lse_part.sizes()), ", not [", b, ", ", h, ", ", sq, "]");
  at::Tensor out = at::zeros({b, h, n, v.size(3)}, q.options().dtype(cd));
  at::Tensor lse = at::full({b, h, n}, kNegInf, q.options().dtype(cd));
  out.narrow(2, win.q0, sq).copy_(std::get<0>(r).transpose(1, 2));
  lse.narrow(2, win.q0, sq).copy_(lse_part);
  return fix_empty_rows(out, lse, empty_rows);
}

BlockGrads flash_window_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& out, const at::Tensor& lse, const FlashWindow& win, double scale) {
  const auto cd = compute_dtype(q.scalar_type());
  const int64_t sq = win.q1 - win.q0, sk = win.k1 - win.k0;
  const auto rows = [&](const at::Tensor& t) { return to_flash_dense(t.narrow(2, win.q0, sq)); };
  const auto keys = [&](const at::Tensor& t) { return to_flash_dense(t.narrow(2, win.k0, sk)); };
  const at::Tensor none = no_rng(q);
  auto [dq, dk, dv] = at::_flash_attention_backward(
      rows(dout).contiguous(), rows(q), keys(k), keys(v), rows(out.to(q.scalar_type())).contiguous(),
      backward_lse(lse.narrow(2, win.q0, sq)).contiguous(), at::Tensor(), at::Tensor(), sq, sk, 0.0, false, none, none,
      scale, win.left, win.right);
  BlockGrads g{at::zeros(q.sizes(), q.options().dtype(cd)), at::zeros(k.sizes(), k.options().dtype(cd)),
               at::zeros(v.sizes(), v.options().dtype(cd))};
  g.dq.narrow(2, win.q0, sq).copy_(dq.transpose(1, 2));
  g.dk.narrow(2, win.k0, sk).copy_(dk.transpose(1, 2));  // GQA native: dK / dV per kv head
  g.dv.narrow(2, win.k0, sk).copy_(dv.transpose(1, 2));
  return g;
}

BlockOutput flash_varlen_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const FlashVarlen& var,
                                 double scale) {
  const auto cd = compute_dtype(q.scalar_type());
  const int64_t b = q.size(0), h = q.size(1), n = q.size(2);
  auto r = at::_flash_attention_forward(to_flash_varlen(q), to_flash_varlen(k), to_flash_varlen(v), var.cu_seqlens_q,
                                        var.cu_seqlens_k, var.max_q, var.max_k, 0.0, var.causal, false, scale);
  const at::Tensor lse = std::get<1>(r);
  CP_CHECK(lse.dim() == 2 && lse.size(0) == h && lse.size(1) == b * n, "flash_varlen_forward: the kernel's lse is ",
           shape_str(lse.sizes()), ", not the unpadded [", h, ", ", b * n, "]");
  return fix_empty_rows(from_flash_varlen(std::get<0>(r), b).to(cd), lse_from_flash_varlen(lse, b).to(cd),
                        var.empty_rows);
}

BlockGrads flash_varlen_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& out, const at::Tensor& lse, const FlashVarlen& var, double scale) {
  const auto cd = compute_dtype(q.scalar_type());
  const int64_t b = q.size(0);
  const at::Tensor none = no_rng(q);
  auto [dq, dk, dv] = at::_flash_attention_backward(
      to_flash_varlen(dout), to_flash_varlen(q), to_flash_varlen(k), to_flash_varlen(v),
      to_flash_varlen(out.to(q.scalar_type())), lse_to_flash_varlen(backward_lse(lse)), var.cu_seqlens_q,
      var.cu_seqlens_k, var.max_q, var.max_k, 0.0, var.causal, none, none, scale);
  return {from_flash_varlen(dq, b).to(cd), from_flash_varlen(dk, b).to(cd), from_flash_varlen(dv, b).to(cd)};
}

}  // namespace cpbench::kernels
