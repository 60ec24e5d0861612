#include "harness/planner/step/step.hpp"

#include <algorithm>

#include "harness/planner/mixer_cost.hpp"
#include "harness/planner/step/collectives.hpp"
#include "harness/planner/step/embedding.hpp"
#include "harness/planner/step/memory.hpp"
#include "harness/planner/step/mlp.hpp"
#include "harness/planner/step/moe.hpp"
#include "harness/planner/step/optimizer.hpp"
#include "harness/planner/step/params.hpp"
#include "kernels/mixers/mixer.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench::plan::step {

double StepCase::component_s(const std::string& name) const {
  for (const auto& c : components)
    if (c.name == name) return c.time_s;
  return 0;
}

double model_flops_per_token(const PlanRequest& r, const std::vector<LayerKind>& kinds) {
  const ModelShape& m = r.model;
  const ModelParams p = model_params(m);
  double f = 6 * (p.active - p.embedding);
  for (const auto& k : kinds) {
    const double L = static_cast<double>(k.layers);
    if (k.mixer == kDefaultMixer) {
      f += 3 * L * attention_core_flops_per_token(m, r.seq_len, k.mask);
    } else if (const Mixer* x = planned_mixer(m)) {
      LayerCostQuery q;
      q.hidden = m.hidden, q.rows = 1, q.seq_len = r.seq_len, q.cp = 1, q.elem_bytes = 2, q.chunks_per_rank = 1;
      f += 3 * L * x->layer_cost(m, x->strategies().front(), q).recurrence_flops / static_cast<double>(r.seq_len);
    }
  }
  return f;
}

StepCase price_case(const ModelShape& model, const Cluster& cluster, int64_t seq_len, const CaseInputs& in) {
  CaseShape s{model, cluster, in.parallel, in.training, seq_len};
  const StepConstants& k = s.k;
  const auto& kinds = *in.kinds;
  const auto& prices = *in.prices;
  StepCase c;
  c.parallel = in.parallel;
  c.training = in.training;
  c.global_batch = in.global_batch;
  c.sharder = in.sharder;
  const bool full = in.training.recompute == Recompute::full;
  const double rows = s.microbatches() * static_cast<double>(in.training.micro_batch);  // rows per step
  double compute = 0, moe_compute = 0;
  Component cp{"comm:cp"};
  for (size_t i = 0; i < kinds.size(); ++i) {
    const LayerKind& kind = kinds[i];
    const KindPrice& p = prices[i];
    const double L = s.stage(static_cast<double>(kind.layers));
    const bool attention = kind.mixer == kDefaultMixer;
    Component comp{(attention ? "attention:" : "mixer:") + kind.kind};
    comp.time_s = L * rows * (p.compute_s + (full ? p.fwd_compute_s : 0.0));
    comp.flops = L * rows * p.fwd_flops * ((attention ? kStepFactor : 3.0) + (full ? 1.0 : 0.0));
    if (attention) {
      const double proj = L * s.microbatches() * s.row_tokens() * 2 * attention_layer_params(model) /
                          static_cast<double>(in.parallel.tp) * s.gemm_passes();
      comp.flops += proj;
      comp.time_s += proj / s.gemm_rate();
    }
    compute += comp.time_s;
    cp.time_s += L * rows * (p.step_s - p.compute_s);
    cp.bytes += L * rows * p.bytes;
    c.components.push_back(comp);
    c.kinds.push_back({kind.kind, kind.layers, kind.mask, p.label, p.wire, L * rows * p.step_s});
  }
  for (const Component& x : {mlp_component(s), moe_component(s), head_component(s)}) {
    if (x.flops <= 0 && x.time_s <= 0) continue;
    compute += x.time_s;
    if (x.name == "moe") moe_compute = x.time_s;
    c.components.push_back(x);
  }
  const GpuParams gp = gpu_params(s);
  c.components.push_back(cp);
  const auto comm = [&](Component x, double overlap, double window) {
    const double t = x.time_s;
    x.time_s = exposed(t, overlap, window);
    x.hidden_s = t - x.time_s;
    return x;
  };
  const Component tp = comm(tp_component(s), k.tp_overlap, compute);
  const Component ep = comm(ep_component(s), k.ep_overlap, moe_compute);
  const double backward_of_one = compute / s.microbatches() * 2.0 / s.gemm_passes();
  const Component shard = comm(shard_component(s, gp), in.parallel.zero == 3 ? k.fsdp_overlap : k.dp_overlap,
                               in.parallel.zero == 3 ? compute : backward_of_one);
  const Component pp = comm(pp_component(s), k.pp_overlap, compute);
  for (const Component& x : {tp, ep, shard, pp})
    if (x.bytes > 0) c.components.push_back(x);
  Component bubble{"bubble"};
  if (in.parallel.pp > 1)
    bubble.time_s = static_cast<double>(in.parallel.pp - 1) /
                    (static_cast<double>(in.parallel.vp) * s.microbatches()) * (compute + cp.time_s + tp.time_s + ep.time_s);
  if (bubble.time_s > 0) c.components.push_back(bubble);
  double gpu_s = 0;
  for (const auto& x : c.components) gpu_s += x.time_s;
  Component opt = optimizer_component(s, gp);
  if (in.training.offload == Offload::optimizer) {
    const double host = opt.time_s;
    opt.hidden_s = k.offload_overlap * std::min(host, gpu_s);
    opt.time_s = host - opt.hidden_s;
  }
  c.components.push_back(opt);
  for (const auto& x : c.components) c.step_s += x.time_s;
  const double tokens = static_cast<double>(in.global_batch) * static_cast<double>(seq_len);
  c.tokens_per_s_per_gpu = tokens / (static_cast<double>(in.parallel.gpus()) * c.step_s);
  c.model_tflops_per_gpu = in.model_flops_per_token * c.tokens_per_s_per_gpu / 1e12;
  c.mfu = cluster.bf16_flops > 0 ? c.model_tflops_per_gpu * 1e12 / cluster.bf16_flops : 0.0;
  c.memory = gpu_memory(s, gp, kinds, prices);
  c.memory_budget = in.memory_budget;
  c.fits_memory = c.memory.total() <= in.memory_budget;
  return c;
}

}  // namespace cpbench::plan::step
