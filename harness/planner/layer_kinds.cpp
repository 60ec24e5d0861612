#include "harness/planner/layer_kinds.hpp"

#include <algorithm>
#include <limits>

#include "harness/planner/format.hpp"
#include "harness/planner/mla_wire_price.hpp"
#include "harness/planner/plan.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench::plan {

namespace {

// `r` for `layers` attention layers of one kind alone: no other mixer, no window of its own, no MLA (the
// sub-plan prices plain attention; the MLA kind adds its wires on top).
PlanRequest kind_request(const PlanRequest& r, int64_t layers, const std::string& mask) {
  PlanRequest k = r;
  ModelShape m;
  m.name = r.model.name;
  m.layers = layers;
  m.hidden = r.model.hidden;
  m.heads = r.model.heads;
  m.kv_heads = r.model.kv_heads;
  m.head_dim = r.model.head_dim;
  m.attention.sinks = r.model.attention.sinks;
  m.source = r.model.source;
  k.model = m;
  k.mask = mask;
  k.mixer_strategies.clear();
  k.ssm_strategies.clear();
  return k;
}

// The best-ranked case at W among those `keep` accepts (nullptr when none).
template <class Keep>
const PlanCase* best_at(const Plan& p, int64_t W, Keep keep) {
  const PlanCase* best = nullptr;
  for (const auto& c : p.cases)
    if (c.cp == W && keep(c) && (!best || c.rank < best->rank)) best = &c;
  return best;
}
const PlanCase* best_at(const Plan& p, int64_t W) {
  return best_at(p, W, [](const PlanCase&) { return true; });
}

std::string case_label(const PlanCase& c) { return c.sharder + "/" + c.transport; }

std::vector<KindChoice> plain_kind(const Plan& plan, const std::string& kind, int64_t layers, const std::string& mask,
                                   int64_t window) {
  PlanRequest k = kind_request(plan.request, layers, mask);
  if (window > 0)
    for (const auto& t : window_transports())
      if (std::find(k.transports.begin(), k.transports.end(), t) == k.transports.end()) k.transports.push_back(t);
  const Plan sub = make_plan(k);
  std::vector<KindChoice> out;
  for (int64_t W : plan.request.cps) {
    const PlanCase* b = best_at(sub, W);
    if (!b) continue;
    KindChoice c{kind, layers, mask, W, b->sharder, b->transport, "", b->predicted_step_s, b->bytes_per_rank, ""};
    if (window > 0) {
      // The window against the local chunk: the best window-only transport beside the best full-sequence one.
      const auto only = window_transports();
      const auto windowed = [&](const PlanCase& x) { return std::find(only.begin(), only.end(), x.transport) != only.end(); };
      c.why = "window " + std::to_string(window) + " vs " + std::to_string(b->local_tokens) + " local tokens";
      for (const PlanCase* x : {best_at(sub, W, windowed), best_at(sub, W, [&](const PlanCase& y) { return !windowed(y); })})
        if (x)
          c.why += "; " + case_label(*x) + " " + fmt_time(x->predicted_step_s) + " (compute " + fmt_time(x->compute_s) +
                   ", exposed " + fmt_time(x->exposed_comm_s) + "), " + fmt_bytes(static_cast<double>(x->bytes_per_rank)) +
                   " sent/rank";
    } else {
      for (const auto& cr : sub.recommendation.per_cp)
        if (cr.cp == W) c.why = cr.reason;
    }
    out.push_back(c);
  }
  return out;
}

std::vector<KindChoice> mla_kind(const Plan& plan) {
  const PlanRequest& r = plan.request;
  const MlaDims& d = r.model.attention.mla;
  const int64_t layers = r.model.attention_layers();
  PlanRequest k = kind_request(r, layers, r.mask);
  // MLA's FLOPs per visible pair and head are 2 (dk + dv) = 4 x (dk + dv) / 2: plain attention's at the mean dim.
  k.model.head_dim = (d.qk_head_dim() + d.v_head_dim) / 2;
  k.model.kv_heads = k.model.heads;
  std::vector<std::string> carriers;
  for (const auto& t : r.transports)
    if (!takes_ulysses(t) && make_transport(t)->unsupported_mla(MlaWire::latent).empty() &&
        make_transport(t)->unsupported_mla(MlaWire::expanded).empty())
      carriers.push_back(t);
  std::vector<KindChoice> out;
  if (carriers.empty()) return out;
  k.transports = carriers;
  const Plan sub = make_plan(k);
  const double L = static_cast<double>(layers);
  const bool train = r.pass == Pass::train;
  for (int64_t W : r.cps) {
    KindChoice best;
    best.kind = "mla", best.layers = layers, best.mask = r.mask, best.cp = W;
    best.step_s = std::numeric_limits<double>::infinity();
    for (const auto& c : sub.cases) {
      if (c.cp != W) continue;
      const MlaWirePrice p = price_mla_wires(*make_transport(c.transport), mla_wire_query(r, c, layers));
      for (const MlaWire wire : {MlaWire::expanded, MlaWire::latent}) {
        const CallTime& t = wire == MlaWire::latent ? p.latent : p.expanded;
        const double step = L * (train ? t.step_s : t.forward_s);
        if (step >= best.step_s) continue;
        best.sharder = c.sharder, best.transport = c.transport, best.wire = to_string(wire), best.step_s = step;
        best.bytes_per_rank = static_cast<int64_t>(layers) * (wire == MlaWire::latent ? p.bytes_latent : p.bytes_expanded);
        best.why = case_label(c) + ": " + p.why;
      }
    }
    if (!best.sharder.empty()) out.push_back(best);
  }
  return out;
}

}  // namespace

MlaWireQuery mla_wire_query(const PlanRequest& r, const PlanCase& c, int64_t layers) {
  MlaWireQuery q;
  q.dims = r.model.attention.mla;
  q.heads = r.model.heads;
  q.cp = c.cp;
  q.local_tokens = c.local_tokens;
  q.element_size = dtype_size(r.dtype);
  // One layer's forward compute of the slowest rank (the sub-plan's compute is every layer's, fwd + bwd).
  q.attention_fwd_s = c.compute_s / static_cast<double>(layers) / (r.pass == Pass::train ? kStepFactor : 1.0);
  q.bandwidth = c.cp <= r.cluster.gpus_per_node ? r.cluster.intra_bandwidth : r.cluster.inter_bandwidth;
  q.latency_s = r.cluster.latency_s;
  q.flops_rate = r.cluster.attention_flops;
  q.contention = r.kernel == Kernel::fitted ? r.cluster.kernel.contention : 0.0;  // as make_case's
  return q;
}

std::vector<KindChoice> plan_layer_kinds(const Plan& plan) {
  const ModelShape& m = plan.request.model;
  if (m.attention_layers() == 0) return {};
  if (m.attention.is_mla()) return mla_kind(plan);
  const int64_t sliding = m.sliding_window > 0 ? m.sliding_layers : 0;
  // Every layer sliding (Mistral-7B) is one kind: the plan above already runs its window (unchanged).
  if (sliding == 0 || sliding == m.attention_layers()) return {};
  std::vector<KindChoice> out =
      plain_kind(plan, "sliding_attention", sliding, "sliding_window:" + std::to_string(m.sliding_window), m.sliding_window);
  if (m.attention_layers() > sliding) {
    const auto full = plain_kind(plan, "full_attention", m.attention_layers() - sliding, plan.request.mask, 0);
    out.insert(out.end(), full.begin(), full.end());
  }
  return out;
}

}  // namespace cpbench::plan
