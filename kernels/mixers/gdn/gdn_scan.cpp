#include "kernels/mixers/gdn/gdn_scan.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/mixers/gdn/decayed_products.hpp"
#include "kernels/mixers/gdn/delta_rule_fused.hpp"
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

bool gdn_low_precision(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf; }

// The factors of the chunks of Q tokens of q..group ([R, L, H, .] in the compute dtype, L >= 1; the last
// chunk filled up). `before` [R]: the group of the token before q's first one (the group the entering
// state reaches); undefined: q's first token's (a row start).
DeltaRuleChunks chunk_factors(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                              const at::Tensor& beta, const at::Tensor& group, int64_t Q, const at::Tensor& before) {
  const int64_t R = q.size(0), L = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  const auto opts = q.options();
  const int64_t nc = (L + Q - 1) / Q, extra = nc * Q - L;

  // The last chunk is filled up with transparent slots (g = beta = 0, q = k = v = 0) of the row's last
  // group: they neither reset nor change the state, and their outputs are cut off.
  const at::Tensor gp = extra ? at::cat({group, group.narrow(1, L - 1, 1).expand({R, extra})}, 1) : group;
  const at::Tensor gc = gp.view({R, 1, nc, Q});  // broadcast over heads
  const auto heads_first = [&](const at::Tensor& t) {  // [R, L, H, d] -> [R, H, nc, Q, d]
    return pad_sequence(t, extra).transpose(1, 2).reshape({R, H, nc, Q, t.size(3)}).contiguous();
  };
  const at::Tensor qc = heads_first(q), kc = heads_first(k), vc = heads_first(v);
  // Cumulative log decays inside the chunk, [R, H, nc, Q, Gd]: Gd = 1 for one decay per head (GDN),
  // dk for one per key channel (KDA), in the compute dtype (float32 at least).
  const at::Tensor G = heads_first(g.dim() == 4 ? g : g.unsqueeze(-1)).cumsum(-2);
  const at::Tensor bc = pad_sequence(beta, extra).transpose(1, 2).reshape({R, H, nc, Q});

  // Inside a chunk: token t sees s <= t of its group, decayed by exp(G_t - G_s).
  const at::Tensor lower = at::ones({Q, Q}, gc.options().dtype(at::kBool)).tril();
  const at::Tensor keep = (gc.unsqueeze(-1) == gc.unsqueeze(-2)) & lower;  // [R, 1, nc, t, s]
  const at::Tensor strict = keep & at::ones({Q, Q}, keep.options()).tril(-1);
  DecayedProducts products = decayed_products(qc, kc, G, keep, strict);
  const at::Tensor A = bc.unsqueeze(-1) * products.kk;

  // The tokens the state entering the chunk reaches: those of the group of the token before the chunk
  // (for the first chunk, the row's first group, which the initial state reaches).
  const at::Tensor g_last = gc.select(-1, Q - 1);  // [R, 1, nc]
  const at::Tensor first = before.defined() ? before.reshape({R, 1, 1}) : gc.select(-1, 0).narrow(2, 0, 1);
  const at::Tensor g_prev = at::cat({first, g_last.narrow(2, 0, nc - 1)}, 2);
  const at::Tensor reached = gc == g_prev.unsqueeze(-1);        // [R, 1, nc, Q]
  const at::Tensor eG = masked_exp(reached.unsqueeze(-1), G);  // [R, H, nc, Q, Gd]: decay from the chunk start

  // The UT transform: u_t = beta_t (v_t - S_{t-1}^T (exp(g_t) * k_t)) for every t of the chunk at once.
  // (I + A) u = beta v - beta (exp(G) * k) S_in, so u = U - W S_in: one unit lower triangular solve.
  const at::Tensor rhs = at::cat({bc.unsqueeze(-1) * vc, bc.unsqueeze(-1) * eG * kc}, -1);
  const at::Tensor X = at::linalg_solve_triangular(A + at::eye(Q, opts), rhs, /*upper=*/false, /*left=*/true,
                                                   /*unitriangular=*/true);
  DeltaRuleChunks out;
  out.length = L;
  out.U = X.narrow(-1, 0, dv);
  out.W = X.narrow(-1, dv, dk);
  out.qd = eG * qc;
  out.P = std::move(products.qk);
  // Kd: the keys of the chunk's last group decayed to its end; a: the chunk's whole decay per key
  // channel, 0 after a reset.
  const at::Tensor in_last = gc == g_last.unsqueeze(-1);
  const at::Tensor G_end = G.select(-2, Q - 1);  // [R, H, nc, Gd]
  out.Kd = masked_exp(in_last.unsqueeze(-1), G_end.unsqueeze(-2) - G) * kc;
  out.a = masked_exp(reached.select(-1, Q - 1).unsqueeze(-1), G_end);
  return out;
}

// Whether autograd records an op on these tensors (the evaluation without a graph may take other routes).
bool records_grad(std::initializer_list<at::Tensor> ts) {
  if (!at::GradMode::is_enabled()) return false;
  return std::any_of(ts.begin(), ts.end(), [](const at::Tensor& t) { return t.defined() && t.requires_grad(); });
}

// Without a graph: the chunks in blocks of about kBlockTokens tokens, each block's ATen ops
// single-threaded on tensors that stay in the core's cache (whole-row elementwise passes are memory-bound
// on a CPU). The same ops per chunk as one call; the block's entering group is the previous block's last.
// The at::parallel_for below runs its whole range on the calling thread: its OpenMP backend is a pragma
// compiled into this file, which is built without -fopenmp (CMakeLists.txt, CPBENCH_OPENMP_SOURCES); it
// still sets ATen's parallel guard, which keeps each block's ops single-threaded. Fanning the blocks out
// would first need the caller's thread-local state (grad mode, inference mode, the current CUDA stream)
// carried into the workers: at::parallel_for does not carry it (ATen/Parallel-inl.h).
constexpr int64_t kBlockTokens = 512;

DeltaRuleChunks blocked_chunk_factors(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& g, const at::Tensor& beta, const at::Tensor& group, int64_t Q) {
  const int64_t R = q.size(0), L = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  const int64_t nc = (L + Q - 1) / Q, per = std::max<int64_t>(1, kBlockTokens / Q), blocks = (nc + per - 1) / per;
  const auto make = [&](int64_t last) { return at::empty({R, H, nc, Q, last}, q.options()); };
  DeltaRuleChunks out;
  out.length = L;
  out.qd = make(dk);
  out.P = make(Q);
  out.U = make(dv);
  out.W = make(dk);
  out.Kd = make(dk);
  out.a = at::empty({R, H, nc, g.dim() == 4 ? dk : 1}, q.options());
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * per * Q, len = std::min(L, t0 + per * Q) - t0;
      const auto cut = [&](const at::Tensor& t) { return t.narrow(1, t0, len); };
      const DeltaRuleChunks part = chunk_factors(cut(q), cut(k), cut(v), cut(g), cut(beta), cut(group), Q,
                                                 b == 0 ? at::Tensor() : group.select(1, t0 - 1));
      for (at::Tensor DeltaRuleChunks::*field :
           {&DeltaRuleChunks::qd, &DeltaRuleChunks::P, &DeltaRuleChunks::U, &DeltaRuleChunks::W, &DeltaRuleChunks::Kd,
            &DeltaRuleChunks::a})
        (out.*field).narrow(2, b * per, (part.*field).size(2)).copy_(part.*field);
    }
  });
  return out;
}

}  // namespace

DeltaRuleChunks delta_rule_chunks(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                  const at::Tensor& g_in, const at::Tensor& beta_in, const at::Tensor& group,
                                  int64_t chunk) {
  check_gdn_shapes("delta_rule_chunks", q_in, k_in, v_in, g_in, beta_in, group, {});
  CP_CHECK(chunk >= 1, "delta_rule_chunks: chunk must be positive, got ", chunk);
  CP_CHECK(q_in.size(1) > 0, "delta_rule_chunks: no tokens");
  // bfloat16 / float16 run in float32 (the accumulator rule).
  const auto f = [&](const at::Tensor& t) { return gdn_low_precision(q_in) ? t.to(at::kFloat) : t; };
  const at::Tensor q = f(q_in), k = f(k_in), v = f(v_in), g = f(g_in), beta = f(beta_in);
  const int64_t L = q.size(1), Q = std::min(chunk, L);
  if (L > kBlockTokens && !records_grad({q, k, v, g, beta})) return blocked_chunk_factors(q, k, v, g, beta, group, Q);
  return chunk_factors(q, k, v, g, beta, group, Q, {});
}

namespace {

// delta_rule_apply without a graph: each (row, head)'s chunks in order, in place (the state, u and each
// chunk's outputs written where they land; no per-chunk state kept). The (row, head)s run one after
// another on the calling thread, for the reason at blocked_chunk_factors.
GdnScanResult apply_without_graph(const DeltaRuleChunks& c, const at::Tensor& initial) {
  const int64_t R = c.U.size(0), H = c.U.size(1), nc = c.U.size(2), Q = c.U.size(3), dv = c.U.size(4);
  at::Tensor state = initial.clone(at::MemoryFormat::Contiguous);
  at::Tensor o = at::empty({R, H, nc, Q, dv}, c.U.options());
  at::parallel_for(0, R * H, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r = b / H, h = b % H;
      at::Tensor S = state[r][h], u = at::empty({Q, dv}, c.U.options());
      const at::Tensor U = c.U[r][h], W = c.W[r][h], qd = c.qd[r][h], P = c.P[r][h], Kd = c.Kd[r][h], a = c.a[r][h];
      const at::Tensor out = o[r][h];
      for (int64_t i = 0; i < nc; ++i) {
        at::addmm_out(u, U[i], W[i], S, 1, -1);  // u = U - W S_in
        at::Tensor oi = out[i];
        at::mm_out(oi, qd[i], S);
        oi.addmm_(P[i], u);
        S.mul_(a[i].unsqueeze(-1));
        S.addmm_(Kd[i].t(), u);
      }
    }
  });
  return {o.view({R, H, nc * Q, dv}).narrow(2, 0, c.length).transpose(1, 2), state};
}

}  // namespace

GdnScanResult delta_rule_apply(const DeltaRuleChunks& c, const at::Tensor& initial) {
  const int64_t R = c.U.size(0), H = c.U.size(1), nc = c.U.size(2), Q = c.U.size(3), dv = c.U.size(4);
  const int64_t dk = c.W.size(4);
  at::Tensor state = initial.defined() ? initial.to(c.U.scalar_type()) : at::zeros({R, H, dk, dv}, c.U.options());
  CP_CHECK(state.dim() == 4 && state.size(0) == R && state.size(1) == H && state.size(2) == dk && state.size(3) == dv,
           "delta_rule_apply: initial state ", shape_str(state.sizes()), ", expected [", R, ", ", H, ", ", dk, ", ",
           dv, "]");
  if (!records_grad({c.qd, c.P, c.U, c.W, c.Kd, c.a, state})) return apply_without_graph(c, state);
  // The only sequential part, per chunk: its new values u = U - W S_in, then S_out = Diag(a) S_in + Kd^T u.
  std::vector<at::Tensor> incoming, values;
  incoming.reserve(static_cast<size_t>(nc));
  values.reserve(static_cast<size_t>(nc));
  for (int64_t i = 0; i < nc; ++i) {
    const at::Tensor u = c.U.select(2, i) - at::matmul(c.W.select(2, i), state);
    incoming.push_back(state);
    values.push_back(u);
    state = c.a.select(2, i).unsqueeze(-1) * state + at::matmul(c.Kd.select(2, i).transpose(-1, -2), u);
  }
  // o_t = S_in^T (exp(G_t) * q_t) + sum_{s <= t} (q_t . exp(G_t - G_s) * k_s) u_s, every chunk at once.
  const at::Tensor o = at::matmul(c.qd, at::stack(incoming, 2)) + at::matmul(c.P, at::stack(values, 2));
  return {o.reshape({R, H, nc * Q, dv}).narrow(2, 0, c.length).transpose(1, 2), state};
}

DeltaRuleSummary delta_rule_summary(const DeltaRuleChunks& c) {
  const int64_t R = c.U.size(0), H = c.U.size(1), nc = c.U.size(2), dv = c.U.size(4), dk = c.W.size(4);
  // The transition T and the contribution C side by side, X = [T | C] from [I | 0], chunk by chunk:
  // X_out = Diag(a) X_in + Kd^T ([0 | U] - W X_in), the delta rule's own state step on dk + dv columns.
  at::Tensor X = at::cat({at::eye(dk, c.U.options()).expand({R, H, dk, dk}), at::zeros({R, H, dk, dv}, c.U.options())}, -1);
  for (int64_t i = 0; i < nc; ++i) {
    const at::Tensor WX = at::matmul(c.W.select(2, i), X);  // [R, H, Q, dk + dv]
    const at::Tensor u = at::cat({-WX.narrow(-1, 0, dk), c.U.select(2, i) - WX.narrow(-1, dk, dv)}, -1);
    X = c.a.select(2, i).unsqueeze(-1) * X + at::matmul(c.Kd.select(2, i).transpose(-1, -2), u);
  }
  return {X.narrow(-1, 0, dk), X.narrow(-1, dk, dv)};
}

GdnScanResult gdn_chunk_scan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                             const at::Tensor& beta, const at::Tensor& group, int64_t chunk,
                             const at::Tensor& initial) {
  check_gdn_shapes("gdn_chunk_scan", q, k, v, g, beta, group, initial);
  CP_CHECK(chunk >= 1, "gdn_chunk_scan: chunk must be positive, got ", chunk);
  const int64_t R = q.size(0), L = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  if (L == 0) {
    const auto ct = q.options().dtype(recurrence_dtype(q.scalar_type()));
    return {at::zeros({R, 0, H, dv}, q.options()), initial.defined() ? initial.to(ct) : at::zeros({R, H, dk, dv}, ct)};
  }
  if (!records_grad({q, k, v, g, beta, initial})) {  // inference: the fused form, float32 at least
    const auto f = [&](const at::Tensor& t) { return gdn_low_precision(q) ? t.to(at::kFloat) : t; };
    const GdnScanResult r = delta_rule_fused_scan(f(q), f(k), f(v), f(g), f(beta), group, chunk, initial);
    return {r.o.to(q.scalar_type()), r.final_state};
  }
  const GdnScanResult r = delta_rule_apply(delta_rule_chunks(q, k, v, g, beta, group, chunk), initial);
  return {r.o.to(q.scalar_type()), r.final_state};
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
  const double intra = 2 * Q * dk + 2 * Q * dk + Q * (dv + dk) + 2 * Q * dv + (channel_gate ? 1.5 * dk * std::log2(Q) : 0);
  const double state = 3 * 2 * dk * dv;
  return intra + state;
}

double delta_rule_summary_flops(int64_t key_head_dim, int64_t value_head_dim) {
  return 4.0 * static_cast<double>(key_head_dim) * static_cast<double>(key_head_dim + value_head_dim);
}

}  // namespace cpbench
