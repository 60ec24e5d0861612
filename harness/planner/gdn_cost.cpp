#include "harness/planner/gdn_cost.hpp"

#include <algorithm>

#include "harness/model/gdn.hpp"
#include "harness/model/ssm_cp_costs.hpp"
#include "harness/planner/format.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan {

namespace {

GdnCpStrategy gdn_strategy_of(const std::string& name) {
  const auto s = parse_gdn_cp_strategy(name);
  CP_CHECK_USAGE(s.has_value(), "--gdn-cp: unknown GDN CP strategy '", name, "' (known: ",
                 join(known_gdn_cp_strategies()), ")");
  return *s;
}

GdnCpShape gdn_shape(const ModelShape& m, int64_t batch, int64_t P, int64_t W, int64_t e, int64_t chunks_per_rank) {
  GdnCpShape s;
  s.batch = batch;
  s.seq_len = P;
  s.cp = W;
  s.key_heads = m.gdn.key_heads;
  s.value_heads = m.gdn.value_heads;
  s.key_head_dim = m.gdn.key_head_dim;
  s.value_head_dim = m.gdn.value_head_dim;
  s.conv = m.gdn.conv;
  s.elem_bytes = e;
  s.state_elem_bytes = std::max<int64_t>(4, e);  // 16-bit activations run the delta rule in float32
  s.chunks_per_rank = std::max<int64_t>(1, chunks_per_rank);
  return s;
}

double gdn_projection_flops(const ModelShape& m, double tokens) {
  const auto& c = m.gdn;
  const double d = static_cast<double>(m.hidden);
  return tokens * (2 * d * static_cast<double>(c.in_proj_width()) + 2 * static_cast<double>(c.value_dim()) * d +
                   2 * static_cast<double>(c.conv * c.conv_channels()));
}

// Forward FLOPs of the delta rule on one rank, one layer.
double gdn_delta_flops(const ModelShape& m, GdnCpStrategy strategy, int64_t W, int64_t P, int64_t chunks_per_rank) {
  const auto& c = m.gdn;
  const double Hv = static_cast<double>(c.value_heads), dk = static_cast<double>(c.key_head_dim),
               dv = static_cast<double>(c.value_head_dim);
  if (strategy == GdnCpStrategy::head_parallel)
    return gdn_scan_flops(P, c.chunk, c.key_head_dim, c.value_head_dim) * static_cast<double>(P) * Hv /
           static_cast<double>(W);
  const int64_t s = P / W;
  if (W == 1) return gdn_scan_flops(s, c.chunk, c.key_head_dim, c.value_head_dim) * static_cast<double>(s) * Hv;
  return gdn_scan_flops(s, c.chunk, c.key_head_dim, c.value_head_dim + c.key_head_dim) * static_cast<double>(s) * Hv +
         2 * dk * dv * static_cast<double>(s) * Hv +
         static_cast<double>(W * std::max<int64_t>(1, chunks_per_rank)) * 2 * dk * dk * dv * Hv;
}

double gdn_pass_factor(const PlanRequest& r) { return r.pass == Pass::train ? 3.0 : 1.0; }

}  // namespace

std::vector<std::string> planned_gdn_strategies(const std::vector<std::string>& requested) {
  if (requested.empty()) return known_gdn_cp_strategies();
  std::vector<std::string> out;
  for (const auto& n : requested) {
    (void)gdn_strategy_of(n);
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

std::string gdn_unsupported(const std::string& strategy, const ModelShape& m, const Layout& layout, int64_t W) {
  if (gdn_strategy_of(strategy) == GdnCpStrategy::head_parallel) return W > 1 ? m.gdn.cp_unsupported_reason(W) : "";
  std::string why = state_passing_unsupported_reason(layout, W);
  if (why.rfind("ssm_cp ", 0) == 0) why = "gdn_cp " + why.substr(7);
  return why;
}

int64_t gdn_activation_bytes(const ModelShape& m, GdnCpStrategy strategy, int64_t batch, int64_t P, int64_t W,
                             int64_t e, int64_t chunks_per_rank) {
  const auto& c = m.gdn;
  const int64_t s = P / W;
  const int64_t Q = std::max<int64_t>(1, std::min(c.chunk, s));
  const int64_t kept = batch * s * (c.in_proj_width() + c.conv_channels() + c.value_dim()) * e +
                       batch * s * c.value_heads * Q * 3 * 4 +
                       batch * ((s + Q - 1) / Q) * c.value_heads * c.key_head_dim * c.value_head_dim * 4;
  return m.gdn_layers() * (kept + gdn_cp_extra_memory_bytes(strategy, gdn_shape(m, batch, P, W, e, chunks_per_rank)));
}

SsmCase gdn_case(const PlanRequest& r, int64_t e, const std::string& name, int64_t W, int64_t P,
                 int64_t chunks_per_rank) {
  const ModelShape& m = r.model;
  const GdnCpStrategy strategy = gdn_strategy_of(name);
  const double layers = static_cast<double>(m.gdn_layers());
  const double delta = gdn_delta_flops(m, strategy, W, P, chunks_per_rank);
  const double other = gdn_projection_flops(m, static_cast<double>(P / W));
  SsmCase out;
  out.mixer = "GDN";
  out.strategy = name;
  out.flops_per_rank = layers * (delta + other);
  out.compute_s = layers * gdn_pass_factor(r) * (delta / r.cluster.ssm_flops + other / r.cluster.attention_flops);
  const GdnCpBytes bytes = gdn_cp_bytes(strategy, gdn_shape(m, 1, P, W, e, chunks_per_rank));
  const bool train = r.pass == Pass::train;
  const int64_t sent = train ? bytes.total() : bytes.forward;
  const int64_t calls = bytes.calls_forward + (train ? bytes.calls_backward : 0);
  const double bandwidth = W <= r.cluster.gpus_per_node ? r.cluster.intra_bandwidth : r.cluster.inter_bandwidth;
  out.bytes_per_rank = m.gdn_layers() * sent;
  out.comm_s = W > 1 ? layers * (static_cast<double>(sent) / bandwidth +
                                 static_cast<double>(calls * (W - 1)) * r.cluster.latency_s)
                     : 0.0;
  out.step_s = out.compute_s + out.comm_s;
  out.activation_bytes = gdn_activation_bytes(m, strategy, 1, P, W, e, chunks_per_rank);
  return out;
}

double gdn_unsharded_time(const PlanRequest& r) {
  const ModelShape& m = r.model;
  if (m.gdn_layers() == 0) return 0;
  const double delta = gdn_delta_flops(m, GdnCpStrategy::head_parallel, 1, r.seq_len, 1);
  return static_cast<double>(m.gdn_layers()) * gdn_pass_factor(r) *
         (delta / r.cluster.ssm_flops + gdn_projection_flops(m, static_cast<double>(r.seq_len)) / r.cluster.attention_flops);
}

}  // namespace cpbench::plan
