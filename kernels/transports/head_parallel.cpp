#include "kernels/transports/head_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/comm/autograd.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

std::vector<int> UlyssesMesh::group_ranks() const {
  std::vector<int> r;
  for (int u = 0; u < ulysses; ++u) r.push_back(group * ulysses + u);
  return r;
}

std::vector<int> UlyssesMesh::ring_ranks() const {
  std::vector<int> r;
  for (int g = 0; g < ring; ++g) r.push_back(g * ulysses + position);
  return r;
}

UlyssesMesh ulysses_mesh(int world, int rank, int64_t ulysses) {
  CP_CHECK(ulysses >= 1 && world % ulysses == 0, "ulysses degree ", ulysses, " does not divide the CP size ", world);
  UlyssesMesh m;
  m.ulysses = static_cast<int>(ulysses);
  m.ring = world / m.ulysses;
  m.group = rank / m.ulysses;
  m.position = rank % m.ulysses;
  return m;
}

int64_t kv_replication(int64_t kv_heads, int64_t ulysses) {
  return kv_heads >= 1 && ulysses >= 1 ? ulysses / std::gcd(kv_heads, ulysses) : 1;
}

std::string head_split_reason(const std::string& transport, int64_t cp, int64_t ulysses, int64_t q_heads,
                              int64_t kv_heads) {
  if (ulysses < 1 || cp % ulysses != 0)
    return detail::concat(transport, ": ulysses ", ulysses, " does not divide the CP size ", cp);
  if (q_heads % ulysses != 0)
    return detail::concat(transport, ": ", q_heads, " query heads are not divisible by the all-to-all degree ", ulysses,
                          ulysses == cp ? " (the CP size)" : " (ulysses)");
  if (kv_heads < 1 || q_heads % kv_heads != 0)
    return detail::concat(transport, ": ", q_heads, " query heads are not a multiple of ", kv_heads, " kv heads");
  return "";
}

namespace {

// What one rank's mesh position sees of the metadata: with the control, positions are the tokens'
// arrival index (rank order taken for global order: the bug the mask-on-metadata design avoids).
TokenMeta planned_meta(const HeadParallelOptions& o, const TokenMeta& all) {
  if (!o.rank_order_positions) return all;
  TokenMeta m = all;
  m.pos = at::arange(all.tokens(), all.pos.options()).unsqueeze(0).expand({all.batch(), all.tokens()}).contiguous();
  return m;
}

}  // namespace

at::Tensor gathered_global_order(const at::Tensor& global_index, int64_t group_tokens) {
  CP_CHECK(global_index.defined() && global_index.dim() == 1 && global_index.numel() % group_tokens == 0,
           "gathered_global_order: global index ", global_index.defined() ? shape_str(global_index.sizes()) : "(undefined)",
           " does not split into groups of ", group_tokens, " tokens");
  const at::Tensor gi = global_index.to(at::kCPU, at::kLong).view({-1, group_tokens});
  // Stable: equal positions (none in a layout's map) would keep their arrival order.
  return std::get<1>(at::sort(gi, std::optional<bool>(true), /*dim=*/1, /*descending=*/false));
}

std::shared_ptr<const PlanCache> head_parallel_plans(const HeadParallelOptions& o, const MaskSpec& mask,
                                                     const TokenMeta& all, const at::Tensor& global_index, int rank,
                                                     int world, const at::Device& device) {
  const UlyssesMesh mesh = ulysses_mesh(world, rank, o.ulysses);
  CP_CHECK(all.pos.defined() && all.tokens() % world == 0, o.transport, ": ctx.all metadata of ",
           all.pos.defined() ? all.tokens() : 0, " tokens does not split over W = ", world, " ranks (rank ", rank, ")");
  const int64_t group_tokens = all.tokens() / mesh.ring;  // U * S
  TokenMeta m = planned_meta(o, all);
  // Global order inside each Ulysses group (the control keeps rank order: its bug is taking rank
  // order for global order, so it must not be corrected here).
  at::Tensor order;
  if (global_index.defined() && !o.rank_order_positions) {
    CP_CHECK(global_index.numel() == all.tokens(), o.transport, ": global index of ", global_index.numel(),
             " tokens for ctx.all of ", all.tokens(), " (rank ", rank, ")");
    order = gathered_global_order(global_index, group_tokens);  // [R, U*S], arrival index within each group
    // Rank order already global (contiguous layout, W = 1): nothing to reorder, no copy per call.
    if (order.equal(at::arange(group_tokens, order.options()).expand_as(order))) order = at::Tensor();
  }
  if (order.defined()) {
    const at::Tensor base = at::arange(mesh.ring, order.options()).mul_(group_tokens).unsqueeze(1);
    m = m.index_select(1, (order + base).reshape({-1}).to(m.pos.device()));
  }
  auto plans = std::make_shared<PlanCache>(mask, m.narrow(1, mesh.group * group_tokens, group_tokens), m, mesh.group,
                                           mesh.ring, device);
  if (order.defined()) plans->set_gathered_order(order[mesh.group].contiguous(), device);
  return plans;
}

at::Tensor head_parallel_attend(const HeadParallelOptions& o, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const AttentionContext& ctx) {
  AttentionContext base = ctx;
  base.plans = nullptr;  // checked below against the mesh, not against the per-rank layout
  const AttendShape sh = check_attend(o.transport, q, k, v, base);
  const UlyssesMesh mesh = ulysses_mesh(sh.world, sh.rank, o.ulysses);
  const int64_t U = mesh.ulysses, B = sh.batch, S = sh.tokens, D = sh.head_dim, H = sh.q_heads;
  const std::string why = head_split_reason(o.transport, sh.world, U, H, sh.kv_heads);
  CP_CHECK(why.empty(), why, " (rank ", sh.rank, ")");
  const int64_t rep = kv_replication(sh.kv_heads, U), Hk = sh.kv_heads * rep;

  AttentionContext inner = ctx;
  if (ctx.plans) {
    CP_CHECK(ctx.plans->mask() == ctx.mask && ctx.plans->world() == mesh.ring && ctx.plans->rank() == mesh.group &&
                 ctx.plans->batch() == B && ctx.plans->tokens() == U * S,
             o.transport, ": ctx.plans were built for mask ", ctx.plans->mask().to_string(), ", position ",
             ctx.plans->rank(), "/", ctx.plans->world(), ", [B, S] = [", ctx.plans->batch(), ", ",
             ctx.plans->tokens(), "]; this call needs ", ctx.mask.to_string(), ", ring position ", mesh.group, "/",
             mesh.ring, ", [", B, ", ", U * S, "] (build them with this transport's make_plans) (rank ", sh.rank, ")");
  } else {
    inner.plans = head_parallel_plans(o, ctx.mask, ctx.all, ctx.global_index, sh.rank, sh.world, q.device());
  }
  AttendShape ish = sh;
  ish.q_heads = H / U;
  ish.kv_heads = Hk / U;
  ish.tokens = U * S;
  ish.world = mesh.ring;
  ish.rank = mesh.group;
  TransportState st = make_state(inner, ish, q.device());
  st.scale = ctx.scale > 0 ? ctx.scale : 1.0 / std::sqrt(static_cast<double>(D));
  st.ring = mesh.ring_ranks();
  st.ring_index = mesh.group;

  comm::AllToAllObserver observer{ctx.nvtx_prefix, {}};
  if (AttentionStats* stats = ctx.stats) {
    observer.done = [stats](int64_t bytes, double seconds) {
      stats->bytes_sent += bytes;
      stats->comm_seconds += seconds;  // blocking: exposed for its whole duration
      stats->transfer_seconds += seconds;
    };
    // CUDA: events on the compute stream, read after the step; the stream waits for the exchange,
    // so the span is exposed communication and the transfer both.
    observer.done_on_device = [stats](int64_t bytes, const comm::DeviceTime& begin, const comm::DeviceTime& end) {
      stats->bytes_sent += bytes;
      stats->device_spans.push_back({AttentionSpan::Kind::wait, "a2a", begin, end});
      stats->device_spans.push_back({AttentionSpan::Kind::transfer, "a2a", begin, end});
    };
  }
  const std::vector<int> group = mesh.group_ranks();
  // Sequence-sharded -> head-sharded: [B, h, S, D] -> [U, B, h/U, S, D] (block u' for group rank u'),
  // q, k, v in one message per peer.
  const auto by_destination = [&](const at::Tensor& x, int64_t heads) {
    return x.reshape({B, U, heads / U, S, D}).permute({1, 0, 2, 3, 4});
  };
  const at::Tensor kr = rep > 1 ? k.repeat_interleave(rep, 1) : k;
  const at::Tensor vr = rep > 1 ? v.repeat_interleave(rep, 1) : v;
  const at::Tensor packed = at::cat({by_destination(q, H), by_destination(kr, Hk), by_destination(vr, Hk)}, 2).contiguous();
  const at::Tensor received = comm::all_to_all_autograd(*ctx.comm, packed, group, observer);
  // [U, B, h, S, D] (block i: group rank i's tokens) -> [B, h, U*S, D] in rank order, then in the
  // order the plans were made for (global order: the diagonal is one causal block).
  at::Tensor seq = received.permute({1, 2, 0, 3, 4}).reshape({B, (H + 2 * Hk) / U, U * S, D});
  const at::Tensor& order = inner.plans->gathered_order();
  if (order.defined()) seq = seq.index_select(2, order);
  const at::Tensor qh = seq.narrow(1, 0, H / U);
  const at::Tensor kh = seq.narrow(1, H / U, Hk / U);
  const at::Tensor vh = seq.narrow(1, H / U + Hk / U, Hk / U);
  // This rank's heads [u*H/U, (u+1)*H/U): their sinks; their gradient is this slice's partial.
  const at::Tensor sinks = ctx.sinks.defined() ? ctx.sinks.narrow(0, mesh.position * (H / U), H / U) : at::Tensor();
  at::Tensor out = ring_attention(qh, kh, vh, sinks, st);  // [B, H/U, U*S, D], planned order
  if (order.defined()) out = out.index_select(2, inner.plans->gathered_inverse());  // back to rank order
  // Head-sharded -> sequence-sharded: block i of the message holds group rank i's tokens.
  const at::Tensor back = out.reshape({B, H / U, U, S, D}).permute({2, 0, 1, 3, 4}).contiguous();
  const at::Tensor mine = comm::all_to_all_autograd(*ctx.comm, back, group, observer);  // [U, B, H/U, S, D]
  return mine.permute({1, 0, 2, 3, 4}).reshape({B, H, S, D});
}

}  // namespace cpbench::kernels
