#include "kernels/transports/head_parallel_costs.hpp"

#include <algorithm>

#include "kernels/transports/head_parallel.hpp"
#include "kernels/transports/kv_passing_costs.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

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
  const auto [kv, dkv] = kv_blocks(c.batch, Hk, c.local_tokens, c.head_dim, c.element_size);
  return 2 * head_parallel_a2a_bytes(c, ulysses) + (R - 1) * (2 * kv + dkv);
}

int64_t head_parallel_forward_bytes(const CallShape& c, int64_t ulysses) {
  const int64_t R = c.cp / ulysses;
  const int64_t Hk = c.kv_heads * kv_replication(c.kv_heads, ulysses);
  return head_parallel_a2a_bytes(c, ulysses) +
         (R - 1) * kv_block_bytes(c.batch, Hk, c.local_tokens, c.head_dim, c.element_size);
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
  CP_CHECK(R == 1 || in.call.head_dim > 0,
           "hybrid time_per_call: the call's shape (CallCostInputs::call) is needed "
           "to split the bytes between the all-to-alls and the ring");
  const double Bg = in.group_bandwidth > 0 ? in.group_bandwidth : Bw;
  const double t_a2a = U > 1 ? 2.0 * static_cast<double>(U - 1) * a + a2a_bytes / Bg : 0.0;
  // The ring transport's formula over R positions, each step one R-th of the compute.
  const RingExposure ring = ring_exposure(in, R, in.fwd_bytes - a2a_bytes, in.bwd_bytes - a2a_bytes, f, b);
  t.forward_exposed_s = t_a2a + ring.forward;
  t.forward_s = f + t.forward_exposed_s;
  t.exposed_s = 2 * t_a2a + ring.forward + ring.backward;
  t.step_s = f + b + t.exposed_s;
  t.transfer_s = 2 * t_a2a + ring.transfer;
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
