#include "kernels/mixers/gdn/gdn_scan.hpp"

#include <algorithm>
#include <vector>

#include "kernels/mixers/linear/scan_plan.hpp"  // masked_exp, pad_sequence
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

void check_gdn_shapes(const char* who, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                  const at::Tensor& beta, const at::Tensor& group, const at::Tensor& initial) {
  CP_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4 && beta.dim() == 3 && group.dim() == 2 &&
               ((g.dim() == 3 && g.sizes() == beta.sizes()) ||
                (g.dim() == 4 && g.sizes().slice(0, 3) == beta.sizes() && g.size(3) == q.size(3))),
           who, ": expected q, k [R, L, H, dk], v [R, L, H, dv], g [R, L, H] or [R, L, H, dk], beta [R, L, H], group [R, L]; got q ",
           shape_str(q.sizes()), " k ", shape_str(k.sizes()), " v ", shape_str(v.sizes()), " g ", shape_str(g.sizes()),
           " beta ", shape_str(beta.sizes()), " group ", shape_str(group.sizes()));
  const int64_t R = q.size(0), L = q.size(1), H = q.size(2);
  CP_CHECK(v.size(0) == R && v.size(1) == L && v.size(2) == H && g.size(0) == R && g.size(1) == L && g.size(2) == H &&
               group.size(0) == R && group.size(1) == L,
           who, ": shapes disagree: q ", shape_str(q.sizes()), " v ", shape_str(v.sizes()), " g ", shape_str(g.sizes()),
           " group ", shape_str(group.sizes()));
  CP_CHECK(group.scalar_type() == at::kLong, who, ": group must be int64, got ", group.scalar_type());
  if (initial.defined())
    CP_CHECK(initial.dim() == 4 && initial.size(0) == R && initial.size(1) == H && initial.size(2) == q.size(3) &&
                 initial.size(3) == v.size(3),
             who, ": initial state ", shape_str(initial.sizes()), ", expected [", R, ", ", H, ", ", q.size(3), ", ",
             v.size(3), "]");
}

// sum_c x_t[c] y_s[c] exp(G_t[c] - G_s[c]) for the pairs (t, s) `keep` holds, else 0: x, y [..., Q, d],
// G [..., Q, Gd] (Gd = 1: one decay per head, a Q x Q product times the decays; Gd = d: per channel, the
// [Q, Q, d] decays formed whole). Every exponent is a difference inside one chunk, <= 0 where kept.
at::Tensor decayed_products(const at::Tensor& x, const at::Tensor& y, const at::Tensor& G, const at::Tensor& keep) {
  if (G.size(-1) == 1) {
    const at::Tensor g = G.squeeze(-1);
    return at::matmul(x, y.transpose(-1, -2)) * masked_exp(keep, g.unsqueeze(-1) - g.unsqueeze(-2));
  }
  const at::Tensor decay = masked_exp(keep.unsqueeze(-1), G.unsqueeze(-2) - G.unsqueeze(-3));  // [..., t, s, d]
  return (x.unsqueeze(-2) * y.unsqueeze(-3) * decay).sum(-1);
}

bool gdn_low_precision(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf; }

}  // namespace

GdnScanResult gdn_chunk_scan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                             const at::Tensor& beta, const at::Tensor& group, int64_t chunk,
                             const at::Tensor& initial) {
  check_gdn_shapes("gdn_chunk_scan", q, k, v, g, beta, group, initial);
  CP_CHECK(chunk >= 1, "gdn_chunk_scan: chunk must be positive, got ", chunk);
  if (gdn_low_precision(q)) {
    const auto f = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; };
    GdnScanResult r = gdn_chunk_scan(f(q), f(k), f(v), f(g), f(beta), group, chunk, f(initial));
    return {r.o.to(q.scalar_type()), r.final_state};
  }
  const int64_t R = q.size(0), L = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  const auto opts = q.options();
  if (L == 0) return {at::zeros({R, 0, H, dv}, opts), initial.defined() ? initial : at::zeros({R, H, dk, dv}, opts)};
  const int64_t Q = std::min(chunk, L), nc = (L + Q - 1) / Q, extra = nc * Q - L;

  // The last chunk is filled up with transparent slots (g = beta = 0, q = k = v = 0) of the row's last
  // group: they neither reset nor change the state, and their outputs are cut off below.
  const at::Tensor gp = extra ? at::cat({group, group.narrow(1, L - 1, 1).expand({R, extra})}, 1) : group;
  const at::Tensor gc = gp.view({R, 1, nc, Q});  // broadcast over heads
  const auto heads_first = [&](const at::Tensor& t) {  // [R, L, H, d] -> [R, H, nc, Q, d]
    return pad_sequence(t, extra).transpose(1, 2).reshape({R, H, nc, Q, t.size(3)});
  };
  const at::Tensor qc = heads_first(q), kc = heads_first(k), vc = heads_first(v);
  // Cumulative log decays inside the chunk, [R, H, nc, Q, Gd]: Gd = 1 for one decay per head (GDN),
  // dk for one per key channel (KDA), in the compute dtype (float32 at least).
  const at::Tensor g4 = g.dim() == 4 ? g : g.unsqueeze(-1);
  const int64_t Gd = g4.size(3);
  const at::Tensor G = pad_sequence(g4, extra).transpose(1, 2).reshape({R, H, nc, Q, Gd}).cumsum(-2);
  const at::Tensor bc = pad_sequence(beta, extra).transpose(1, 2).reshape({R, H, nc, Q});

  // Inside a chunk: token t sees s <= t of its group, decayed by exp(G_t - G_s).
  const at::Tensor lower = at::ones({Q, Q}, gc.options().dtype(at::kBool)).tril();
  const at::Tensor keep = (gc.unsqueeze(-1) == gc.unsqueeze(-2)) & lower;  // [R, 1, nc, t, s]
  const at::Tensor strict = keep & at::ones({Q, Q}, keep.options()).tril(-1);
  const at::Tensor A = bc.unsqueeze(-1) * decayed_products(kc, kc, G, strict);

  // The tokens the state entering the chunk reaches: those of the group of the token before the chunk
  // (for the first chunk, the row's first group, which `initial` reaches).
  const at::Tensor g_last = gc.select(-1, Q - 1);  // [R, 1, nc]
  const at::Tensor g_prev = at::cat({gc.select(-1, 0).narrow(2, 0, 1), g_last.narrow(2, 0, nc - 1)}, 2);
  const at::Tensor reached = gc == g_prev.unsqueeze(-1);        // [R, 1, nc, Q]
  const at::Tensor eG = masked_exp(reached.unsqueeze(-1), G);  // [R, H, nc, Q, Gd]: decay from the chunk start

  // The UT transform: u_t = beta_t (v_t - S_{t-1}^T (exp(g_t) * k_t)) for every t of the chunk at once.
  // (I + A) u = beta v - beta (exp(G) * k) S_in, so u = U - W S_in.
  const at::Tensor rhs = at::cat({bc.unsqueeze(-1) * vc, bc.unsqueeze(-1) * eG * kc}, -1);
  const at::Tensor X = at::linalg_solve_triangular(A + at::eye(Q, opts), rhs, /*upper=*/false, /*left=*/true,
                                                   /*unitriangular=*/true);
  const at::Tensor U = X.narrow(-1, 0, dv), Wm = X.narrow(-1, dv, dk);

  // o_t = S_in^T (exp(G_t) * q_t) + sum_{s <= t} (q_t . exp(G_t - G_s) * k_s) u_s.
  const at::Tensor Pm = decayed_products(qc, kc, G, keep);
  const at::Tensor o_local = at::matmul(Pm, U);                     // [R, H, nc, Q, dv]
  const at::Tensor readout = eG * qc - at::matmul(Pm, Wm);          // [R, H, nc, Q, dk]: o += readout S_in

  // The state after the chunk: S_out = Diag(a) S_in + Kd^T u = (Diag(a) - Kd^T W) S_in + Kd^T U, where Kd
  // holds the keys of the chunk's last group decayed to its end and a the chunk's whole decay per key
  // channel (0 after a reset).
  const at::Tensor in_last = gc == g_last.unsqueeze(-1);
  const at::Tensor G_end = G.select(-2, Q - 1);  // [R, H, nc, Gd]
  const at::Tensor Kd = masked_exp(in_last.unsqueeze(-1), G_end.unsqueeze(-2) - G) * kc;
  const at::Tensor a = masked_exp(reached.select(-1, Q - 1).unsqueeze(-1), G_end);  // [R, H, nc, Gd]
  const at::Tensor transition =
      a.unsqueeze(-1) * at::eye(dk, opts) - at::matmul(Kd.transpose(-1, -2), Wm);  // [R, H, nc, dk, dk]
  const at::Tensor contribution = at::matmul(Kd.transpose(-1, -2), U);            // [R, H, nc, dk, dv]

  // Between chunks: the only sequential part, one dk x dk by dk x dv product per chunk.
  at::Tensor state = initial.defined() ? initial.to(q.scalar_type()) : at::zeros({R, H, dk, dv}, opts);
  std::vector<at::Tensor> incoming;
  incoming.reserve(static_cast<size_t>(nc));
  for (int64_t c = 0; c < nc; ++c) {
    incoming.push_back(state);
    state = at::matmul(transition.select(2, c), state) + contribution.select(2, c);
  }
  const at::Tensor o = o_local + at::matmul(readout, at::stack(incoming, 2));
  return {o.reshape({R, H, nc * Q, dv}).narrow(2, 0, L).transpose(1, 2), state};
}

GdnScanResult gdn_recurrence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                             const at::Tensor& beta, const at::Tensor& group, const at::Tensor& initial) {
  check_gdn_shapes("gdn_recurrence", q, k, v, g, beta, group, initial);
  const int64_t R = q.size(0), L = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  at::Tensor S = initial.defined() ? initial.to(q.scalar_type()) : at::zeros({R, H, dk, dv}, q.options());
  std::vector<at::Tensor> os;
  os.reserve(static_cast<size_t>(L));
  for (int64_t t = 0; t < L; ++t) {
    if (t > 0) S = S * (group.select(1, t) == group.select(1, t - 1)).to(q.scalar_type()).view({R, 1, 1, 1});
    S = S * at::exp(g.select(1, t)).view({R, H, -1, 1});  // per head or per key channel
    const at::Tensor kt = k.select(1, t), vt = v.select(1, t);
    const at::Tensor kS = at::einsum("rhk,rhkv->rhv", {kt, S});
    S = S + beta.select(1, t).view({R, H, 1, 1}) * kt.unsqueeze(-1) * (vt - kS).unsqueeze(-2);
    os.push_back(at::einsum("rhk,rhkv->rhv", {q.select(1, t), S}));
  }
  return {at::stack(os, 1), S};
}

double gdn_scan_flops(int64_t seq_len, int64_t chunk, int64_t key_head_dim, int64_t value_head_dim,
                      bool channel_gate) {
  const double Q = static_cast<double>(std::max<int64_t>(1, std::min(chunk, seq_len)));
  const double dk = static_cast<double>(key_head_dim), dv = static_cast<double>(value_head_dim);
  const double intra = 2 * Q * dk + 2 * Q * dk + Q * (dv + dk) + 2 * Q * dv + 2 * Q * dk + (channel_gate ? 2 * Q * dk : 0);
  const double state = 2 * dk * dv + 2 * dk * dk + 2 * dk * dv + 2 * dk * dk * dv / Q;
  return intra + state;
}

}  // namespace cpbench
