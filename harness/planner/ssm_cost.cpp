#include "harness/planner/ssm_cost.hpp"

#include <algorithm>

#include "harness/model/mamba.hpp"
#include "harness/planner/format.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan {

namespace {

SsmCpStrategy strategy_of(const std::string& name) {
  const auto s = parse_ssm_cp_strategy(name);
  CP_CHECK_USAGE(s.has_value(), "--ssm-cp: unknown SSM CP strategy '", name, "' (known: ", join(known_ssm_cp_strategies()),
                 ")");
  return *s;
}

SsmCpShape cp_shape(const ModelShape& m, int64_t batch, int64_t P, int64_t W, int64_t e, int64_t chunks_per_rank) {
  SsmCpShape s;
  s.batch = batch;
  s.seq_len = P;
  s.cp = W;
  s.heads = m.ssm.heads;
  s.head_dim = m.ssm.head_dim;
  s.state = m.ssm.state;
  s.groups = m.ssm.groups;
  s.conv = m.ssm.conv;
  s.elem_bytes = e;
  s.state_elem_bytes = std::max<int64_t>(4, e);  // 16-bit activations scan in float32 (mamba.hpp)
  s.chunks_per_rank = std::max<int64_t>(1, chunks_per_rank);
  return s;
}

// Forward FLOPs of one layer's projections and conv over `tokens` tokens (the same under every strategy).
double projection_flops(const ModelShape& m, double tokens) {
  const auto& c = m.ssm;
  const double d = static_cast<double>(m.hidden);
  return tokens * (2 * d * static_cast<double>(c.in_proj_width()) + 2 * static_cast<double>(c.d_inner()) * d +
                   2 * static_cast<double>(c.conv * c.conv_channels()));
}

double pass_factor(const PlanRequest& r) { return r.pass == Pass::train ? 3.0 : 1.0; }

}  // namespace

std::vector<std::string> planned_ssm_strategies(const std::vector<std::string>& requested) {
  if (requested.empty()) return known_ssm_cp_strategies();
  std::vector<std::string> out;
  for (const auto& n : requested) {
    (void)strategy_of(n);
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

std::string ssm_unsupported(const std::string& strategy, const ModelShape& m, const Layout& layout, int64_t W) {
  if (strategy_of(strategy) == SsmCpStrategy::hidden_parallel)
    return W > 1 ? m.ssm.cp_unsupported_reason(W) : "";
  return state_passing_unsupported_reason(layout, W);
}

int64_t ssm_activation_bytes(const ModelShape& m, SsmCpStrategy strategy, int64_t batch, int64_t P, int64_t W,
                             int64_t e, int64_t chunks_per_rank) {
  const auto& c = m.ssm;
  const int64_t s = P / W;
  const int64_t Q = std::max<int64_t>(1, std::min(m.ssm_chunk, s));
  const int64_t kept = batch * s * (c.in_proj_width() + c.conv_channels() + c.d_inner()) * e +
                       batch * ((s + Q - 1) / Q) * c.heads * c.head_dim * c.state * 4;
  return m.ssm_layers() * (kept + ssm_cp_extra_memory_bytes(strategy, cp_shape(m, batch, P, W, e, chunks_per_rank)));
}

SsmCase ssm_case(const PlanRequest& r, int64_t e, const std::string& name, int64_t W, int64_t P,
                 int64_t chunks_per_rank) {
  const ModelShape& m = r.model;
  const SsmCpStrategy strategy = strategy_of(name);
  const auto& c = m.ssm;
  const double layers = static_cast<double>(m.ssm_layers());
  const int64_t s = P / W;
  const double H = static_cast<double>(c.heads), Ph = static_cast<double>(c.head_dim), N = static_cast<double>(c.state);
  double scan = 0;
  if (strategy == SsmCpStrategy::hidden_parallel) {
    scan = ssm_scan_flops(P, m.ssm_chunk, c.head_dim, c.state) * static_cast<double>(P) * H / static_cast<double>(W);
  } else {
    scan = ssm_scan_flops(s, m.ssm_chunk, c.head_dim, c.state) * static_cast<double>(s) * H;
    if (W > 1) scan += 2 * Ph * N * static_cast<double>(s) * H;
  }
  const double other = projection_flops(m, static_cast<double>(s));
  SsmCase out;
  out.strategy = name;
  out.flops_per_rank = layers * (scan + other);
  out.compute_s = layers * pass_factor(r) * (scan / r.cluster.ssm_flops + other / r.cluster.attention_flops);
  const SsmCpShape shape = cp_shape(m, 1, P, W, e, chunks_per_rank);
  const SsmCpBytes bytes = ssm_cp_bytes(strategy, shape);
  const bool train = r.pass == Pass::train;
  const int64_t sent = train ? bytes.total() : bytes.forward;
  const int64_t calls = bytes.calls_forward + (train ? bytes.calls_backward : 0);
  const double bandwidth = W <= r.cluster.gpus_per_node ? r.cluster.intra_bandwidth : r.cluster.inter_bandwidth;
  out.bytes_per_rank = m.ssm_layers() * sent;
  out.comm_s = W > 1 ? layers * (static_cast<double>(sent) / bandwidth +
                                 static_cast<double>(calls * (W - 1)) * r.cluster.latency_s)
                     : 0.0;
  out.step_s = out.compute_s + out.comm_s;
  out.activation_bytes = ssm_activation_bytes(m, strategy, 1, P, W, e, chunks_per_rank);
  return out;
}

double ssm_unsharded_time(const PlanRequest& r) {
  const ModelShape& m = r.model;
  if (m.ssm_layers() == 0) return 0;
  const auto& c = m.ssm;
  const double S = static_cast<double>(r.seq_len);
  const double scan = ssm_scan_flops(r.seq_len, m.ssm_chunk, c.head_dim, c.state) * S * static_cast<double>(c.heads);
  return static_cast<double>(m.ssm_layers()) * pass_factor(r) *
         (scan / r.cluster.ssm_flops + projection_flops(m, S) / r.cluster.attention_flops);
}

}  // namespace cpbench::plan
