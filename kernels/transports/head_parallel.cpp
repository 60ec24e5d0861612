#include "kernels/transports/head_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/comm/autograd.hpp"
#include "kernels/transports/head_parallel_costs.hpp"
#include "kernels/transports/kv_passing_costs.hpp"
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

namespace {

// The bytes a call's Ulysses-group exchanges sent per pass, reported by the observer; MLA calls check
// them, with the ring's formula (which the ring checks its own sends against), against the transport's
// formula at the end of each pass: the forward after its last exchange, the backward at the
// `bwd_exchanges`-th exchange it makes.
struct GroupTally {
  std::string transport;
  int rank = 0;
  bool check = false;
  CallShape call, ring_call;
  int64_t ulysses = 1;
  int fwd_exchanges = 0, bwd_exchanges = 0, seen = 0;
  int64_t sent[2] = {0, 0};

  void add(int64_t bytes) {
    const bool backward = seen >= fwd_exchanges;
    sent[backward ? 1 : 0] += bytes;
    ++seen;
    if (backward && seen == fwd_exchanges + bwd_exchanges) verify(false);
  }
  void verify(bool forward) const {
    if (!check) return;
    const int64_t ring_fwd = kv_passing_forward_bytes(ring_call);
    const int64_t ring = forward ? ring_fwd : ring_bytes(ring_call) - ring_fwd;
    const int64_t fwd = head_parallel_forward_bytes(call, ulysses);
    const int64_t want = forward ? fwd : head_parallel_bytes(call, ulysses) - fwd;
    const int64_t got = sent[forward ? 0 : 1] + ring;
    CP_CHECK(got == want, transport, " (MLA, ", call.latent_wire ? "latent" : "expanded", " wire): rank ", rank,
             " sent ", sent[forward ? 0 : 1], " bytes in its Ulysses group (U = ", ulysses, ") and its ring ", ring,
             " in the ", forward ? "forward" : "backward", ": ", got, "; the formula (head_parallel_costs.cpp) says ",
             want, " (W = ", call.cp, ", B = ", call.batch, ", S = ", call.local_tokens, ", ", call.kv_token_elements,
             " K/V values per token)");
  }
};

}  // namespace

at::Tensor head_parallel_attend(const HeadParallelOptions& o, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const AttentionContext& ctx) {
  AttentionContext base = ctx;
  base.plans = nullptr;  // checked below against the mesh, not against the per-rank layout
  const AttendShape sh = check_attend(o.transport, q, k, v, base);
  const UlyssesMesh mesh = ulysses_mesh(sh.world, sh.rank, o.ulysses);
  const int64_t U = mesh.ulysses, B = sh.batch, S = sh.tokens, D = sh.head_dim, Dv = sh.v_head_dim, H = sh.q_heads;
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
  ish.kv_heads = Hk / U;  // MLA's latent: H / U, the heads it up-projects to
  ish.tokens = U * S;
  ish.world = mesh.ring;
  ish.rank = mesh.group;
  TransportState st = make_state(inner, ish, q.device());
  st.scale = ctx.scale > 0 ? ctx.scale : 1.0 / std::sqrt(static_cast<double>(D));
  st.ring = mesh.ring_ranks();
  st.ring_index = mesh.group;

  // MLA calls check their bytes per pass (GroupTally); the tally lives as long as the observers' copies.
  auto tally = std::make_shared<GroupTally>();
  tally->transport = o.transport;
  tally->rank = sh.rank;
  tally->check = sh.latent || Dv != D;
  tally->call = CallShape{sh.world, B, H, sh.kv_heads, S, D, static_cast<int64_t>(q.element_size())};
  tally->call.kv_token_elements = tally->check ? wire_token_elements(sh) : 0;
  tally->call.v_head_dim = Dv;
  tally->call.latent_wire = sh.latent;
  tally->ring_call = CallShape{mesh.ring, B, H / U, ish.kv_heads, U * S, D, tally->call.element_size};
  tally->ring_call.kv_token_elements = tally->call.kv_token_elements > 0 ? wire_token_elements(ish) : 0;
  tally->ulysses = U;
  const int exchanges = U > 1 ? (sh.latent ? 3 : 2) : 0;  // q (, the latent), the output; or q, k, v and the output
  tally->fwd_exchanges = tally->bwd_exchanges = exchanges;
  comm::AllToAllObserver observer{ctx.nvtx_prefix, {}};
  AttentionStats* stats = ctx.stats;
  observer.done = [stats, tally](int64_t bytes, double seconds) {
    tally->add(bytes);
    if (!stats) return;
    stats->bytes_sent += bytes;
    stats->comm_seconds += seconds;  // blocking: exposed for its whole duration
    stats->transfer_seconds += seconds;
  };
  // CUDA: events on the compute stream, read after the step; the stream waits for the exchange,
  // so the span is exposed communication and the transfer both.
  observer.done_on_device = [stats, tally](int64_t bytes, const comm::DeviceTime& begin, const comm::DeviceTime& end) {
    tally->add(bytes);
    if (!stats) return;
    stats->bytes_sent += bytes;
    stats->device_spans.push_back({AttentionSpan::Kind::wait, "a2a", begin, end});
    stats->device_spans.push_back({AttentionSpan::Kind::transfer, "a2a", begin, end});
  };
  const std::vector<int> group = mesh.group_ranks();
  const at::Tensor& order = inner.plans->gathered_order();
  // Sequence-sharded -> head-sharded: [B, h, S, d] -> [U, B*h/U*S*d] (row u' for group rank u'); the
  // tensors of one exchange travel in one message per peer, each flattened (K's and V's head dims may differ).
  const auto by_destination = [&](const at::Tensor& x, int64_t heads) {
    return x.reshape({B, U, heads / U, S, x.size(3)}).permute({1, 0, 2, 3, 4}).reshape({U, -1});
  };
  // Received [U, n] (row i: group rank i's tokens), columns [offset, offset + B*h/U*S*d) -> [B, h/U, U*S, d]
  // in rank order, then in the order the plans were made for (global order: the diagonal is one causal block).
  const auto from_group = [&](const at::Tensor& got, int64_t offset, int64_t heads, int64_t d) {
    at::Tensor x = got.narrow(1, offset, B * (heads / U) * S * d)
                       .reshape({U, B, heads / U, S, d})
                       .permute({1, 2, 0, 3, 4})
                       .reshape({B, heads / U, U * S, d});
    return order.defined() ? x.index_select(2, order) : x;
  };
  // This rank's heads [u*H/U, (u+1)*H/U): their sinks; their gradient is this slice's partial.
  const at::Tensor sinks = ctx.sinks.defined() ? ctx.sinks.narrow(0, mesh.position * (H / U), H / U) : at::Tensor();
  at::Tensor out;  // [B, H/U, U*S, Dv], planned order
  if (sh.latent) {
    // MLA's latent wire: the latent [B, 1, S, r + dr] is every head's, so it cannot be split by head. q
    // takes the head all-to-all; the latent is all-gathered in the group (its gradient reduce-scattered
    // back in the accumulation dtype: each rank's d latent is the partial of its heads for all U*S tokens)
    // and this rank up-projects the group's tokens with its heads' rows of W_up only. Across groups the
    // ring moves the group's latent (the ring transport's latent wire). Every rank then receives exactly
    // the W-1 other blocks' latents, the least the latent allows (the group's K/V never travel expanded).
    const at::Tensor qh = from_group(comm::all_to_all_autograd(*ctx.comm, by_destination(q, H).contiguous(), group,
                                                               observer), 0, H, D);
    const auto gd = k.element_size() < 4 ? at::kFloat : k.scalar_type();  // grad_element_size's dtype
    const at::Tensor got = comm::group_all_gather_autograd(*ctx.comm, k, group, gd, observer);  // [U, B, 1, S, L]
    at::Tensor lat = got.permute({1, 2, 0, 3, 4}).reshape({B, 1, U * S, sh.latent_dim});
    if (order.defined()) lat = lat.index_select(2, order);
    const int64_t rows = (H / U) * (sh.qk_nope_head_dim + Dv);  // W_up's rows of this rank's heads
    const at::Tensor w = ctx.kv_up.narrow(0, mesh.position * rows, rows);
    out = ring_attention(qh, lat, at::Tensor(), sinks, st, w);
  } else {
    const at::Tensor kr = rep > 1 ? k.repeat_interleave(rep, 1) : k;
    const at::Tensor vr = rep > 1 ? v.repeat_interleave(rep, 1) : v;
    const at::Tensor packed = at::cat({by_destination(q, H), by_destination(kr, Hk), by_destination(vr, Hk)}, 1);
    const at::Tensor got = comm::all_to_all_autograd(*ctx.comm, packed.contiguous(), group, observer);
    const int64_t nq = B * (H / U) * S * D, nk = B * (Hk / U) * S * D;
    out = ring_attention(from_group(got, 0, H, D), from_group(got, nq, Hk, D), from_group(got, nq + nk, Hk, Dv),
                         sinks, st);
  }
  if (order.defined()) out = out.index_select(2, inner.plans->gathered_inverse());  // back to rank order
  // Head-sharded -> sequence-sharded: block i of the message holds group rank i's tokens.
  const at::Tensor back = out.reshape({B, H / U, U, S, Dv}).permute({2, 0, 1, 3, 4}).contiguous();
  const at::Tensor mine = comm::all_to_all_autograd(*ctx.comm, back, group, observer);  // [U, B, H/U, S, Dv]
  tally->verify(/*forward=*/true);
  return mine.permute({1, 0, 2, 3, 4}).reshape({B, H, S, Dv});
}

}  // namespace cpbench::kernels
