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

std::shared_ptr<const PlanCache> head_parallel_plans(const HeadParallelOptions& o, const MaskSpec& mask,
                                                     const TokenMeta& all, int rank, int world,
                                                     const at::Device& device) {
  const UlyssesMesh mesh = ulysses_mesh(world, rank, o.ulysses);
  CP_CHECK(all.pos.defined() && all.tokens() % world == 0, o.transport, ": ctx.all metadata of ",
           all.pos.defined() ? all.tokens() : 0, " tokens does not split over W = ", world, " ranks (rank ", rank, ")");
  const int64_t group_tokens = all.tokens() / mesh.ring;  // U * S
  const TokenMeta m = planned_meta(o, all);
  return std::make_shared<const PlanCache>(mask, m.narrow(1, mesh.group * group_tokens, group_tokens), m, mesh.group,
                                           mesh.ring, device);
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
    inner.plans = head_parallel_plans(o, ctx.mask, ctx.all, sh.rank, sh.world, q.device());
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
  // [U, B, h, S, D] (block i: group rank i's tokens) -> [B, h, U*S, D] in rank order.
  const at::Tensor seq = received.permute({1, 2, 0, 3, 4}).reshape({B, (H + 2 * Hk) / U, U * S, D});
  const at::Tensor qh = seq.narrow(1, 0, H / U);
  const at::Tensor kh = seq.narrow(1, H / U, Hk / U);
  const at::Tensor vh = seq.narrow(1, H / U + Hk / U, Hk / U);
  const at::Tensor out = ring_attention(qh, kh, vh, st);  // [B, H/U, U*S, D]
  // Head-sharded -> sequence-sharded: block i of the message holds group rank i's tokens.
  const at::Tensor back = out.reshape({B, H / U, U, S, D}).permute({2, 0, 1, 3, 4}).contiguous();
  const at::Tensor mine = comm::all_to_all_autograd(*ctx.comm, back, group, observer);  // [U, B, H/U, S, D]
  return mine.permute({1, 0, 2, 3, 4}).reshape({B, H, S, D});
}

int64_t head_parallel_a2a_bytes(const CallShape& c, int64_t ulysses) {
  const int64_t U = ulysses;
  if (U <= 1) return 0;
  const int64_t Hk = c.kv_heads * kv_replication(c.kv_heads, U);
  // q, k, v in plus the output back; each all-to-all keeps 1/U of the message at home.
  return (U - 1) * c.batch * c.local_tokens * c.head_dim * c.element_size * (2 * c.q_heads + 2 * Hk) / U;
}

int64_t head_parallel_bytes(const CallShape& c, int64_t ulysses) {
  const int64_t R = c.cp / ulysses;
  const int64_t Hk = c.kv_heads * kv_replication(c.kv_heads, ulysses);
  const int64_t kv = kv_block_bytes(c.batch, Hk, c.local_tokens, c.head_dim, c.element_size);
  const int64_t dkv = kv_block_bytes(c.batch, Hk, c.local_tokens, c.head_dim, grad_element_size(c.element_size));
  return 2 * head_parallel_a2a_bytes(c, ulysses) + (R - 1) * (2 * kv + dkv);
}

int64_t head_parallel_forward_bytes(const CallShape& c, int64_t ulysses) {
  const int64_t R = c.cp / ulysses;
  const int64_t Hk = c.kv_heads * kv_replication(c.kv_heads, ulysses);
  return head_parallel_a2a_bytes(c, ulysses) + (R - 1) * kv_block_bytes(c.batch, Hk, c.local_tokens, c.head_dim, c.element_size);
}

CallTime head_parallel_time(const CallCostInputs& in, int64_t ulysses) {
  CallTime t;
  const RankPassTimes p = rank_pass_times(in);
  // Compute per rank. A Ulysses group's U ranks share its U*S queries' work evenly over heads: each
  // computes the mean of its members' work. With the whole row's even split (c_even_*: a2a computes
  // exactly that), the most loaded group's mean work over the mean rank's scales it (hybrid with an
  // unbalanced layout); without it, the per-rank times' group means.
  const int64_t U = ulysses;
  double f = p.fwd_max, b = p.bwd_max;
  if (in.c_even_fwd > 0) {
    double factor = 1;
    if (U < in.cp && static_cast<int64_t>(in.rank_work.size()) == in.cp) {
      double group = 0, total = 0;
      for (int64_t g = 0; g < in.cp / U; ++g) {
        double sum = 0;
        for (int64_t u = 0; u < U; ++u) sum += in.rank_work[static_cast<size_t>(g * U + u)];
        group = std::max(group, sum / static_cast<double>(U));
        total += sum;
      }
      if (total > 0) factor = group / (total / static_cast<double>(in.cp));
    }
    f = in.c_even_fwd * factor;
    b = (in.c_even_bwd > 0 ? in.c_even_bwd : kBackwardFactor * in.c_even_fwd) * factor;
  } else if (static_cast<int64_t>(p.fwd.size()) == in.cp) {
    f = b = 0;
    for (int64_t g = 0; g < in.cp / U; ++g) {
      double gf = 0, gb = 0;
      for (int64_t u = 0; u < U; ++u) {
        gf += p.fwd[static_cast<size_t>(g * U + u)];
        gb += p.bwd[static_cast<size_t>(g * U + u)];
      }
      f = std::max(f, gf / static_cast<double>(U));
      b = std::max(b, gb / static_cast<double>(U));
    }
  }
  t.forward_s = f;
  t.step_s = f + b;
  if (in.cp <= 1) return t;
  const int64_t R = in.cp / ulysses;
  const double a = in.latency_s, Bw = in.bandwidth;
  // The all-to-alls block the compute (nothing overlaps them): two per pass, U-1 messages each.
  const double a2a_bytes = in.call.head_dim > 0 ? static_cast<double>(head_parallel_a2a_bytes(in.call, U))
                           : R == 1             ? in.fwd_bytes
                                                : 0.0;
  CP_CHECK(R == 1 || in.call.head_dim > 0, "hybrid time_per_call: the call's shape (CallCostInputs::call) is needed "
           "to split the bytes between the all-to-alls and the ring");
  const double Bg = in.group_bandwidth > 0 ? in.group_bandwidth : Bw;
  const double t_a2a = U > 1 ? 2.0 * static_cast<double>(U - 1) * a + a2a_bytes / Bg : 0.0;
  double ring_f = 0, ring_b = 0, ring_transfer = 0;
  if (R > 1) {  // the ring transport's formula over R positions, each step one R-th of the compute
    const double hops = static_cast<double>(R - 1);
    const double x_f = (in.fwd_bytes - a2a_bytes) / hops / Bw, x_b = (in.bwd_bytes - a2a_bytes) / hops / Bw;
    ring_f = hops * std::max(in.contention * x_f, a + x_f - f / static_cast<double>(R));
    ring_b = hops * std::max(in.contention * x_b, a + x_b - b / static_cast<double>(R));
    ring_transfer = hops * (2 * a + x_f + x_b);
  }
  t.forward_exposed_s = t_a2a + ring_f;
  t.forward_s = f + t.forward_exposed_s;
  t.exposed_s = 2 * t_a2a + ring_f + ring_b;
  t.step_s = f + b + t.exposed_s;
  t.transfer_s = 2 * t_a2a + ring_transfer;
  return t;
}

int64_t head_parallel_peak_activation_bytes(const ActivationShape& a, int64_t ulysses) {
  if (a.cp <= 1) return 0;
  const int64_t U = ulysses, R = a.cp / ulysses;
  const int64_t Hk = a.kv_heads * kv_replication(a.kv_heads, U);
  const int64_t Hq = a.q_heads > 0 ? a.q_heads : a.kv_heads;
  const int64_t tok = a.batch * a.local_tokens * a.head_dim;  // elements per head
  const int64_t ge = grad_element_size(a.element_size);
  const int64_t kv = kv_block_bytes(a.batch, Hk, a.local_tokens, a.head_dim, a.element_size);
  const int64_t dkv = kv_block_bytes(a.batch, Hk, a.local_tokens, a.head_dim, ge);
  if (U <= 1) return 2 * kv + 2 * dkv;  // the plain ring
  // Kept per layer for the backward, in the head-sharded layout (a second copy of what the planner
  // counts in the sequence-sharded one): q, the replicated k and v, the output (compute dtype) and
  // the fp32 log-sum-exp.
  const int64_t per_layer = tok * (Hq + 2 * Hk) * a.element_size + tok * Hq * ge + 4 * a.batch * a.local_tokens * Hq;
  // In flight at the peak: the packed all-to-all message and its receive buffer, plus the ring's buffers.
  const int64_t transient = 2 * tok * (Hq + 2 * Hk) * a.element_size + (R > 1 ? 2 * kv + 2 * dkv : 0);
  return a.layers * per_layer + transient;
}

}  // namespace cpbench::kernels
