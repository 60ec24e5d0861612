#include "kernels/mixers/mamba/ssm_scan.hpp"

#include <algorithm>
#include <vector>

#include "kernels/mixers/linear/scan_plan.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

void check_scan_shapes(const char* who, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                       const at::Tensor& B, const at::Tensor& C, const at::Tensor& D, const at::Tensor& group) {
  CP_CHECK(x.dim() == 4 && dt.dim() == 3 && B.dim() == 4 && C.sizes() == B.sizes() && group.dim() == 2, who,
           ": expected x [R, L, H, P], dt [R, L, H], B/C [R, L, G, N], group [R, L]; got x ", shape_str(x.sizes()),
           " dt ", shape_str(dt.sizes()), " B ", shape_str(B.sizes()), " C ", shape_str(C.sizes()), " group ",
           shape_str(group.sizes()));
  const int64_t R = x.size(0), L = x.size(1), H = x.size(2), G = B.size(2);
  CP_CHECK(dt.size(0) == R && dt.size(1) == L && dt.size(2) == H && B.size(0) == R && B.size(1) == L &&
               group.size(0) == R && group.size(1) == L && A.numel() == H && D.numel() == H,
           who, ": shapes disagree: x ", shape_str(x.sizes()), " dt ", shape_str(dt.sizes()), " A ",
           shape_str(A.sizes()), " B ", shape_str(B.sizes()), " D ", shape_str(D.sizes()), " group ",
           shape_str(group.sizes()));
  CP_CHECK(G >= 1 && H % G == 0, who, ": ", H, " heads for ", G, " groups, shapes x ", shape_str(x.sizes()), " B ",
           shape_str(B.sizes()));
  CP_CHECK(group.scalar_type() == at::kLong, who, ": group must be int64, got ", group.scalar_type());
}

}  // namespace

at::Tensor ssm_scan(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                    const at::Tensor& C, const at::Tensor& D, const at::Tensor& group, int64_t chunk) {
  check_scan_shapes("ssm_scan", x, dt, A, B, C, D, group);
  CP_CHECK(chunk >= 1, "ssm_scan: chunk must be positive, got ", chunk);
  const at::ScalarType st = x.scalar_type();
  if (st == at::kBFloat16 || st == at::kHalf) {
    const auto f = [](const at::Tensor& t) { return t.to(at::kFloat); };
    return ssm_scan(f(x), f(dt), f(A), f(B), f(C), f(D), group, chunk).to(st);
  }
  const int64_t R = x.size(0), L = x.size(1), H = x.size(2), P = x.size(3), G = B.size(2), N = B.size(3);
  const int64_t K = H / G;  // heads per group: head h = g * K + k
  if (L == 0) return D.view({1, 1, H, 1}) * x;
  const int64_t Q = std::min(chunk, L), nc = (L + Q - 1) / Q, extra = nc * Q - L;

  // The last chunk is filled up with transparent slots (dt = 0, x = B = C = 0) of the row's last
  // group: they neither reset nor feed the state, and their outputs are cut off below.
  const at::Tensor gp =
      extra ? at::cat({group, group.narrow(1, L - 1, 1).expand({R, extra})}, 1) : group;
  const at::Tensor gc = gp.view({R, nc, Q});
  const at::Tensor xc = pad_sequence(x, extra).view({R, nc, Q, G, K, P});
  const at::Tensor dtc = pad_sequence(dt, extra).view({R, nc, Q, G, K});
  const at::Tensor Bc = pad_sequence(B, extra).view({R, nc, Q, G, N});
  const at::Tensor Cc = pad_sequence(C, extra).view({R, nc, Q, G, N});
  const at::Tensor cs = at::cumsum(dtc * A.view({1, 1, 1, G, K}), 2);  // [R, nc, Q, G, K], within the chunk

  // Inside each chunk: the quadratic form on Q x Q.
  const at::Tensor causal = at::ones({Q, Q}, gc.options().dtype(at::kBool)).tril();
  const at::Tensor keep = ((gc.unsqueeze(3) == gc.unsqueeze(2)) & causal).view({R, nc, Q, Q, 1, 1});  // [t, s]
  const at::Tensor decay = masked_exp(keep, cs.unsqueeze(3) - cs.unsqueeze(2));  // [R, nc, t, s, G, K]
  const at::Tensor cb = at::einsum("rctgn,rcsgn->rctsg", {Cc, Bc});
  const at::Tensor weights = decay * cb.unsqueeze(-1) * dtc.unsqueeze(2);  // dt of s
  at::Tensor y = at::einsum("rctsgk,rcsgkp->rctgkp", {weights, xc});

  // Each chunk's own contribution to the state at its last token (tokens of the last token's group).
  const at::Tensor cs_last = cs.select(2, Q - 1);  // [R, nc, G, K]
  const at::Tensor g_last = gc.select(2, Q - 1);   // [R, nc]
  const at::Tensor to_end =
      masked_exp((gc == g_last.unsqueeze(2)).view({R, nc, Q, 1, 1}), cs_last.unsqueeze(2) - cs) * dtc;
  const at::Tensor local = at::einsum("rcsgkp,rcsgn->rcgkpn", {to_end.unsqueeze(-1) * xc, Bc});  // [R, nc, G, K, P, N]

  // Between chunks: state after chunk c = carry[c] * state after chunk c-1 + local[c], where carry is
  // the chunk's whole decay, or 0 when the group changes inside the chunk or at its first token
  // (groups are contiguous runs, so "same group at both chunk ends" means "no reset between").
  const at::Tensor no_reset = at::cat({at::zeros({R, 1}, g_last.options().dtype(at::kBool)),
                                       g_last.narrow(1, 1, nc - 1) == g_last.narrow(1, 0, nc - 1)},
                                      1);  // [R, nc]
  const at::Tensor carry = masked_exp(no_reset.view({R, nc, 1, 1}), cs_last).view({R, nc, G, K, 1, 1});
  std::vector<at::Tensor> incoming;  // the state entering chunk c
  incoming.reserve(static_cast<size_t>(nc));
  incoming.push_back(at::zeros({R, G, K, P, N}, local.options()));
  at::Tensor state = local.select(1, 0);
  for (int64_t c = 1; c < nc; ++c) {
    incoming.push_back(state);
    if (c + 1 < nc) state = carry.select(1, c) * state + local.select(1, c);
  }
  const at::Tensor state_in = at::stack(incoming, 1);  // [R, nc, G, K, P, N]

  // The incoming state read by each token still in the previous chunk's last group, decayed to it.
  const at::Tensor g_prev = at::cat({gc.select(2, 0).narrow(1, 0, 1), g_last.narrow(1, 0, nc - 1)}, 1);
  const at::Tensor from_start = masked_exp((gc == g_prev.unsqueeze(2)).view({R, nc, Q, 1, 1}), cs);  // [R, nc, Q, G, K]
  y = y + at::einsum("rctgn,rcgkpn->rctgkp", {Cc, state_in}) * from_start.unsqueeze(-1);

  return y.reshape({R, nc * Q, H, P}).narrow(1, 0, L) + D.view({1, 1, H, 1}) * x;
}

double ssm_scan_flops(int64_t seq_len, int64_t chunk, int64_t head_dim, int64_t state) {
  const double Q = static_cast<double>(std::max<int64_t>(1, std::min(chunk, seq_len)));
  const double P = static_cast<double>(head_dim), N = static_cast<double>(state);
  return 2 * Q * N + 2 * Q * P + 4 * P * N + 2 * P * N / Q;
}

at::Tensor ssm_scan_quadratic(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                              const at::Tensor& C, const at::Tensor& D, const at::Tensor& group) {
  check_scan_shapes("ssm_scan_quadratic", x, dt, A, B, C, D, group);
  const int64_t L = x.size(1), H = x.size(2), G = B.size(2);
  const at::Tensor cs = at::cumsum(dt * A, 1);                          // [R, L, H]
  const at::Tensor seg = cs.unsqueeze(2) - cs.unsqueeze(1);              // [R, t, s, H]: sum over (s, t]
  const at::Tensor causal = at::ones({L, L}, group.options().dtype(at::kBool)).tril();
  const at::Tensor same = group.unsqueeze(2) == group.unsqueeze(1);     // [R, t, s]
  const at::Tensor decay = masked_exp((same & causal).unsqueeze(-1), seg);
  const at::Tensor cb = at::einsum("rtgn,rsgn->rtsg", {C, B}).repeat_interleave(H / G, 3);  // [R, t, s, H]
  const at::Tensor m = decay * cb * dt.unsqueeze(1);                                         // dt of s
  return at::einsum("rtsh,rshp->rthp", {m, x}) + D.view({1, 1, H, 1}) * x;
}

at::Tensor ssm_scan_recurrence(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                               const at::Tensor& C, const at::Tensor& D, const at::Tensor& group) {
  check_scan_shapes("ssm_scan_recurrence", x, dt, A, B, C, D, group);
  const int64_t R = x.size(0), L = x.size(1), H = x.size(2), P = x.size(3), G = B.size(2), N = B.size(3);
  const at::Tensor Bh = B.repeat_interleave(H / G, 2), Ch = C.repeat_interleave(H / G, 2);  // [R, L, H, N]
  at::Tensor h = at::zeros({R, H, P, N}, x.options());
  std::vector<at::Tensor> ys;
  for (int64_t t = 0; t < L; ++t) {
    at::Tensor carry = at::exp(dt.select(1, t) * A);  // [R, H]
    if (t > 0) carry = carry * (group.select(1, t) == group.select(1, t - 1)).unsqueeze(1).to(x.scalar_type());
    else carry = carry * 0;
    h = h * carry.view({R, H, 1, 1}) +
        (dt.select(1, t).reshape({R, H, 1, 1}) * x.select(1, t).unsqueeze(-1)) * Bh.select(1, t).unsqueeze(2);
    ys.push_back((h * Ch.select(1, t).unsqueeze(2)).sum(-1) + D.view({1, H, 1}) * x.select(1, t));
  }
  return at::stack(ys, 1);
}

}  // namespace cpbench
