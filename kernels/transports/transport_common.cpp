#include "kernels/transports/transport_common.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>
#include <vector>

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {

// [B, N] -> [B, n, kBlockTile], N padded to n * kBlockTile by repeating the last token (which
// changes no tile's min, max, all or any).
at::Tensor tiled(const at::Tensor& t, int64_t n) {
  const int64_t pad = n * kBlockTile - t.size(1);
  const at::Tensor x = pad > 0 ? at::cat({t, t.narrow(1, t.size(1) - 1, 1).expand({t.size(0), pad})}, 1) : t;
  return x.reshape({t.size(0), n, kBlockTile});
}

bool is_supported_dtype(at::ScalarType t) {
  return t == at::kDouble || t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}
}  // namespace

AttendShape check_attend(const std::string& transport, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const AttentionContext& ctx) {
  CP_CHECK(ctx.comm != nullptr, transport, ": AttentionContext.comm is null");
  AttendShape sh;
  sh.world = ctx.comm->size();
  sh.rank = ctx.comm->rank();
  const auto where = [&] { return detail::concat(" (transport ", transport, ", rank ", sh.rank, ")"); };
  CP_CHECK(q.defined() && k.defined() && v.defined(), "attention inputs must be defined", where());
  CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be [B, H, S, D]; got q ", shape_str(q.sizes()),
           ", k ", shape_str(k.sizes()), ", v ", shape_str(v.sizes()), where());
  CP_CHECK(k.sizes().equals(v.sizes()), "k ", shape_str(k.sizes()), " and v ", shape_str(v.sizes()), " differ",
           where());
  CP_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3), "q ", shape_str(q.sizes()),
           " and k ", shape_str(k.sizes()), " must agree on B, S and D", where());
  CP_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "query heads ", q.size(1),
           " are not a multiple of key/value heads ", k.size(1), where());
  CP_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
           "q, k, v dtypes differ: ", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type(), where());
  CP_CHECK(is_supported_dtype(q.scalar_type()), "dtype ", q.scalar_type(), " is not supported", where());
  CP_CHECK(q.device() == k.device() && q.device() == v.device(), "q, k, v are on different devices", where());
  sh.batch = q.size(0);
  sh.q_heads = q.size(1);
  sh.kv_heads = k.size(1);
  sh.tokens = q.size(2);
  sh.head_dim = q.size(3);
  CP_CHECK(ctx.local.pos.defined() && ctx.local.batch() == sh.batch && ctx.local.tokens() == sh.tokens,
           "ctx.local metadata ", ctx.local.pos.defined() ? shape_str(ctx.local.pos.sizes()) : "(undefined)",
           " must be [B, S] = [", sh.batch, ", ", sh.tokens, "]", where());
  CP_CHECK(ctx.all.pos.defined() && ctx.all.batch() == sh.batch && ctx.all.tokens() == sh.world * sh.tokens,
           "ctx.all metadata ", ctx.all.pos.defined() ? shape_str(ctx.all.pos.sizes()) : "(undefined)",
           " must be [B, W*S] = [", sh.batch, ", ", sh.world * sh.tokens, "] for W = ", sh.world, where());
  if (ctx.plans)
    CP_CHECK(ctx.plans->mask() == ctx.mask && ctx.plans->world() == sh.world && ctx.plans->rank() == sh.rank &&
                 ctx.plans->batch() == sh.batch && ctx.plans->tokens() == sh.tokens,
             "ctx.plans were built for mask ", ctx.plans->mask().to_string(), ", rank ", ctx.plans->rank(), "/",
             ctx.plans->world(), ", [B, S] = [", ctx.plans->batch(), ", ", ctx.plans->tokens(), "]; this call has ",
             ctx.mask.to_string(), ", rank ", sh.rank, "/", sh.world, ", [", sh.batch, ", ", sh.tokens, "]", where());
  if (ctx.mask.kind == MaskSpec::Kind::sliding_window)
    CP_CHECK(ctx.mask.window >= 1, "sliding_window needs a window >= 1, got ", ctx.mask.window, where());
  return sh;
}

TransportState make_state(const AttentionContext& ctx, const AttendShape& shape, const at::Device& device) {
  TransportState st;
  st.comm = *ctx.comm;
  st.mask = ctx.mask;
  st.plans = ctx.plans ? ctx.plans
                       : std::make_shared<const PlanCache>(ctx.mask, ctx.local, ctx.all, shape.rank, shape.world, device);
  st.policy = ctx.tiled_kernels ? KernelPolicy::tiled : KernelPolicy::fused;
  // A zero scale means "the default", 1/sqrt(D).
  st.scale = ctx.scale > 0 ? ctx.scale : 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  st.stats = ctx.stats;
  st.nvtx_prefix = ctx.nvtx_prefix;
  st.shape = shape;
  st.device = device;
  return st;
}

at::ScalarType TransportState::kernel_dtype(const at::Tensor& q) const {
  return kernels::kernel_dtype(q.scalar_type(), q.device(), policy);
}

KernelRoute TransportState::route(int src, const at::Tensor& q_kernel) const {
  return block_route(plan(src), q_kernel.scalar_type(), q_kernel.device(), shape.head_dim, policy);
}

void TransportState::count_route(KernelRoute r) const {
  if (stats) stats->kernel_blocks[to_string(r)] += 1;
}

namespace {
std::atomic<int64_t> g_metadata_plans{0};

bool same_field(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || a.equal(b));
}
bool same_tokens(const TokenMeta& a, const TokenMeta& b) {
  return same_field(a.pos, b.pos) && same_field(a.segment, b.segment) && same_field(a.doc, b.doc) &&
         same_field(a.valid, b.valid);
}

bool row_constant(const at::Tensor& t) {
  return !t.defined() || t.size(1) == 0 || t.eq(t.narrow(1, 0, 1)).all().item<bool>();
}
}  // namespace

bool diagonal_is_causal(const MaskSpec& mask, const TokenMeta& m) {
  if (!mask.has_upper() || mask.has_lower()) return false;
  if (mask.same_document() && !row_constant(m.doc)) return false;
  if (!row_constant(m.segment)) return false;
  if (m.valid.defined() && !m.valid.all().item<bool>()) return false;
  if (m.pos.size(1) < 2) return true;
  return (m.pos.narrow(1, 1, m.pos.size(1) - 1) > m.pos.narrow(1, 0, m.pos.size(1) - 1)).all().item<bool>();
}

PlanCache::PlanCache(const MaskSpec& mask, const TokenMeta& local, const TokenMeta& all, int rank, int world,
                     const at::Device& device)
    : mask_(mask), rank_(rank) {
  CP_CHECK(local.pos.defined() && all.pos.defined() && world >= 1 && all.tokens() == world * local.tokens() &&
               all.batch() == local.batch(),
           "PlanCache: local metadata ", local.pos.defined() ? shape_str(local.pos.sizes()) : "(undefined)",
           " and all ", all.pos.defined() ? shape_str(all.pos.sizes()) : "(undefined)", " do not fit W = ", world);
  batch_ = local.batch();
  tokens_ = local.tokens();
  // Planning runs on the host: metadata on a device is copied once, here, never inside attention.
  const TokenMeta q = local.to(at::kCPU), k_all = all.to(at::kCPU);
  const bool causal_diag = diagonal_is_causal(mask, q);
  for (int src = 0; src < world; ++src) {
    // The diagonal causal block is planned without its mask (O(S^2) bytes that only the tiled
    // fallback would read).
    // Only when the key block's metadata is the queries' own (it should be, for src == rank; a
    // caller's metadata that says otherwise is planned by the rule, not assumed).
    const TokenMeta k = k_all.narrow(1, src * tokens_, tokens_);
    BlockPlan p = src == rank && causal_diag && same_tokens(q, k) ? causal_block_plan(batch_, tokens_)
                                                                  : plan_block(mask, q, k);
    g_metadata_plans.fetch_add(1);
    if (!device.is_cpu()) {
      if (p.rows.defined()) p.rows = p.rows.to(device);
      if (p.cols.defined()) p.cols = p.cols.to(device);
      if (p.mask.defined()) p.mask = p.mask.to(device);
      if (p.cell_masks.defined()) p.cell_masks = p.cell_masks.to(device);
    }
    plans_.push_back(std::move(p));
  }
}

const BlockPlan& PlanCache::plan(int src) const {
  CP_CHECK(src >= 0 && src < world(), "PlanCache: no plan for rank ", src, " (W = ", world(), ")");
  return plans_[static_cast<size_t>(src)];
}

BlockPlan plan_block(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k) {
  CP_CHECK(q.pos.defined() && k.pos.defined() && q.pos.dim() == 2 && k.pos.dim() == 2 && q.pos.size(0) == k.pos.size(0),
           "plan_block: query pos ", q.pos.defined() ? shape_str(q.pos.sizes()) : "(undefined)", " and key pos ",
           k.pos.defined() ? shape_str(k.pos.sizes()) : "(undefined)", " must both be [B, N] with the same B");
  const int64_t b = q.pos.size(0), sq = q.pos.size(1), sk = k.pos.size(1);
  if (b == 0 || sq == 0 || sk == 0) return plan_block(build_mask(mask, q, k));
  const int64_t nq = (sq + kBlockTile - 1) / kBlockTile, nk = (sk + kBlockTile - 1) / kBlockTile;
  const auto Q = [](const at::Tensor& t) { return t.unsqueeze(2); };  // [B, nq] -> [B, nq, 1]
  const auto K = [](const at::Tensor& t) { return t.unsqueeze(1); };  // [B, nk] -> [B, 1, nk]
  const auto bounds = [](const at::Tensor& t, int64_t n) {
    const at::Tensor x = tiled(t, n);
    return std::pair{x.amin(-1), x.amax(-1)};
  };
  // Per batch row and cell: `none` = no pair can be visible, `all` = every pair is. Each clause is one
  // condition of the visibility rule (sharders/mask.hpp) applied to the tiles' bounds.
  at::Tensor none = at::zeros({b, nq, nk}, q.pos.options().dtype(at::kBool));
  at::Tensor all = at::ones({b, nq, nk}, none.options());
  const auto same_value = [&](const at::Tensor& qt, const at::Tensor& kt) {  // segment / doc equality
    const auto [qlo, qhi] = bounds(qt, nq);
    const auto [klo, khi] = bounds(kt, nk);
    none.logical_or_(K(klo) > Q(qhi)).logical_or_(K(khi) < Q(qlo));
    all.logical_and_(Q(qlo) == Q(qhi)).logical_and_(K(klo) == K(khi)).logical_and_(K(klo) == Q(qlo));
  };
  if (q.segment.defined() && k.segment.defined()) same_value(q.segment, k.segment);
  if (k.valid.defined()) {
    const at::Tensor v = tiled(k.valid.to(at::kBool), nk);
    none.logical_or_(K(v.any(-1).logical_not()));
    all.logical_and_(K(v.all(-1)));
  }
  if (mask.has_upper() || mask.has_lower()) {
    const auto [qlo, qhi] = bounds(q.pos, nq);
    const auto [klo, khi] = bounds(k.pos, nk);
    if (mask.has_upper()) {  // pos k <= upper(pos q); upper is monotone in pos q
      none.logical_or_(K(klo) > mask.upper(Q(qhi)));
      all.logical_and_(K(khi) <= mask.upper(Q(qlo)));
    }
    if (mask.has_lower()) {  // pos k >= lower(pos q); lower is monotone in pos q
      none.logical_or_(K(khi) < mask.lower(Q(qlo)));
      all.logical_and_(K(klo) >= mask.lower(Q(qhi)));
    }
  }
  if (mask.same_document() && q.doc.defined() && k.doc.defined()) same_value(q.doc, k.doc);
  // 0 empty, 2 full, 1 undecided: over the batch, a cell is empty / full only if it is in every row.
  const at::Tensor code =
      at::where(none.all(0), 0, at::where(all.all(0), 2, 1)).to(at::kByte).to(at::kCPU).contiguous();
  const uint8_t* c = code.data_ptr<uint8_t>();
  std::vector<BlockKind> kind(static_cast<size_t>(nq * nk));
  std::vector<int64_t> qi, kj;
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t x = c[i * nk + j];
      kind[static_cast<size_t>(i * nk + j)] = x == 0 ? BlockKind::empty : x == 2 ? BlockKind::full : BlockKind::masked;
      if (x == 1) {
        qi.push_back(i);
        kj.push_back(j);
      }
    }
  }
  const auto n_masked = static_cast<int64_t>(qi.size());
  at::Tensor cells = at::empty({0, b, kBlockTile, kBlockTile}, none.options());
  if (n_masked > 0) {
    // Every open cell's mask in one build_mask call: cell c's query tile and key tile become batch
    // rows c*B .. c*B + B-1 of a [n_masked * B, kBlockTile] metadata pair.
    const auto dev = q.pos.device();
    const at::Tensor iq = at::tensor(qi, at::TensorOptions().dtype(at::kLong)).to(dev);
    const at::Tensor ik = at::tensor(kj, at::TensorOptions().dtype(at::kLong)).to(dev);
    const auto cell_meta = [&](const TokenMeta& m, int64_t n, const at::Tensor& idx) {
      const auto g = [&](const at::Tensor& t) {
        return t.defined() ? tiled(t, n).index_select(1, idx).transpose(0, 1).reshape({-1, kBlockTile}) : t;
      };
      return TokenMeta{g(m.pos), g(m.segment), g(m.doc), g(m.valid)};
    };
    cells = build_mask(mask, cell_meta(q, nq, iq), cell_meta(k, nk, ik)).view({n_masked, b, kBlockTile, kBlockTile});
    // Positions past the block's edge (tiled() repeats the last token there) see nothing.
    const auto inside = [&](int64_t len, int64_t n, const at::Tensor& idx) {
      return (at::arange(n * kBlockTile, q.pos.options()) < len).view({n, kBlockTile}).index_select(0, idx);
    };
    cells.logical_and_(inside(sq, nq, iq).view({n_masked, 1, kBlockTile, 1}))
        .logical_and_(inside(sk, nk, ik).view({n_masked, 1, 1, kBlockTile}));
  }
  return plan_from_cells(b, sq, sk, std::move(kind), cells);
}

Wire::Wire(const comm::Communicator& comm, const at::Device& compute_device)
    : device(compute_device), staged(comm.size() > 1 && comm.is_gloo() && !compute_device.is_cpu()) {}

at::Tensor Wire::to_wire(const at::Tensor& t) const { return staged ? t.to(at::kCPU).contiguous() : t.contiguous(); }

at::Tensor Wire::from_wire(const at::Tensor& t) const { return staged ? t.to(device) : t; }

at::TensorOptions Wire::options(at::ScalarType dtype) const {
  return at::TensorOptions().dtype(dtype).device(staged ? at::Device(at::kCPU) : device);
}

Phase::Phase(const TransportState& st, Kind kind, std::string label)
    : stats_(st.stats),
      kind_(kind),
      label_(std::move(label)),
      range_{st.nvtx_prefix, kind == Kind::comm ? "attn_comm" : "attn_compute"},
      start_(std::chrono::steady_clock::now()) {
  if (stats_ && st.device.is_cuda()) {
    device_ = st.device;
    start_dev_ = comm::DeviceTime::now(st.device);
  }
}

Phase::~Phase() {
  if (!stats_) return;
  if (start_dev_.valid()) {  // CUDA: what the compute stream spent, resolved after the step
    stats_->device_spans.push_back({kind_ == Kind::comm ? AttentionSpan::Kind::wait : AttentionSpan::Kind::compute,
                                    label_, start_dev_, comm::DeviceTime::now(device_)});
    return;
  }
  const auto end = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(end - start_).count();
  (kind_ == Kind::comm ? stats_->comm_seconds : stats_->compute_seconds) += s;
  if (stats_->record_spans)
    stats_->spans.push_back(
        {label_, kind_ == Kind::comm ? AttentionSpan::Kind::wait : AttentionSpan::Kind::compute, start_, end});
}

std::string step_label(const char* transport, bool backward, int step) {
  return std::string(transport) + (backward ? "_bwd:" : "_fwd:") + std::to_string(step);
}

InFlight::InFlight(const TransportState& st) {
  if (st.stats && st.device.is_cuda()) posted_dev = comm::DeviceTime::now(st.device);
}

void InFlight::done(const TransportState& st, const std::string& label, bool grad) const {
  if (!st.stats) return;
  if (posted_dev.valid()) {
    st.stats->device_spans.push_back({grad ? AttentionSpan::Kind::transfer_grad : AttentionSpan::Kind::transfer, label,
                                      posted_dev, comm::DeviceTime::now(st.device)});
    return;
  }
  const auto end = std::chrono::steady_clock::now();
  st.stats->transfer_seconds += std::chrono::duration<double>(end - posted).count();
  if (st.stats->record_spans)
    st.stats->spans.push_back(
        {label, grad ? AttentionSpan::Kind::transfer_grad : AttentionSpan::Kind::transfer, posted, end});
}

int64_t kv_block_bytes(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim, int64_t element_size) {
  return 2 * batch * kv_heads * tokens * head_dim * element_size;
}

int64_t grad_element_size(int64_t element_size) { return element_size < 4 ? 4 : element_size; }

std::string common_unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options, int64_t cp) {
  if (cp < 1) return detail::concat("cp must be >= 1, got ", cp);
  if (mask.kind == MaskSpec::Kind::sliding_window && mask.window < 1)
    return detail::concat("sliding_window needs a window >= 1, got ", mask.window);
  const auto dtype = options.dtype().toScalarType();
  if (!is_supported_dtype(dtype))
    return detail::concat("dtype ", dtype, " is not supported (float64, float32, bfloat16, float16)");
  const auto dev = options.device();
  if (!dev.is_cpu() && !dev.is_cuda()) return detail::concat("device ", dev, " is not supported (cpu, cuda)");
  return "";
}

}  // namespace cpbench::kernels

namespace cpbench {

RankPassTimes rank_pass_times(const CallCostInputs& in) {
  const auto check = [&](std::span<const double> v, const char* name) {
    CP_CHECK(v.empty() || v.size() == in.c_fwd.size(), "time_per_call: ", v.size(), " values of ", name, " for ",
             in.c_fwd.size(), " ranks");
  };
  check(in.c_bwd, "c_bwd");
  check(in.merge_fwd, "merge_fwd");
  check(in.merge_bwd, "merge_bwd");
  RankPassTimes t;
  if (in.c_fwd.empty()) {
    t.fwd = {in.c_fwd_max};
    t.bwd = {kBackwardFactor * in.c_fwd_max};
  } else {
    for (size_t r = 0; r < in.c_fwd.size(); ++r) {
      t.fwd.push_back(in.c_fwd[r] + (in.merge_fwd.empty() ? 0.0 : in.merge_fwd[r]));
      t.bwd.push_back((in.c_bwd.empty() ? kBackwardFactor * in.c_fwd[r] : in.c_bwd[r]) +
                      (in.merge_bwd.empty() ? 0.0 : in.merge_bwd[r]));
    }
  }
  for (size_t r = 0; r < t.fwd.size(); ++r) {
    t.fwd_max = std::max(t.fwd_max, t.fwd[r]);
    t.bwd_max = std::max(t.bwd_max, t.bwd[r]);
  }
  return t;
}

std::shared_ptr<const kernels::PlanCache> make_plan_cache(const MaskSpec& mask, const TokenMeta& local,
                                                          const TokenMeta& all, int rank, int world,
                                                          const at::Device& device) {
  return std::make_shared<const kernels::PlanCache>(mask, local, all, rank, world, device);
}

std::shared_ptr<const kernels::PlanCache> Transport::make_plans(const MaskSpec& mask, const TokenMeta& local,
                                                               const TokenMeta& all, int rank, int world,
                                                               const at::Device& device) const {
  return make_plan_cache(mask, local, all, rank, world, device);
}

int64_t metadata_plans_built() { return kernels::g_metadata_plans.load(); }

void resolve_device_times(AttentionStats& stats, const comm::DeviceTime& anchor,
                          std::chrono::steady_clock::time_point anchor_host) {
  const auto at_host = [&](const comm::DeviceTime& t) {
    return anchor_host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(comm::DeviceTime::between(anchor, t)));
  };
  for (const auto& d : stats.device_spans) {
    const double s = comm::DeviceTime::between(d.begin, d.end);
    switch (d.kind) {
      case AttentionSpan::Kind::compute: stats.compute_seconds += s; break;
      case AttentionSpan::Kind::wait: stats.comm_seconds += s; break;
      case AttentionSpan::Kind::transfer:
      case AttentionSpan::Kind::transfer_grad: stats.transfer_seconds += s; break;
    }
    if (stats.record_spans && anchor.valid()) stats.spans.push_back({d.name, d.kind, at_host(d.begin), at_host(d.end)});
  }
  stats.device_spans.clear();
}

}  // namespace cpbench
