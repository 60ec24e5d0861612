#include "harness/planner/step/collectives.hpp"

#include "harness/planner/step/parallel.hpp"

namespace cpbench::plan::step {

namespace {

double ring(double bytes, int64_t g) { return g > 1 ? bytes * static_cast<double>(g - 1) / static_cast<double>(g) : 0.0; }

}  // namespace

Component shard_component(const CaseShape& s, const GpuParams& p) {
  Component c;
  c.name = s.par.zero == 3 ? "comm:fsdp" : "comm:dp";
  const int64_t n = s.par.shard_group();
  const int64_t ne = std::max<int64_t>(1, n / s.par.ep);
  const auto both = [&](double bytes_per_param) { return ring(p.dense * bytes_per_param, n) + ring(p.expert * bytes_per_param, ne); };
  const double m = s.microbatches();
  const double g = s.k.grad_reduce_bytes;
  double messages = 0;
  switch (s.par.zero) {
    case 3:
      c.bytes = m * (2 * both(2.0) + both(g));
      messages = m * 3;
      break;
    case 2:
      c.bytes = m * both(g) + both(2.0);
      messages = m + 1;
      break;
    case 1:
      c.bytes = both(g) + both(2.0);
      messages = 2;
      break;
    default:
      c.bytes = 2 * both(g);
      messages = 2;
  }
  // One collective per layer and call: latency x (n - 1) hops each.
  const double layers = s.stage(static_cast<double>(s.model.layers));
  c.time_s = c.bytes / group_bandwidth(s.cluster, span(s.par, Dim::dp)) +
             (n > 1 ? messages * layers * static_cast<double>(n - 1) * s.cluster.latency_s : 0.0);
  return c;
}

Component tp_component(const CaseShape& s) {
  Component c;
  c.name = "comm:tp";
  const int64_t tp = s.par.tp;
  if (tp <= 1) return c;
  const double X = s.row_tokens() * static_cast<double>(s.model.hidden) * 2.0;
  const double blocks = static_cast<double>(s.model.layers + s.model.mlp_layers);  // mixer + MLP sub-blocks
  const double per_pass = s.stage(blocks) * 2 * ring(X, tp);
  const double passes = s.forward_passes() + 1;
  c.bytes = s.microbatches() * passes * per_pass;
  c.time_s = c.bytes / group_bandwidth(s.cluster, span(s.par, Dim::tp)) +
             s.microbatches() * passes * s.stage(blocks) * 2 * static_cast<double>(tp - 1) * s.cluster.latency_s;
  return c;
}

Component pp_component(const CaseShape& s) {
  Component c;
  c.name = "comm:pp";
  if (s.par.pp <= 1) return c;
  const double X = s.sp_tokens() * static_cast<double>(s.model.hidden) * 2.0;
  const double sends = s.microbatches() * static_cast<double>(s.par.vp) * 2;  // activations + their gradients
  c.bytes = sends * X;
  // Neighbouring stages are tp x cp x dp ranks apart: one node only when the whole job is.
  c.time_s = c.bytes / group_bandwidth(s.cluster, span(s.par, Dim::pp)) + sends * s.cluster.latency_s;
  return c;
}

}  // namespace cpbench::plan::step
