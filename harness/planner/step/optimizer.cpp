#include "harness/planner/step/optimizer.hpp"

#include <algorithm>

namespace cpbench::plan::step {

double optimizer_params(const CaseShape& s, const GpuParams& p) {
  if (s.par.zero < 1) return p.total();
  const double n = static_cast<double>(s.par.shard_group());
  const double ne = std::max(1.0, n / static_cast<double>(s.par.ep));
  return p.dense / n + p.expert / ne;
}

int64_t gpus_per_host(const CaseShape& s) {
  const int64_t per_host = s.cluster.gpus_per_node > 8 ? 4 : s.cluster.gpus_per_node;
  return std::min<int64_t>(per_host, s.par.gpus());
}

Component optimizer_component(const CaseShape& s, const GpuParams& p) {
  Component c;
  c.name = "optimizer";
  const double P = optimizer_params(s, p);
  c.flops = 0;
  if (s.train.offload == Offload::optimizer) {
    c.bytes = P * (s.microbatches() * s.k.offload_grad_bytes_per_param + s.k.offload_param_bytes_per_param);
    const double host = s.cluster.host_bandwidth > 0 ? s.cluster.host_bandwidth : 25e9;
    c.time_s = static_cast<double>(gpus_per_host(s)) * P * (s.microbatches() + 1) / s.k.host_params_per_s + c.bytes / host;
  } else {
    c.bytes = P * s.k.adam_hbm_bytes_per_param;
    c.time_s = c.bytes / s.hbm();
  }
  return c;
}

}  // namespace cpbench::plan::step
