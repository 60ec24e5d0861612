#include "harness/planner/mla_wire_price.hpp"

#include <algorithm>
#include <cstdio>

#include "sharders/core/check.hpp"

namespace cpbench::plan {

MlaWirePrice price_mla_wires(const Transport& transport, const MlaWireQuery& q) {
  CP_CHECK(q.bandwidth > 0 && q.flops_rate > 0 && q.heads > 0 && q.local_tokens > 0 && q.cp >= 1,
           "price_mla_wires: bandwidth ", q.bandwidth, ", flops rate ", q.flops_rate, ", heads ", q.heads,
           ", local tokens ", q.local_tokens, ", cp ", q.cp, " must be positive");
  CP_CHECK(q.contention >= 0, "price_mla_wires: contention ", q.contention, " must be >= 0");
  MlaWirePrice p;
  const auto time_of = [&](MlaWire wire, double extra_fwd_s, double extra_bwd_s, int64_t& bytes) {
    CallShape call{q.cp, q.batch, q.heads, q.heads, q.local_tokens, q.dims.qk_head_dim(), q.element_size};
    call.kv_token_elements = mla_wire_elements_per_token(q.dims, q.heads, wire);
    call.v_head_dim = q.dims.v_head_dim;  // the head-parallel transports' q / output all-to-alls
    call.latent_wire = wire == MlaWire::latent;
    bytes = transport.bytes_per_call(call);
    const int64_t fwd = transport.forward_bytes_per_call(call);
    CallCostInputs in;
    in.cp = q.cp;
    in.c_fwd_max = q.attention_fwd_s + extra_fwd_s;
    // The up-projection is per-block compute like the attention's, forward and backward: it overlaps the
    // transfers the same way (the ring's next block, or its gradient, moves while it runs).
    const double c_fwd[1] = {in.c_fwd_max};
    const double c_bwd[1] = {kBackwardFactor * q.attention_fwd_s + extra_bwd_s};
    in.c_fwd = c_fwd;
    in.c_bwd = c_bwd;
    in.fwd_bytes = static_cast<double>(fwd);
    in.bwd_bytes = static_cast<double>(bytes - fwd);
    in.bandwidth = q.bandwidth;
    in.latency_s = q.latency_s;
    in.contention = q.contention;  // the same ring/allgather formula as the plan's cases, not one without it
    in.call = call;
    return transport.time_per_call(in);
  };
  const double tokens = static_cast<double>(q.batch * q.local_tokens);
  const double u = mla_up_projection_flops(q.dims, q.heads, tokens);  // one pass over the local tokens
  // The key blocks a call up-projects: W (allgather, ring), W/U of U*S tokens for H/U heads (a2a: 1,
  // hybrid: the ring's W/U), each u FLOPs. One block is expanded once with autograd (fwd u, bwd 2u, as
  // the expanded wire's layer); more are up-projected per block, fwd K u, bwd 3 K u (recomputed).
  const double K = static_cast<double>(q.cp / std::max<int64_t>(1, transport.head_parallel_degree(q.cp)));
  p.up_flops_extra = K > 1 ? (4 * K - 3) * u : 0.0;
  // Expanded: the layer's own up-projection (fwd u, bwd 2u) is the same work as a single rank's.
  p.expanded = time_of(MlaWire::expanded, u / q.flops_rate, 2 * u / q.flops_rate, p.bytes_expanded);
  p.latent = time_of(MlaWire::latent, K * u / q.flops_rate, (K > 1 ? 3 * K : 2.0) * u / q.flops_rate, p.bytes_latent);
  p.latent_wins = p.latent.step_s < p.expanded.step_s;
  char line[320];
  std::snprintf(line, sizeof line,
                "%s: latent %.3g ms vs expanded %.3g ms per call (%.1fx fewer bytes, %.3g vs %.3g MB; the "
                "up-projection adds %.3g ms)",
                p.latent_wins ? "latent wire wins" : "expanded wire wins", 1e3 * p.latent.step_s,
                1e3 * p.expanded.step_s,
                p.bytes_latent > 0 ? static_cast<double>(p.bytes_expanded) / static_cast<double>(p.bytes_latent) : 0.0,
                static_cast<double>(p.bytes_latent) / 1e6, static_cast<double>(p.bytes_expanded) / 1e6,
                1e3 * p.up_flops_extra / q.flops_rate);
  p.why = line;
  return p;
}

}  // namespace cpbench::plan
