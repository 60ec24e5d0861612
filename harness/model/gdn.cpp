#include "harness/model/gdn.hpp"

#include <cmath>
#include <vector>

#include "harness/model/gdn_state_passing.hpp"
#include "harness/model/ssm_state_passing.hpp"
#include "kernels/comm/autograd.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {

void GdnConfig::validate() const {
  CP_CHECK_USAGE(key_heads >= 1, "model.gdn.key_heads: expected a positive integer, got ", key_heads);
  CP_CHECK_USAGE(value_heads >= 1 && value_heads % key_heads == 0, "model.gdn.value_heads: ", value_heads,
                 " must be a positive multiple of model.gdn.key_heads ", key_heads,
                 " (value heads share key heads in groups)");
  CP_CHECK_USAGE(key_head_dim >= 1, "model.gdn.key_head_dim: expected a positive integer, got ", key_head_dim);
  CP_CHECK_USAGE(value_head_dim >= 1, "model.gdn.value_head_dim: expected a positive integer, got ", value_head_dim);
  CP_CHECK_USAGE(conv >= 1, "model.gdn.conv: expected a positive integer, got ", conv);
  CP_CHECK_USAGE(chunk >= 1, "model.gdn.chunk: expected a positive integer, got ", chunk);
}

std::string GdnConfig::cp_unsupported_reason(int64_t cp) const {
  if (value_heads % cp != 0)
    return detail::concat("model.gdn.value_heads ", value_heads, " is not divisible by cp ", cp,
                          " (head-parallel CP gives every rank value_heads/cp heads)");
  if (key_heads < cp ? cp % key_heads != 0 : key_heads % cp != 0)
    return detail::concat("model.gdn.key_heads ", key_heads, " and cp ", cp,
                          ": one must divide the other (key heads are split over, or replicated across, the ranks; "
                          "a split inside a key head would cut its dk contraction)");
  return "";
}

namespace {

// Channels of `proj` ([q | k | v | z | b | a]) that rank r of W runs: its key heads' q and k, its value
// heads' v, b and a. With `conv_coords`, the same channels of conv1d ([q | k | v]) without b and a.
std::vector<int64_t> gdn_rank_channels(const GdnConfig& c, int64_t W, int64_t r, bool conv_coords) {
  const int64_t Hk = c.key_heads, Hv = c.value_heads, dk = c.key_head_dim, dv = c.value_head_dim;
  const int64_t hk = Hk >= W ? Hk / W : 1, k0 = Hk >= W ? r * hk : r / (W / Hk);
  const int64_t hv = Hv / W, v0 = r * hv;
  std::vector<int64_t> idx;
  const auto range = [&](int64_t start, int64_t n) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(start + i);
  };
  range(k0 * dk, hk * dk);                          // q
  range(c.key_dim() + k0 * dk, hk * dk);            // k
  range(2 * c.key_dim() + v0 * dv, hv * dv);        // v
  if (conv_coords) return idx;
  const int64_t ba = c.conv_channels() + c.value_dim();  // after z
  range(ba + v0, hv);                                // b
  range(ba + Hv + v0, hv);                           // a
  return idx;
}

void set_gdn_head_indices(GdnStepContext& ctx, const GdnConfig& c, int64_t W, int64_t r,
                               const at::Device& device) {
  std::vector<int64_t> send;
  for (int64_t q = 0; q < W; ++q) {
    const auto ch = gdn_rank_channels(c, W, q, false);
    send.insert(send.end(), ch.begin(), ch.end());
  }
  std::vector<int64_t> heads;
  for (int64_t i = 0; i < c.value_heads / W; ++i) heads.push_back(r * (c.value_heads / W) + i);
  ctx.send_channels = ssm_host_tensor(send, device);
  ctx.conv_channels = ssm_host_tensor(gdn_rank_channels(c, W, r, true), device);
  ctx.value_heads = ssm_host_tensor(heads, device);
}

GdnCpShape gdn_layer_shape(const GdnConfig& c, int64_t rows, int64_t seq_len, int64_t cp, at::ScalarType dtype) {
  GdnCpShape s;
  s.batch = rows;
  s.seq_len = seq_len;
  s.cp = cp;
  s.key_heads = c.key_heads;
  s.value_heads = c.value_heads;
  s.key_head_dim = c.key_head_dim;
  s.value_head_dim = c.value_head_dim;
  s.conv = c.conv;
  s.elem_bytes = static_cast<int64_t>(c10::elementSize(dtype));
  s.state_elem_bytes = (dtype == at::kBFloat16 || dtype == at::kHalf) ? 4 : s.elem_bytes;
  return s;
}

at::ScalarType gdn_compute_dtype(at::ScalarType st) {
  return (st == at::kBFloat16 || st == at::kHalf) ? at::kFloat : st;
}

at::Tensor gdn_l2_normalize(const at::Tensor& x) { return x * at::rsqrt((x * x).sum(-1, true) + 1e-6); }

}  // namespace

GdnStepContext single_rank_gdn_context(const TokenMeta& meta, const MaskSpec& mask, const GdnConfig& config,
                                       at::ScalarType dtype, const at::Device& device) {
  GdnStepContext ctx;
  ctx.chunk = config.chunk;
  ctx.plan = make_ssm_plan(meta, mask.same_document(), config.conv, dtype, device);
  set_gdn_head_indices(ctx, config, 1, 0, device);
  ctx.shape = gdn_layer_shape(config, meta.batch(), meta.tokens(), 1, dtype);
  return ctx;
}

GdnStepContext cp_gdn_context(const comm::Communicator& comm, const GlobalLayout& g, const TokenMeta& all_meta,
                              const MaskSpec& mask, const GdnConfig& config, at::ScalarType dtype,
                              const at::Device& device, std::string nvtx, const GdnCpOptions& options) {
  GdnStepContext ctx;
  ctx.comm = &comm;
  ctx.nvtx = std::move(nvtx);
  ctx.strategy = options.strategy;
  ctx.chunk = config.chunk;
  CP_CHECK(all_meta.tokens() == g.padded_seq_len && g.cp == comm.size(), "gdn: gathered metadata has ",
           all_meta.tokens(), " tokens per row for a ", g.layout, " stream of ", g.padded_seq_len, " over cp ", g.cp,
           ", the communicator has ", comm.size(), " ranks");
  ctx.shape = gdn_layer_shape(config, all_meta.batch(), g.padded_seq_len, comm.size(), dtype);
  if (options.strategy == GdnCpStrategy::state_passing) {
    auto sp = make_state_passing_plan(g, all_meta, mask.same_document(), config.conv, comm.rank(), dtype, device,
                                      options.drop_incoming_state);
    ctx.plan = sp->local;
    ctx.shape.chunks_per_rank = sp->slots;
    ctx.drop_incoming_state = options.drop_incoming_state;
    ctx.state_passing = std::move(sp);
    return ctx;
  }
  const std::string why = config.cp_unsupported_reason(comm.size());
  CP_CHECK(why.empty(), "gdn: ", why, " (rank ", comm.rank(), ")");
  set_gdn_head_indices(ctx, config, comm.size(), comm.rank(), device);
  std::vector<int64_t> rank_order;
  rank_order.reserve(static_cast<size_t>(g.padded_seq_len));
  for (const auto& r : g.ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
  ctx.to_rank_order = ssm_host_tensor(rank_order, device);
  ctx.to_global = ssm_host_tensor(g.inverse(), device);
  const TokenMeta scan_meta = all_meta.index_select(1, ctx.to_global.to(all_meta.pos.device()));
  ctx.plan = make_ssm_plan(scan_meta, mask.same_document(), config.conv, dtype, device);
  return ctx;
}

GdnScanInputs gdn_scan_inputs(const at::Tensor& taps, const at::Tensor& ba, const at::Tensor& valid,
                              const at::Tensor& conv_w, const at::Tensor& dt_bias, const at::Tensor& A_log, int64_t hk,
                              int64_t hv, int64_t dk, int64_t dv, at::ScalarType ct) {
  const int64_t R = taps.size(0), L = taps.size(1), kd = hk * dk;
  CP_CHECK(taps.dim() == 4 && taps.size(3) == 2 * kd + hv * dv && ba.size(2) == 2 * hv && hv % hk == 0,
           "gdn: taps ", shape_str(taps.sizes()), " and [b | a] ", shape_str(ba.sizes()), " for ", hk, " key heads x ",
           dk, " and ", hv, " value heads x ", dv);
  const at::Tensor x = at::silu((taps.to(ct) * conv_w.to(ct).t().unsqueeze(0).unsqueeze(0)).sum(2));
  GdnScanInputs in;
  // Value head i reads key head i / (hv / hk): each key head's q and k repeated for its value heads.
  const int64_t per_key = hv / hk;
  in.q = (gdn_l2_normalize(x.narrow(2, 0, kd).reshape({R, L, hk, dk})) / std::sqrt(static_cast<double>(dk)))
             .repeat_interleave(per_key, 2);
  in.k = gdn_l2_normalize(x.narrow(2, kd, kd).reshape({R, L, hk, dk})).repeat_interleave(per_key, 2);
  in.v = x.narrow(2, 2 * kd, hv * dv).reshape({R, L, hv, dv});
  // Pad slots get g = beta = 0: the state passes them unchanged.
  const at::Tensor keep = valid.to(ct).unsqueeze(-1);
  in.beta = at::sigmoid(ba.narrow(2, 0, hv).to(ct)) * keep;
  in.g = -at::exp(A_log.to(ct)) * at::softplus(ba.narrow(2, hv, hv).to(ct) + dt_bias.to(ct)) * keep;
  return in;
}

at::Tensor gdn_gated_norm(const at::Tensor& o, const at::Tensor& z, const at::Tensor& norm_w, const GdnConfig& c) {
  const int64_t R = o.size(0), L = o.size(1), Hv = c.value_heads, dv = c.value_head_dim;
  CP_CHECK(o.dim() == 3 && o.size(2) == Hv * dv && z.sizes() == o.sizes(), "gdn: gated norm of o ",
           shape_str(o.sizes()), " with z ", shape_str(z.sizes()), ", expected [R, L, ", Hv * dv, "]");
  const at::ScalarType ct = gdn_compute_dtype(o.scalar_type());
  const at::Tensor h = o.to(ct).view({R, L, Hv, dv});
  const at::Tensor y = h * at::rsqrt(h.pow(2).mean(-1, true) + 1e-6) * norm_w.to(ct) *
                       at::silu(z.to(ct).view({R, L, Hv, dv}));
  return y.reshape({R, L, Hv * dv}).to(o.scalar_type());
}

namespace {

void count_gdn_a2a(const GdnStepContext& ctx, const at::Tensor& exchanged, int64_t W) {
  if (ctx.bytes_sent && W > 1) *ctx.bytes_sent += 2 * static_cast<int64_t>(exchanged.nbytes()) / W * (W - 1);
}

// Head-parallel (and one rank): the whole stream for this rank's heads.
at::Tensor head_parallel_forward(const at::Tensor& proj, const GdnParams& params, const GdnConfig& c,
                                 const GdnStepContext& ctx) {
  const int64_t W = ctx.comm ? ctx.comm->size() : 1, r = ctx.comm ? ctx.comm->rank() : 0;
  const std::string why = c.cp_unsupported_reason(W);
  CP_CHECK(why.empty(), "gdn: ", why, " (rank ", r, ")");
  CP_CHECK(ctx.send_channels.defined(), "gdn: the step's context has no head-parallel index tensors (rank ", r, ")");
  const int64_t R = proj.size(0), S_local = proj.size(1);
  const int64_t hk = c.key_heads >= W ? c.key_heads / W : 1, hv = c.value_heads / W;
  const int64_t dk = c.key_head_dim, dv = c.value_head_dim, K = c.conv;

  at::Tensor mine;  // [R, W * S_local, channels], rank order
  {
    nvtx::Range range{ctx.nvtx, "gdn_a2a"};
    const at::Tensor blocks = proj.index_select(2, ctx.send_channels);
    mine = ctx.comm ? all_to_all_autograd(*ctx.comm, blocks, 2, 1, {ctx.nvtx, nullptr}) : blocks;
    count_gdn_a2a(ctx, blocks, W);
  }
  if (ctx.to_global.defined()) mine = mine.index_select(1, ctx.to_global);
  const int64_t L = mine.size(1);
  CP_CHECK(ctx.plan.rows == R && ctx.plan.length == L, "gdn: the plan covers [", ctx.plan.rows, ", ",
           ctx.plan.length, "], the gathered stream is [", R, ", ", L, "] (rank ", r, ")");

  const at::ScalarType st = proj.scalar_type(), ct = gdn_compute_dtype(st);
  const int64_t cc = 2 * hk * dk + hv * dv;
  const at::Tensor xs = mine.narrow(2, 0, cc).to(ct);
  const at::Tensor padded = at::cat({xs, at::zeros({R, 1, cc}, xs.options())}, 1).reshape({R * (L + 1), cc});
  const at::Tensor taps = padded.index_select(0, ctx.plan.conv_src).view({R, L, K, cc});
  const GdnScanInputs in = gdn_scan_inputs(taps, mine.narrow(2, cc, 2 * hv), ctx.plan.valid,
                                           params.conv_w.index_select(0, ctx.conv_channels),
                                           params.dt_bias.index_select(0, ctx.value_heads),
                                           params.A_log.index_select(0, ctx.value_heads), hk, hv, dk, dv, ct);
  at::Tensor o = gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, ctx.plan.group, ctx.chunk).o;
  o = o.reshape({R, L, hv * dv}).to(st);

  if (ctx.to_rank_order.defined()) o = o.index_select(1, ctx.to_rank_order);
  nvtx::Range range{ctx.nvtx, "gdn_a2a"};
  at::Tensor out = ctx.comm ? all_to_all_autograd(*ctx.comm, o, 1, 2, {ctx.nvtx, nullptr}) : o;  // [R, S_local, Hv*dv]
  count_gdn_a2a(ctx, o, W);
  CP_CHECK(out.size(1) == S_local && out.size(2) == c.value_dim(), "gdn: output ", shape_str(out.sizes()), " (rank ",
           r, ")");
  return out;
}

}  // namespace

at::Tensor gdn_forward(const at::Tensor& proj, const GdnParams& params, const GdnConfig& c,
                       const GdnStepContext& ctx) {
  const int64_t r = ctx.comm ? ctx.comm->rank() : 0;
  CP_CHECK(proj.dim() == 3 && proj.size(2) == c.in_proj_width(), "gdn: proj ", shape_str(proj.sizes()),
           ", expected [R, S_local, ", c.in_proj_width(), "] (rank ", r, ")");
  if (ctx.strategy == GdnCpStrategy::state_passing) return gdn_state_passing_forward(proj, params, c, ctx);
  return head_parallel_forward(proj, params, c, ctx);
}

}  // namespace cpbench
