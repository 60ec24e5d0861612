#include "harness/planner/step/mlp.hpp"

namespace cpbench::plan::step {

double dense_mlp_layers(const ModelShape& m) { return static_cast<double>(m.mlp_layers - m.moe_layers); }

double dense_mlp_width(const ModelShape& m) {
  if (m.moe_layers > 0) return static_cast<double>(m.ffn * (m.experts_per_token + m.shared_experts));
  return static_cast<double>(m.ffn);
}

double mlp_layer_params(const ModelShape& m) {
  return (m.gated_mlp ? 3.0 : 2.0) * static_cast<double>(m.hidden) * dense_mlp_width(m);
}

double mlp_activation_per_token(const ModelShape& m, Recompute rc) {
  const double e = 2, h = static_cast<double>(m.hidden), f = dense_mlp_width(m);
  const double g = m.gated_mlp ? 1.0 : 0.0;  // the gate's own output
  switch (rc) {
    case Recompute::none:
      return e * (2 * h + (2 + g) * f);
    case Recompute::selective:
      return e * (h + (1 + g) * f);
    case Recompute::full:
      return 0;
  }
  return 0;
}

Component mlp_component(const CaseShape& s) {
  Component c;
  c.name = "mlp";
  const double per_token = 2 * mlp_layer_params(s.model) / static_cast<double>(s.par.tp);
  c.flops = s.stage(dense_mlp_layers(s.model)) * s.microbatches() * s.row_tokens() * per_token * s.gemm_passes();
  c.time_s = c.flops / s.gemm_rate();
  return c;
}

}  // namespace cpbench::plan::step
