#include "kernels/mixers/gdn/gdn_scan.hpp"

#include <algorithm>
#include <vector>

#include "kernels/mixers/linear/scan_plan.hpp"  // masked_exp, pad_sequence
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

void check_gdn_shapes(const char* who, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                  const at::Tensor& beta, const at::Tensor& group, const at::Tensor& initial) {
  CP_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4 && g.dim() == 3 && beta.sizes() == g.sizes() &&
               group.dim() == 2,
           who, ": expected q, k [R, L, H, dk], v [R, L, H, dv], g, beta [R, L, H], group [R, L]; got q ",
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
  const at::Tensor G = pad_sequence(g, extra).transpose(1, 2).reshape({R, H, nc, Q}).cumsum(-1);  // within the chunk
  const at::Tensor bc = pad_sequence(beta, extra).transpose(1, 2).reshape({R, H, nc, Q});

  // Inside a chunk: token t sees s <= t of its group, decayed by exp(G_t - G_s).
  const at::Tensor lower = at::ones({Q, Q}, gc.options().dtype(at::kBool)).tril();
  const at::Tensor keep = (gc.unsqueeze(-1) == gc.unsqueeze(-2)) & lower;  // [R, 1, nc, t, s]
  const at::Tensor strict = keep & at::ones({Q, Q}, keep.options()).tril(-1);
  const at::Tensor decay = masked_exp(keep, G.unsqueeze(-1) - G.unsqueeze(-2));  // [R, H, nc, Q, Q]
  const at::Tensor A = at::where(strict, bc.unsqueeze(-1) * at::matmul(kc, kc.transpose(-1, -2)) * decay,
                                 at::zeros({}, opts));

  // The tokens the state entering the chunk reaches: those of the group of the token before the chunk
  // (for the first chunk, the row's first group, which `initial` reaches).
  const at::Tensor g_last = gc.select(-1, Q - 1);  // [R, 1, nc]
  const at::Tensor g_prev = at::cat({gc.select(-1, 0).narrow(2, 0, 1), g_last.narrow(2, 0, nc - 1)}, 2);
  const at::Tensor reached = gc == g_prev.unsqueeze(-1);  // [R, 1, nc, Q]
  const at::Tensor eG = masked_exp(reached, G);           // [R, H, nc, Q]: decay from the chunk start

  // The UT transform: u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t) for every t of the chunk at once.
  // (I + A) u = beta v - beta exp(G) k S_in, so u = U - W S_in.
  const at::Tensor rhs = at::cat({bc.unsqueeze(-1) * vc, (bc * eG).unsqueeze(-1) * kc}, -1);
  const at::Tensor X = at::linalg_solve_triangular(A + at::eye(Q, opts), rhs, /*upper=*/false, /*left=*/true,
                                                   /*unitriangular=*/true);
  const at::Tensor U = X.narrow(-1, 0, dv), Wm = X.narrow(-1, dv, dk);

  // o_t = exp(G_t) S_in^T q_t + sum_{s <= t} exp(G_t - G_s) (q_t . k_s) u_s.
  const at::Tensor Pm = at::matmul(qc, kc.transpose(-1, -2)) * decay;
  const at::Tensor o_local = at::matmul(Pm, U);                               // [R, H, nc, Q, dv]
  const at::Tensor readout = eG.unsqueeze(-1) * qc - at::matmul(Pm, Wm);      // [R, H, nc, Q, dk]: o += readout S_in

  // The state after the chunk: S_out = a S_in + Kd^T u = (a I - Kd^T W) S_in + Kd^T U, where Kd holds the
  // keys of the chunk's last group decayed to its end and a the chunk's whole decay (0 after a reset).
  const at::Tensor in_last = gc == g_last.unsqueeze(-1);
  const at::Tensor G_end = G.select(-1, Q - 1);  // [R, H, nc]
  const at::Tensor Kd = masked_exp(in_last, G_end.unsqueeze(-1) - G).unsqueeze(-1) * kc;
  const at::Tensor a = masked_exp(reached.select(-1, Q - 1), G_end);
  const at::Tensor transition =
      a.unsqueeze(-1).unsqueeze(-1) * at::eye(dk, opts) - at::matmul(Kd.transpose(-1, -2), Wm);  // [R, H, nc, dk, dk]
  const at::Tensor contribution = at::matmul(Kd.transpose(-1, -2), U);                         // [R, H, nc, dk, dv]

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
    S = S * at::exp(g.select(1, t)).view({R, H, 1, 1});
    const at::Tensor kt = k.select(1, t), vt = v.select(1, t);
    const at::Tensor kS = at::einsum("rhk,rhkv->rhv", {kt, S});
    S = S + beta.select(1, t).view({R, H, 1, 1}) * kt.unsqueeze(-1) * (vt - kS).unsqueeze(-2);
    os.push_back(at::einsum("rhk,rhkv->rhv", {q.select(1, t), S}));
  }
  return {at::stack(os, 1), S};
}

double gdn_scan_flops(int64_t seq_len, int64_t chunk, int64_t key_head_dim, int64_t value_head_dim) {
  const double Q = static_cast<double>(std::max<int64_t>(1, std::min(chunk, seq_len)));
  const double dk = static_cast<double>(key_head_dim), dv = static_cast<double>(value_head_dim);
  const double intra = 2 * Q * dk + 2 * Q * dk + Q * (dv + dk) + 2 * Q * dv + 2 * Q * dk;
  const double state = 2 * dk * dv + 2 * dk * dk + 2 * dk * dv + 2 * dk * dk * dv / Q;
  return intra + state;
}

}  // namespace cpbench
