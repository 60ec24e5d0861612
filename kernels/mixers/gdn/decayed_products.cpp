#include "kernels/mixers/gdn/decayed_products.hpp"

#include <algorithm>
#include <vector>

#include "kernels/mixers/linear/scan_plan.hpp"  // masked_exp

namespace cpbench {

namespace {

// Extends dim -2 (the chunk's tokens) by `pad` slots: zeros, or (G) copies of the last cumulative decay,
// which keeps every exponent taken against a padded slot <= 0. The padded rows and columns are cut off.
at::Tensor pad_tokens(const at::Tensor& t, int64_t pad, bool repeat_last) {
  if (pad == 0) return t;
  if (!repeat_last) return at::constant_pad_nd(t, {0, 0, 0, pad}, 0);
  std::vector<int64_t> s = t.sizes().vec();
  s[s.size() - 2] = pad;
  return at::cat({t, t.narrow(-2, t.size(-2) - 1, 1).expand(s)}, -2);
}

}  // namespace

DecayedProducts decayed_products(const at::Tensor& q, const at::Tensor& k, const at::Tensor& G, const at::Tensor& keep,
                                 const at::Tensor& strict) {
  const auto zero = at::zeros({}, q.options());
  if (G.size(-1) == 1) {
    const at::Tensor g = G.squeeze(-1);
    const at::Tensor diff = g.unsqueeze(-1) - g.unsqueeze(-2);
    return {at::matmul(k, k.transpose(-1, -2)) * masked_exp(strict, diff),
            at::matmul(q, k.transpose(-1, -2)) * masked_exp(keep, diff)};
  }
  // Halving: a block of 2b tokens is its two halves' blocks (from the level below) and the pairs t in
  // the second half, s in the first, one b x b product with the reference m = the second half's first
  // token. Level b = 1 starts from the diagonal (t = s: exp(0) = 1).
  const int64_t Q = q.size(-2), d = q.size(-1);
  int64_t Qp = 1;
  while (Qp < Q) Qp *= 2;
  const at::Tensor qp = pad_tokens(q, Qp - Q, false).contiguous(), kp = pad_tokens(k, Qp - Q, false).contiguous();
  const at::Tensor Gp = pad_tokens(G, Qp - Q, true).contiguous();
  const std::vector<int64_t> lead(q.sizes().begin(), q.sizes().end() - 2);
  const auto shaped = [&](std::vector<int64_t> tail) {
    std::vector<int64_t> s = lead;
    s.insert(s.end(), tail.begin(), tail.end());
    return s;
  };
  // Both products are written in place: level b fills, in each block of 2b tokens, the b x b corner of
  // pairs t in its second half, s in its first (kk's diagonal stays 0, qk's holds q_t . k_t).
  at::Tensor mq = at::zeros(shaped({Qp, Qp}), qp.options()), mk = at::zeros_like(mq);
  mq.diagonal(0, -2, -1).copy_((qp * kp).sum(-1));
  for (int64_t b = 1; b < Qp; b *= 2) {
    const int64_t n = Qp / (2 * b);
    const std::vector<int64_t> halves = shaped({n, 2, b, d});
    const at::Tensor Gh = Gp.view(halves), qh = qp.view(halves), kh = kp.view(halves);
    const at::Tensor G1 = Gh.select(-3, 0), G2 = Gh.select(-3, 1), Gm = G2.narrow(-2, 0, 1);
    const at::Tensor down = at::exp(G2 - Gm);  // G_t - G_m <= 0
    const at::Tensor keys = kh.select(-3, 0) * at::exp(Gm - G1);  // G_m - G_s <= 0
    const at::Tensor xq = qh.select(-3, 1) * down, xk = kh.select(-3, 1) * down;  // [..., n, b, d]
    // Below b = 4 a batched matmul of b x b blocks costs more than the broadcast sum.
    const auto product = [&](const at::Tensor& x) {
      return b <= 2 ? (x.unsqueeze(-2) * keys.unsqueeze(-3)).sum(-1) : at::matmul(x, keys.transpose(-1, -2));
    };
    // The corners: [..., Qp, Qp] as [..., n, 2, b, n, 2, b], the n blocks on its diagonal, rows of the
    // second half, columns of the first -> [..., b, b, n], moved to [..., n, b, b].
    const auto corner = [&](const at::Tensor& m) {
      return m.view(shaped({n, 2, b, n, 2, b})).diagonal(0, -6, -3).select(-5, 1).select(-3, 0).movedim(-1, -3);
    };
    corner(mq).copy_(product(xq));
    corner(mk).copy_(product(xk));
  }
  const auto finish = [&](const at::Tensor& m, const at::Tensor& mask) {
    return at::where(mask, m.view(shaped({Qp, Qp})).narrow(-2, 0, Q).narrow(-1, 0, Q), zero);
  };
  return {finish(mk, strict), finish(mq, keep)};
}

}  // namespace cpbench
