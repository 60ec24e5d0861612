#include "kernels/transports/head_parallel_costs.hpp"

#include <algorithm>

#include "kernels/transports/head_parallel.hpp"
#include "kernels/transports/kv_passing_costs.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

int64_t head_parallel_group_bytes(const CallShape& c, int64_t ulysses, bool forward) {
  const int64_t U = ulysses;
  if (U <= 1) return 0;
  const int64_t rep = kv_replication(c.kv_heads, U);
  const int64_t Dv = c.v_head_dim > 0 ? c.v_head_dim : c.head_dim, T = c.batch * c.local_tokens;
  // The head all-to-alls, each keeping 1/U of its message at home: q in and the output back (the
  // backward: the output's gradient in, dq back), plus K and V split by head unless the latent travels.
  const int64_t kv = c.latent_wire ? 0 : (c.kv_token_elements > 0 ? c.kv_token_elements : c.kv_heads * (c.head_dim + Dv));
  const int64_t a2a = (U - 1) * T * c.element_size * (c.q_heads * (c.head_dim + Dv) + rep * kv) / U;
  if (!c.latent_wire) return a2a;
  // MLA's latent, one per token for every head: all-gathered inside the group (U - 1 copies of this
  // rank's S tokens), its gradient reduce-scattered back in the accumulation dtype.
  const int64_t e = forward ? c.element_size : grad_element_size(c.element_size);
  return a2a + (U - 1) * T * c.kv_token_elements * e;
}

CallShape head_parallel_ring_call(const CallShape& c, int64_t ulysses) {
  const int64_t U = ulysses, Hk = c.kv_heads * kv_replication(c.kv_heads, U);
  CallShape r = c;
  r.cp = c.cp / U;
  r.q_heads = c.q_heads / U;
  r.kv_heads = c.latent_wire ? r.q_heads : Hk / U;
  r.local_tokens = U * c.local_tokens;
  // The ring moves this rank's head slice of the group's U*S tokens: the latent whole, or Hk/U heads' K/V.
  if (c.kv_token_elements > 0 && !c.latent_wire) r.kv_token_elements = c.kv_token_elements * (Hk / c.kv_heads) / U;
  return r;
}

int64_t head_parallel_bytes(const CallShape& c, int64_t ulysses) {
  return head_parallel_group_bytes(c, ulysses, true) + head_parallel_group_bytes(c, ulysses, false) +
         ring_bytes(head_parallel_ring_call(c, ulysses));
}

int64_t head_parallel_forward_bytes(const CallShape& c, int64_t ulysses) {
  return head_parallel_group_bytes(c, ulysses, true) + kv_passing_forward_bytes(head_parallel_ring_call(c, ulysses));
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
  const bool shaped = in.call.head_dim > 0;
  const double group_f = shaped ? static_cast<double>(head_parallel_group_bytes(in.call, U, true))
                         : R == 1 ? in.fwd_bytes
                                  : 0.0;
  const double group_b = shaped ? static_cast<double>(head_parallel_group_bytes(in.call, U, false))
                         : R == 1 ? in.fwd_bytes
                                  : 0.0;
  CP_CHECK(R == 1 || shaped,
           "hybrid time_per_call: the call's shape (CallCostInputs::call) is needed "
           "to split the bytes between the all-to-alls and the ring");
  const double Bg = in.group_bandwidth > 0 ? in.group_bandwidth : Bw;
  // Two exchanges per pass (q, k, v in; the output back), three with MLA's latent (q, the latent, the output).
  const double exchanges = in.call.latent_wire ? 3.0 : 2.0;
  const double lat = U > 1 ? exchanges * static_cast<double>(U - 1) * a : 0.0;
  const double t_a2a_f = U > 1 ? lat + group_f / Bg : 0.0, t_a2a_b = U > 1 ? lat + group_b / Bg : 0.0;
  // The ring transport's formula over R positions, each step one R-th of the compute.
  const RingExposure ring = ring_exposure(in, R, in.fwd_bytes - group_f, in.bwd_bytes - group_b, f, b);
  t.forward_exposed_s = t_a2a_f + ring.forward;
  t.forward_s = f + t.forward_exposed_s;
  t.exposed_s = t_a2a_f + t_a2a_b + ring.forward + ring.backward;
  t.step_s = f + b + t.exposed_s;
  t.transfer_s = t_a2a_f + t_a2a_b + ring.transfer;
  return t;
}

int64_t head_parallel_peak_activation_bytes(const ActivationShape& a, int64_t ulysses) {
  if (a.cp <= 1) return 0;
  const int64_t U = ulysses, R = a.cp / ulysses;
  const int64_t Hk = a.kv_heads * kv_replication(a.kv_heads, U);
  const int64_t Hq = a.q_heads > 0 ? a.q_heads : a.kv_heads;
  const int64_t tok = a.batch * a.local_tokens * a.head_dim;  // elements per head
  const int64_t ge = grad_element_size(a.element_size);
  const auto [kv, dkv] = kv_blocks(a.batch, Hk, a.local_tokens, a.head_dim, a.element_size);
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
