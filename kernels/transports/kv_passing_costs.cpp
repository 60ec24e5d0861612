#include "kernels/transports/kv_passing_costs.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {
// A call's time before communication: the slowest rank's forward, and forward + backward.
CallTime compute_only(const RankPassTimes& p) {
  CallTime t;
  t.forward_s = p.fwd_max;
  t.step_s = p.fwd_max + p.bwd_max;
  return t;
}
}  // namespace

int64_t kv_block_bytes(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim, int64_t element_size) {
  return 2 * batch * kv_heads * tokens * head_dim * element_size;
}

int64_t grad_element_size(int64_t element_size) { return element_size < 4 ? 4 : element_size; }

KvBlocks kv_blocks(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim, int64_t element_size) {
  return {kv_block_bytes(batch, kv_heads, tokens, head_dim, element_size),
          kv_block_bytes(batch, kv_heads, tokens, head_dim, grad_element_size(element_size))};
}

KvBlocks kv_blocks(const CallShape& c) {
  if (c.kv_token_elements <= 0) return kv_blocks(c.batch, c.kv_heads, c.local_tokens, c.head_dim, c.element_size);
  const int64_t values = c.batch * c.local_tokens * c.kv_token_elements;
  return {values * c.element_size, values * grad_element_size(c.element_size)};
}

int64_t kv_passing_forward_bytes(const CallShape& c) { return (c.cp - 1) * kv_blocks(c).kv; }

int64_t allgather_bytes(const CallShape& c) {
  const auto [kv, dkv] = kv_blocks(c);
  return (c.cp - 1) * (kv + dkv);
}

CallTime allgather_time(const CallCostInputs& in) {
  const RankPassTimes p = rank_pass_times(in);
  CallTime t = compute_only(p);
  if (in.cp <= 1) return t;
  CP_CHECK(in.c_local.empty() || in.c_local.size() == in.c_fwd.size(), "allgather time_per_call: ", in.c_local.size(),
           " local-block times for ", in.c_fwd.size(), " ranks");
  const double hops = static_cast<double>(in.cp - 1), a = in.latency_s, B = in.bandwidth;
  const double t_ag = hops * a + in.fwd_bytes / B, t_rs = hops * a + in.bwd_bytes / B;
  double worst = 0, worst_f = 0;
  for (size_t r = 0; r < p.fwd.size(); ++r) {
    const double c = in.c_fwd.empty() ? in.c_fwd_max : in.c_fwd[r];
    const double local = in.c_local.empty() ? c / static_cast<double>(in.cp) : in.c_local[r];
    const double fwd = std::max(t_ag, local + in.contention * t_ag) + (p.fwd[r] - local);
    worst_f = std::max(worst_f, fwd);
    worst = std::max(worst, fwd + p.bwd[r]);
  }
  t.forward_s = worst_f;
  t.forward_exposed_s = worst_f - p.fwd_max;
  t.step_s = worst + t_rs;
  t.exposed_s = t.step_s - (p.fwd_max + p.bwd_max);
  t.transfer_s = t_ag + t_rs;
  return t;
}

int64_t allgather_peak_activation_bytes(const ActivationShape& a) {
  if (a.cp <= 1) return 0;
  const auto [kv, dkv] = kv_blocks(a.batch, a.kv_heads, a.local_tokens, a.head_dim, a.element_size);
  return a.layers * (a.cp - 1) * kv + a.cp * dkv;
}

int64_t ring_bytes(const CallShape& c) {
  const auto [kv, dkv] = kv_blocks(c);
  return (c.cp - 1) * (2 * kv + dkv);
}

CallTime ring_time(const CallCostInputs& in) {
  const RankPassTimes p = rank_pass_times(in);
  CallTime t = compute_only(p);
  if (in.cp <= 1) return t;
  const RingExposure e = ring_exposure(in, in.cp, in.fwd_bytes, in.bwd_bytes, p.fwd_max, p.bwd_max);
  t.forward_exposed_s = e.forward;
  t.exposed_s = e.forward + e.backward;
  t.transfer_s = e.transfer;
  t.forward_s += t.forward_exposed_s;
  t.step_s += t.exposed_s;
  return t;
}

int64_t windowed_ring_forward_bytes(const CallShape& c) {
  return c.halo_sent * kv_block_bytes(c.batch, c.kv_heads, 1, c.head_dim, c.element_size);
}

int64_t windowed_ring_bytes(const CallShape& c) {
  const auto [kvt, dkvt] = kv_blocks(c.batch, c.kv_heads, 1, c.head_dim, c.element_size);
  return c.halo_sent * kvt + c.halo_received * dkvt;
}

CallTime windowed_ring_time(const CallCostInputs& in) {
  const RankPassTimes p = rank_pass_times(in);
  CallTime t = compute_only(p);
  if (in.cp <= 1) return t;
  const double steps = static_cast<double>(in.call.halo_steps > 0 ? in.call.halo_steps : in.cp - 1);
  const double a = in.latency_s, B = in.bandwidth;
  const double t_f = steps * a + in.fwd_bytes / B, t_b = steps * a + in.bwd_bytes / B;
  double worst = 0, worst_f = 0;
  for (size_t r = 0; r < p.fwd.size(); ++r) {
    const double c = in.c_fwd.empty() ? in.c_fwd_max : in.c_fwd[r];
    const double local = in.c_local.empty() ? c / static_cast<double>(in.cp) : in.c_local[r];
    const double local_b = kBackwardFactor * local;
    const double fwd = std::max(t_f, local + in.contention * t_f) + (p.fwd[r] - local);
    const double bwd = std::max(t_b, local_b + in.contention * t_b) + std::max(0.0, p.bwd[r] - local_b);
    worst_f = std::max(worst_f, fwd);
    worst = std::max(worst, fwd + bwd);
  }
  t.forward_s = worst_f;
  t.forward_exposed_s = worst_f - p.fwd_max;
  t.step_s = worst;
  t.exposed_s = t.step_s - (p.fwd_max + p.bwd_max);
  t.transfer_s = t_f + t_b;
  return t;
}

int64_t windowed_ring_peak_activation_bytes(const ActivationShape& a) {
  if (a.cp <= 1) return 0;
  const auto [kv, dkv] = kv_blocks(a.batch, a.kv_heads, a.local_tokens, a.head_dim, a.element_size);
  const auto [kvt, dkvt] = kv_blocks(a.batch, a.kv_heads, 1, a.head_dim, a.element_size);
  return a.layers * a.halo_received * kvt + kv + dkv + (a.halo_sent + a.halo_received) * dkvt;
}

RingExposure ring_exposure(const CallCostInputs& in, int64_t positions, double fwd_bytes, double bwd_bytes, double f,
                           double b) {
  RingExposure e;
  if (positions <= 1) return e;
  const double hops = static_cast<double>(positions - 1), a = in.latency_s, B = in.bandwidth;
  const double x_f = fwd_bytes / hops / B, x_b = bwd_bytes / hops / B;
  const double n = static_cast<double>(positions);
  e.forward = hops * std::max(in.contention * x_f, a + x_f - f / n);
  e.backward = hops * std::max(in.contention * x_b, a + x_b - b / n);
  e.transfer = hops * (2 * a + x_f + x_b);
  return e;
}

int64_t ring_peak_activation_bytes(const ActivationShape& a) {
  if (a.cp <= 1) return 0;
  const auto [kv, dkv] = kv_blocks(a.batch, a.kv_heads, a.local_tokens, a.head_dim, a.element_size);
  return 2 * kv + 2 * dkv;
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

}  // namespace cpbench
