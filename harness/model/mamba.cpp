#include "harness/model/mamba.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "harness/model/ssm_state_passing.hpp"
#include "kernels/comm/autograd.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {

void SsmConfig::validate() const {
  CP_CHECK_USAGE(heads >= 1, "model.ssm.heads: expected a positive integer, got ", heads);
  CP_CHECK_USAGE(head_dim >= 1, "model.ssm.head_dim: expected a positive integer, got ", head_dim);
  CP_CHECK_USAGE(state >= 1, "model.ssm.state: expected a positive integer, got ", state);
  CP_CHECK_USAGE(groups >= 1 && heads % groups == 0, "model.ssm.groups: ", groups, " must divide model.ssm.heads ",
                 heads);
  CP_CHECK_USAGE(conv >= 1, "model.ssm.conv: expected a positive integer, got ", conv);
}

std::string SsmConfig::cp_unsupported_reason(int64_t cp) const {
  if (heads % cp != 0)
    return detail::concat("model.ssm.heads ", heads, " is not divisible by cp ", cp,
                          " (hidden-parallel CP gives every rank heads/cp SSM heads)");
  if (groups < cp ? cp % groups != 0 : groups % cp != 0)
    return detail::concat("model.ssm.groups ", groups, " and cp ", cp,
                          ": one must divide the other (B/C groups are split over, or replicated across, the ranks)");
  return "";
}

// ---- plan ----

SsmPlan make_ssm_plan(const TokenMeta& meta, bool document_reset, int64_t conv, at::ScalarType dtype,
                      const at::Device& device) {
  const at::Tensor seg = meta.segment.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor doc = meta.doc.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor val = meta.valid.to(at::kCPU, at::kBool).contiguous();
  const int64_t R = seg.size(0), L = seg.size(1), K = conv;
  std::vector<int64_t> group(static_cast<size_t>(R * L)), src(static_cast<size_t>(R * L * K));
  std::vector<int64_t> valid(static_cast<size_t>(R * L));
  const int64_t* sp = seg.data_ptr<int64_t>();
  const int64_t* dp = doc.data_ptr<int64_t>();
  const bool* vp = val.data_ptr<bool>();
  int64_t next_group = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t zero_row = r * (L + 1) + L;  // the zero row appended to row r's input
    std::vector<int64_t> window;               // the group's last K-1 real tokens (flat input rows)
    bool have_key = false;
    int64_t key_seg = 0, key_doc = 0, current = next_group++;
    for (int64_t t = 0; t < L; ++t) {
      const size_t i = static_cast<size_t>(r * L + t);
      const bool real = vp[i];
      if (real) {
        const int64_t d = document_reset ? dp[i] : 0;
        if (!have_key || sp[i] != key_seg || d != key_doc) {
          current = next_group++;
          window.clear();
          have_key = true;
          key_seg = sp[i];
          key_doc = d;
        }
      }
      group[i] = current;
      valid[i] = real ? 1 : 0;
      // Taps k = K-1 (this token), K-2 (the previous real one), ...; pad slots read zeros only.
      for (int64_t k = 0; k < K; ++k) src[i * static_cast<size_t>(K) + static_cast<size_t>(k)] = zero_row;
      if (real) {
        src[i * static_cast<size_t>(K) + static_cast<size_t>(K - 1)] = r * (L + 1) + t;
        for (size_t m = 0; m < window.size(); ++m)
          src[i * static_cast<size_t>(K) + static_cast<size_t>(K - 2) - m] = window[window.size() - 1 - m];
        window.push_back(r * (L + 1) + t);
        if (static_cast<int64_t>(window.size()) > K - 1) window.erase(window.begin());
      }
    }
  }
  SsmPlan p;
  p.rows = R;
  p.length = L;
  p.group = ssm_host_tensor(group, device).view({R, L});
  p.valid = ssm_host_tensor(valid, device).view({R, L}).to(dtype);
  p.conv_src = ssm_host_tensor(src, device);
  return p;
}

namespace {

std::atomic<int64_t> host_tensors_built{0};

// Channels of `proj` ([z | x | B | C | dt]) that rank q of W scans: its heads' x, its groups' B and C,
// its heads' dt. With `conv_coords`, the same channels of conv1d ([x | B | C]) without dt.
std::vector<int64_t> rank_channels(const SsmConfig& c, int64_t W, int64_t q, bool conv_coords) {
  const int64_t h_l = c.heads / W, d_l = h_l * c.head_dim, N = c.state, G = c.groups;
  const int64_t g_l = G >= W ? G / W : 1;
  const int64_t g0 = G >= W ? q * g_l : q / (W / G);
  const int64_t base = conv_coords ? 0 : c.d_inner();  // skip z in proj coordinates
  std::vector<int64_t> idx;
  const auto range = [&](int64_t start, int64_t n) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(start + i);
  };
  range(base + q * d_l, d_l);                                    // x
  range(base + c.d_inner() + g0 * N, g_l * N);                   // B
  range(base + c.d_inner() + G * N + g0 * N, g_l * N);           // C
  if (!conv_coords) range(base + c.d_inner() + 2 * G * N + q * h_l, h_l);  // dt
  return idx;
}

// The hidden-parallel index tensors of rank r of W (W = 1: every channel, in order).
void set_hidden_parallel_indices(SsmStepContext& ctx, const SsmConfig& c, int64_t W, int64_t r,
                                 const at::Device& device) {
  std::vector<int64_t> send;
  for (int64_t q = 0; q < W; ++q) {
    const auto ch = rank_channels(c, W, q, false);
    send.insert(send.end(), ch.begin(), ch.end());
  }
  std::vector<int64_t> heads;
  for (int64_t i = 0; i < c.heads / W; ++i) heads.push_back(r * (c.heads / W) + i);
  ctx.send_channels = ssm_host_tensor(send, device);
  ctx.conv_channels = ssm_host_tensor(rank_channels(c, W, r, true), device);
  ctx.heads = ssm_host_tensor(heads, device);
}

SsmCpShape layer_shape(const SsmConfig& c, int64_t rows, int64_t seq_len, int64_t cp, at::ScalarType dtype) {
  SsmCpShape s;
  s.batch = rows;
  s.seq_len = seq_len;
  s.cp = cp;
  s.heads = c.heads;
  s.head_dim = c.head_dim;
  s.state = c.state;
  s.groups = c.groups;
  s.conv = c.conv;
  s.elem_bytes = static_cast<int64_t>(c10::elementSize(dtype));
  const bool low = dtype == at::kBFloat16 || dtype == at::kHalf;
  s.state_elem_bytes = low ? 4 : s.elem_bytes;
  return s;
}

}  // namespace

int64_t ssm_host_tensors_built() { return host_tensors_built.load(); }

at::Tensor ssm_host_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  ++host_tensors_built;
  return at::tensor(v, at::kLong).to(device);
}

SsmStepContext single_rank_ssm_context(const TokenMeta& meta, const MaskSpec& mask, const SsmConfig& config,
                                       at::ScalarType dtype, const at::Device& device) {
  SsmStepContext ctx;
  ctx.plan = make_ssm_plan(meta, mask.same_document(), config.conv, dtype, device);
  set_hidden_parallel_indices(ctx, config, 1, 0, device);
  ctx.shape = layer_shape(config, meta.batch(), meta.tokens(), 1, dtype);
  return ctx;
}

SsmStepContext cp_ssm_context(const comm::Communicator& comm, const Sharder& sharder, const TokenMeta& all_meta,
                              const MaskSpec& mask, const SsmConfig& config, at::ScalarType dtype,
                              const at::Device& device, std::string nvtx, const SsmCpOptions& options) {
  const GlobalLayout& g = sharder.shard_layout().global;
  CP_CHECK(all_meta.tokens() == g.padded_seq_len, "mamba: gathered metadata has ", all_meta.tokens(),
           " tokens per row, the shard's stream ", g.padded_seq_len, " (", sharder.who(), ")");
  return cp_ssm_context(comm, g, all_meta, mask, config, dtype, device, std::move(nvtx), options);
}

SsmStepContext cp_ssm_context(const comm::Communicator& comm, const GlobalLayout& g, const TokenMeta& all_meta,
                              const MaskSpec& mask, const SsmConfig& config, at::ScalarType dtype,
                              const at::Device& device, std::string nvtx, const SsmCpOptions& options) {
  SsmStepContext ctx;
  ctx.comm = &comm;
  ctx.nvtx = std::move(nvtx);
  ctx.strategy = options.strategy;
  CP_CHECK(all_meta.tokens() == g.padded_seq_len && g.cp == comm.size(), "mamba: gathered metadata has ",
           all_meta.tokens(), " tokens per row for a ", g.layout, " stream of ", g.padded_seq_len, " over cp ", g.cp,
           ", the communicator has ", comm.size(), " ranks");
  ctx.shape = layer_shape(config, all_meta.batch(), g.padded_seq_len, comm.size(), dtype);
  if (options.strategy == SsmCpStrategy::state_passing) {
    auto sp = make_state_passing_plan(g, all_meta, mask.same_document(), config.conv, comm.rank(), dtype, device,
                                      options.drop_incoming_state);
    ctx.plan = sp->local;
    ctx.shape.chunks_per_rank = sp->slots;
    ctx.state_passing = std::move(sp);
    return ctx;
  }
  const std::string why = config.cp_unsupported_reason(comm.size());
  CP_CHECK(why.empty(), "mamba: ", why, " (rank ", comm.rank(), ")");
  set_hidden_parallel_indices(ctx, config, comm.size(), comm.rank(), device);
  TokenMeta scan_meta = all_meta;
  if (options.undo_chunk_order) {
    // The layout's one map, both ways: rank-order concatenation <-> global stream order.
    std::vector<int64_t> rank_order;
    rank_order.reserve(static_cast<size_t>(g.padded_seq_len));
    for (const auto& r : g.ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
    ctx.to_rank_order = ssm_host_tensor(rank_order, device);
    ctx.to_global = ssm_host_tensor(g.inverse(), device);
    scan_meta = all_meta.index_select(1, ctx.to_global.to(all_meta.pos.device()));
  }
  ctx.plan = make_ssm_plan(scan_meta, mask.same_document(), config.conv, dtype, device);
  return ctx;
}

// ---- scan ----

// The masked values may be large positive decay sums (s > t), so they are replaced before exp, not
// after: exp would overflow and 0 * inf is NaN, in the values and in the gradients.
at::Tensor masked_exp(const at::Tensor& keep, const at::Tensor& v) {
  return at::exp(at::where(keep, v, at::full({}, -std::numeric_limits<double>::infinity(), v.options())));
}

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

// Zero-extends dim 1 of `t` by `extra` slots at the end (differentiable).
at::Tensor pad_seq(const at::Tensor& t, int64_t extra) {
  if (extra == 0) return t;
  std::vector<int64_t> pad(static_cast<size_t>(2 * (t.dim() - 1)), 0);  // from the last dim backwards
  pad.back() = extra;
  return at::constant_pad_nd(t, pad, 0);
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
  const at::Tensor xc = pad_seq(x, extra).view({R, nc, Q, G, K, P});
  const at::Tensor dtc = pad_seq(dt, extra).view({R, nc, Q, G, K});
  const at::Tensor Bc = pad_seq(B, extra).view({R, nc, Q, G, N});
  const at::Tensor Cc = pad_seq(C, extra).view({R, nc, Q, G, N});
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

// ---- the layer ----

SsmScanInputs conv_to_scan_inputs(const at::Tensor& taps, const at::Tensor& dt_raw, const at::Tensor& valid,
                               const at::Tensor& conv_w, const at::Tensor& conv_b, const at::Tensor& dt_bias,
                               const at::Tensor& A_log, const at::Tensor& D, int64_t head_dim, int64_t groups,
                               int64_t state, at::ScalarType ct) {
  const int64_t R = taps.size(0), L = taps.size(1), h = dt_raw.size(2), d = h * head_dim, gn = groups * state;
  const at::Tensor xbc = at::silu((taps.to(ct) * conv_w.to(ct).t().unsqueeze(0).unsqueeze(0)).sum(2) + conv_b.to(ct));
  SsmScanInputs in;
  in.x = xbc.narrow(2, 0, d).reshape({R, L, h, head_dim});
  in.B = xbc.narrow(2, d, gn).reshape({R, L, groups, state});
  in.C = xbc.narrow(2, d + gn, gn).reshape({R, L, groups, state});
  // Pad slots get dt = 0: no decay, no input, so the state carries through them unchanged.
  in.dt = at::softplus(dt_raw.to(ct) + dt_bias.to(ct)) * valid.to(ct).unsqueeze(-1);
  in.A = -at::exp(A_log.to(ct));
  in.D = D.to(ct);
  return in;
}

namespace {

void count_sent(const SsmStepContext& ctx, const at::Tensor& exchanged, int64_t W) {
  if (ctx.bytes_sent && W > 1) *ctx.bytes_sent += 2 * static_cast<int64_t>(exchanged.nbytes()) / W * (W - 1);
}

// Hidden-parallel (and one rank): the whole stream for this rank's channels.
at::Tensor hidden_parallel_forward(const at::Tensor& proj, const SsmParams& params, const SsmConfig& c,
                                   const SsmStepContext& ctx) {
  const int64_t W = ctx.comm ? ctx.comm->size() : 1, r = ctx.comm ? ctx.comm->rank() : 0;
  const std::string why = c.cp_unsupported_reason(W);
  CP_CHECK(why.empty(), "mamba: ", why, " (rank ", r, ")");
  CP_CHECK(ctx.send_channels.defined(), "mamba: the step's SSM context has no hidden-parallel index tensors (rank ",
           r, ")");
  const int64_t R = proj.size(0), S_local = proj.size(1);
  const int64_t h_l = c.heads / W, d_l = h_l * c.head_dim, g_l = c.groups >= W ? c.groups / W : 1;
  const int64_t N = c.state, K = c.conv;

  // Sequence-parallel -> hidden-parallel: block q of the last dim holds rank q's channels.
  at::Tensor mine;  // [R, W * S_local, channels], rank order
  {
    nvtx::Range range{ctx.nvtx, "ssm_a2a"};
    const at::Tensor blocks = proj.index_select(2, ctx.send_channels);
    mine = ctx.comm ? all_to_all_autograd(*ctx.comm, blocks, 2, 1, {ctx.nvtx, nullptr}) : blocks;
    count_sent(ctx, blocks, W);
  }
  if (ctx.to_global.defined()) mine = mine.index_select(1, ctx.to_global);
  const int64_t L = mine.size(1);
  CP_CHECK(ctx.plan.rows == R && ctx.plan.length == L, "mamba: the SSM plan covers [", ctx.plan.rows, ", ",
           ctx.plan.length, "], the gathered stream is [", R, ", ", L, "] (rank ", r, ")");

  // Low precision scans in float32 (the cumulative decays lose everything in bfloat16).
  const at::ScalarType st = proj.scalar_type();
  const at::ScalarType ct = (st == at::kBFloat16 || st == at::kHalf) ? at::kFloat : st;
  const int64_t cc = d_l + 2 * g_l * N;
  // Causal depthwise conv over each token's earlier real tokens of its group (SsmPlan::conv_src).
  const at::Tensor xbc = mine.narrow(2, 0, cc).to(ct);
  const at::Tensor padded = at::cat({xbc, at::zeros({R, 1, cc}, xbc.options())}, 1).reshape({R * (L + 1), cc});
  const at::Tensor taps = padded.index_select(0, ctx.plan.conv_src).view({R, L, K, cc});
  const SsmScanInputs in = conv_to_scan_inputs(
      taps, mine.narrow(2, cc, h_l), ctx.plan.valid, params.conv_w.index_select(0, ctx.conv_channels),
      params.conv_b.index_select(0, ctx.conv_channels), params.dt_bias.index_select(0, ctx.heads),
      params.A_log.index_select(0, ctx.heads), params.D.index_select(0, ctx.heads), c.head_dim, g_l, N, ct);
  at::Tensor y = ssm_scan(in.x, in.dt, in.A, in.B, in.C, in.D, ctx.plan.group).reshape({R, L, d_l}).to(st);

  if (ctx.to_rank_order.defined()) y = y.index_select(1, ctx.to_rank_order);
  nvtx::Range range{ctx.nvtx, "ssm_a2a"};
  at::Tensor out = ctx.comm ? all_to_all_autograd(*ctx.comm, y, 1, 2, {ctx.nvtx, nullptr}) : y;  // [R, S_local, d_inner]
  count_sent(ctx, y, W);
  CP_CHECK(out.size(1) == S_local && out.size(2) == c.d_inner(), "mamba: output ", shape_str(out.sizes()),
           " (rank ", r, ")");
  return out;
}

}  // namespace

at::Tensor mamba_ssm_forward(const at::Tensor& proj, const SsmParams& params, const SsmConfig& c,
                             const SsmStepContext& ctx) {
  const int64_t r = ctx.comm ? ctx.comm->rank() : 0;
  CP_CHECK(proj.dim() == 3 && proj.size(2) == c.in_proj_width(), "mamba: proj ", shape_str(proj.sizes()),
           ", expected [R, S_local, ", c.in_proj_width(), "] (rank ", r, ")");
  if (ctx.strategy == SsmCpStrategy::state_passing) return state_passing_forward(proj, params, c, ctx);
  return hidden_parallel_forward(proj, params, c, ctx);
}

}  // namespace cpbench
