#include "harness/planner/step/moe.hpp"

#include "harness/planner/step/parallel.hpp"

namespace cpbench::plan::step {

namespace {

double matrices(const ModelShape& m) { return m.gated_mlp ? 3.0 : 2.0; }

}  // namespace

MoeParams moe_layer_params(const ModelShape& m) {
  MoeParams p;
  if (m.moe_layers == 0) return p;
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn);
  const double expert = matrices(m) * h * f;
  p.routed = static_cast<double>(m.experts) * expert;
  p.shared = static_cast<double>(m.shared_experts) * expert;
  p.router = h * static_cast<double>(m.experts);
  p.active = static_cast<double>(m.experts_per_token + m.shared_experts) * expert + p.router;
  return p;
}

double moe_activation_per_token(const ModelShape& m, Recompute rc) {
  if (m.moe_layers == 0) return 0;
  const double e = 2, h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn);
  const double k = static_cast<double>(m.experts_per_token + m.shared_experts);
  const double g = m.gated_mlp ? 1.0 : 0.0;
  const double router = 4.0 * static_cast<double>(m.experts);
  switch (rc) {
    case Recompute::none:
      return e * (2 * h + k * (h + (2 + g) * f)) + router;
    case Recompute::selective:
      return e * (h + k * (h + (1 + g) * f)) + router;
    case Recompute::full:
      return 0;
  }
  return 0;
}

Component moe_component(const CaseShape& s) {
  Component c;
  c.name = "moe";
  const double per_token = 2 * moe_layer_params(s.model).active / static_cast<double>(s.par.tp);
  c.flops = s.stage(static_cast<double>(s.model.moe_layers)) * s.microbatches() * s.row_tokens() * per_token *
            s.gemm_passes();
  c.time_s = c.flops / s.gemm_rate();
  return c;
}

Component ep_component(const CaseShape& s) {
  Component c;
  c.name = "comm:ep";
  const int64_t ep = s.par.ep;
  if (s.model.moe_layers == 0 || ep <= 1) return c;
  const double one_way = s.sp_tokens() * static_cast<double>(s.model.experts_per_token) *
                         static_cast<double>(s.model.hidden) * 2.0 * static_cast<double>(ep - 1) /
                         static_cast<double>(ep);
  const double per_layer = (s.forward_passes() + 1) * 2 * one_way;  // dispatch + combine, fwd (+ recompute) + bwd
  c.bytes = s.stage(static_cast<double>(s.model.moe_layers)) * s.microbatches() * per_layer;
  const double messages = s.stage(static_cast<double>(s.model.moe_layers)) * s.microbatches() *
                          (s.forward_passes() + 1) * 2 * static_cast<double>(ep - 1);
  c.time_s = c.bytes / group_bandwidth(s.cluster, span(s.par, Dim::ep)) + messages * s.cluster.latency_s;
  return c;
}

}  // namespace cpbench::plan::step
