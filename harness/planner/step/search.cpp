#include "harness/planner/step/search.hpp"

#include <algorithm>

#include "harness/planner/format.hpp"
#include "harness/planner/mixer_cost.hpp"
#include "harness/planner/step/attention.hpp"
#include "harness/planner/step/params.hpp"
#include "harness/planner/step/parallel.hpp"
#include "harness/planner/step/step.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan::step {

namespace {

std::vector<std::string> features_of(const PlanRequest& r) {
  const ModelShape& m = r.model;
  std::vector<std::string> f;
  if (m.attention.is_mla())
    f.push_back("MLA on " + std::to_string(m.attention_layers()) + " layers (kv_lora_rank " +
                std::to_string(m.attention.mla.kv_lora_rank) + ", wire chosen per case)");
  if (m.sliding_window > 0)
    f.push_back("sliding window " + std::to_string(m.sliding_window) + " on " + std::to_string(m.sliding_layers) + " of " +
                std::to_string(m.attention_layers()) + " attention layers");
  if (m.attention.sinks) f.push_back("attention sinks");
  if (m.moe_layers > 0)
    f.push_back(std::to_string(m.moe_layers) + " MoE layers: " + std::to_string(m.experts) + " experts, top-" +
                std::to_string(m.experts_per_token) +
                (m.shared_experts > 0 ? " + " + std::to_string(m.shared_experts) + " shared" : std::string()));
  if (const Mixer* x = planned_mixer(m))
    f.push_back(std::to_string(m.layers_of(x->letter())) + " " + x->label() + " layers");
  if (m.tied_embeddings) f.push_back("tied embeddings");
  return f;
}

}  // namespace

StepPlan make_step_plan(const StepRequest& request) {
  StepPlan plan;
  plan.request = request;
  StepRequest& r = plan.request;
  const Cluster& cl = r.attention.cluster;
  CP_CHECK_USAGE(cl.bf16_flops > 0, "--gpus: cluster '", cl.name,
                 "' has no GEMM peak (a --cluster preset gives one; flags alone price attention only)");
  CP_CHECK_USAGE(r.precision != Precision::fp8 || cl.fp8_flops > 0, "--precision fp8: cluster '", cl.name,
                 "' has no FP8 tensor cores");
  CP_CHECK_USAGE(r.attention.seq_len >= 1, "--seq-len: expected a positive number of tokens, got ", r.attention.seq_len);
  validate_degrees(r);
  const ModelShape& m = r.attention.model;
  CP_CHECK_USAGE(m.vocab > 0 && (m.mlp_layers > 0 || m.layers > 0), "--gpus: model '", m.name,
                 "' has no vocab / MLP sizes (give a shipped model or a config.json)");
  const std::vector<Parallel> degrees = enumerate_parallel(r);
  CP_CHECK_USAGE(!degrees.empty(), "--gpus ", r.gpus, ": no tp x pp x dp x cp fits model '", m.name,
                 "' with the given degrees (TP within ", cl.gpus_per_node, " GPUs dividing ", m.heads,
                 " heads, PP dividing ", m.layers, " layers, CP dividing the sequence)");
  const std::vector<Recompute> policies =
      r.recompute.empty() ? std::vector<Recompute>{Recompute::none, Recompute::selective, Recompute::full} : r.recompute;
  AttentionPricer pricer(r.attention, r.stack);
  plan.features = features_of(r.attention);
  plan.model_flops_per_token = model_flops_per_token(r.attention, pricer.kinds());
  const ModelParams mp = model_params(m);
  plan.params = mp.total;
  plan.active_params = mp.active;
  const double reserve = r.reserve_bytes >= 0 ? r.reserve_bytes : constants().memory_reserve_bytes;
  const double budget = cl.memory_bytes - reserve;
  const bool all_given = r.tp > 0 && r.pp > 0 && r.dp > 0 && r.attention.cps.size() == 1;
  for (const Parallel& par : degrees) {
    int64_t global = r.global_batch;
    const int64_t per_step = r.micro_batch * par.dp;
    if (global <= 0) global = per_step * (par.pp > 1 ? constants().pp_microbatches_per_stage * par.pp : 1);
    if (global % per_step != 0) {
      CP_CHECK_USAGE(!all_given, "--global-batch ", global, ": not a multiple of --micro-batch ", r.micro_batch,
                     " x --dp ", par.dp);
      continue;
    }
    const LayoutPrices& prices = pricer.at(par.tp, par.cp);
    for (const auto& [sharder, kind_prices] : prices) {
      for (Recompute rc : policies) {
        CaseInputs in;
        in.parallel = par;
        in.training.recompute = rc;
        in.training.precision = r.precision;
        in.training.offload = r.offload;
        in.training.micro_batch = r.micro_batch;
        in.training.microbatches = global / per_step;
        in.global_batch = global;
        in.sharder = sharder;
        in.kinds = &pricer.kinds();
        in.prices = &kind_prices;
        in.model_flops_per_token = plan.model_flops_per_token;
        in.memory_budget = budget;
        plan.cases.push_back(price_case(m, cl, r.attention.seq_len, in));
        ++plan.searched;
      }
      if (par.cp == 1) break;  // one layout is every layout without CP
    }
  }
  CP_CHECK_USAGE(!plan.cases.empty(), "--gpus ", r.gpus, ": no layout runs every layer kind of model '", m.name,
                 "' at the degrees searched (see --sharders / --transports)");
  std::stable_sort(plan.cases.begin(), plan.cases.end(), [](const StepCase& a, const StepCase& b) {
    if (a.fits_memory != b.fits_memory) return a.fits_memory;
    if (a.fits_memory && a.tokens_per_s_per_gpu != b.tokens_per_s_per_gpu)
      return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
    return a.memory_per_gpu_bytes() < b.memory_per_gpu_bytes();
  });
  // One row per configuration (degrees x training options): its best layout; the layouts that tie with it
  // differ only in name.
  std::vector<StepCase> kept;
  for (auto& c : plan.cases) {
    const auto same = [&](const StepCase& x) {
      return x.parallel == c.parallel && x.training.recompute == c.training.recompute;
    };
    if (std::find_if(kept.begin(), kept.end(), same) == kept.end()) kept.push_back(std::move(c));
  }
  plan.cases = std::move(kept);
  if (!plan.cases.front().fits_memory)
    plan.notes.push_back("no case fits in " + fmt_bytes(budget) + " per GPU (" + fmt_bytes(cl.memory_bytes) +
                         " less a " + fmt_bytes(reserve) + " reserve); the smallest are listed");
  for (const auto& c : plan.cases) {
    const auto same = [&](const StepCase& x) { return x.parallel.cp == c.parallel.cp; };
    if (std::find_if(plan.best_per_cp.begin(), plan.best_per_cp.end(), same) == plan.best_per_cp.end())
      plan.best_per_cp.push_back(c);
  }
  std::sort(plan.best_per_cp.begin(), plan.best_per_cp.end(),
            [](const StepCase& a, const StepCase& b) { return a.parallel.cp < b.parallel.cp; });
  if (static_cast<int64_t>(plan.cases.size()) > r.top) plan.cases.resize(static_cast<size_t>(r.top));
  return plan;
}

}  // namespace cpbench::plan::step
