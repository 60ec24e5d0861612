#include "harness/planner/step/step_output.hpp"

#include <iomanip>
#include <sstream>

#include "harness/planner/format.hpp"

namespace cpbench::plan::step {

std::string layout_text(const StepCase& c) {
  std::string s = c.parallel.cp > 1 ? c.sharder : "no CP";
  std::string kinds;
  for (const auto& k : c.kinds) {
    if (c.parallel.cp == 1 && k.wire.empty()) continue;
    kinds += (kinds.empty() ? "" : ", ") + k.kind + "=" + (c.parallel.cp > 1 ? k.transport : "") +
             (k.wire.empty() ? "" : (c.parallel.cp > 1 ? "/" : "") + k.wire);
  }
  return kinds.empty() ? s : s + ": " + kinds;
}

std::string degrees_text(const Parallel& p) {
  std::string s = "tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp);
  if (p.vp > 1) s += " vp" + std::to_string(p.vp);
  return s + " dp" + std::to_string(p.dp) + " cp" + std::to_string(p.cp) + " ep" + std::to_string(p.ep) + " zero" +
         std::to_string(p.zero);
}

nlohmann::json step_plan_to_json(const StepPlan& plan) {
  using nlohmann::json;
  const StepRequest& r = plan.request;
  const ModelShape& m = r.attention.model;
  const Cluster& cl = r.attention.cluster;
  json j;
  j["model"] = {{"name", m.name},         {"layers", m.layers},         {"attention_layers", m.attention_layers()},
                {"hidden", m.hidden},     {"heads", m.heads},           {"kv_heads", m.kv_heads},
                {"vocab", m.vocab},       {"params", plan.params},      {"active_params", plan.active_params},
                {"features", plan.features}};
  if (!m.source.empty()) j["model"]["source"] = m.source;
  j["workload"] = {{"seq_len", r.attention.seq_len}, {"gpus", r.gpus}, {"precision", to_string(r.precision)},
                   {"offload", to_string(r.offload)}, {"micro_batch", r.micro_batch},
                   {"stack", to_string(r.stack)}};
  j["cluster"] = {{"name", cl.name},
                  {"bf16_flops", cl.bf16_flops},
                  {"fp8_flops", cl.fp8_flops},
                  {"attention_flops", cl.attention_flops},
                  {"memory_bytes", cl.memory_bytes},
                  {"host_bandwidth", cl.host_bandwidth},
                  {"intra_bandwidth", cl.intra_bandwidth},
                  {"inter_bandwidth", cl.inter_bandwidth},
                  {"gpus_per_node", cl.gpus_per_node}};
  j["model_flops_per_token"] = plan.model_flops_per_token;
  j["searched"] = plan.searched;
  json cases = json::array();
  int rank = 0;
  for (const auto& c : plan.cases) {
    const Parallel& p = c.parallel;
    json k;
    k["rank"] = ++rank;
    k["parallel"] = {{"tp", p.tp}, {"pp", p.pp}, {"vp", p.vp}, {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"zero", p.zero}};
    k["recompute"] = to_string(c.training.recompute);
    k["precision"] = to_string(c.training.precision);
    k["offload"] = to_string(c.training.offload);
    k["micro_batch"] = c.training.micro_batch;
    k["microbatches"] = c.training.microbatches;
    k["global_batch"] = c.global_batch;
    json kinds = json::array();
    for (const auto& x : c.kinds)
      kinds.push_back({{"kind", x.kind}, {"layers", x.layers}, {"mask", x.mask}, {"transport", x.transport},
                       {"wire", x.wire}, {"step_s", x.step_s}});
    k["layout"] = {{"sharder", c.sharder}, {"kinds", kinds}, {"text", layout_text(c)}};
    k["tokens_per_s_per_gpu"] = c.tokens_per_s_per_gpu;
    k["model_tflops_per_gpu"] = c.model_tflops_per_gpu;
    k["mfu"] = c.mfu;
    k["step_s"] = c.step_s;
    k["memory_per_gpu_bytes"] = c.memory_per_gpu_bytes();
    k["memory_budget_bytes"] = c.memory_budget;
    k["fits_memory"] = c.fits_memory;
    const Memory& mem = c.memory;
    k["memory"] = {{"params", mem.params},         {"grads", mem.grads},     {"optimizer", mem.optimizer},
                   {"gathered", mem.gathered},     {"activations", mem.activations},
                   {"cp_buffers", mem.cp_buffers}, {"logits", mem.logits},   {"overhead", mem.overhead}};
    json comps = json::object();
    for (const auto& x : c.components)
      comps[x.name] = {{"time_s", x.time_s}, {"flops", x.flops}, {"bytes", x.bytes}, {"hidden_s", x.hidden_s}};
    k["components"] = comps;
    cases.push_back(k);
  }
  j["cases"] = cases;
  j["notes"] = plan.notes;
  return j;
}

std::string step_plan_to_table(const StepPlan& plan) {
  const StepRequest& r = plan.request;
  const ModelShape& m = r.attention.model;
  const Cluster& cl = r.attention.cluster;
  std::ostringstream os;
  os << "model " << m.name << ": " << m.layers << " layers, hidden " << m.hidden << ", " << fmt(plan.params / 1e9)
     << "B params (" << fmt(plan.active_params / 1e9) << "B active per token)";
  for (const auto& f : plan.features) os << "; " << f;
  if (!m.source.empty()) os << " (" << m.source << ")";
  os << "\nworkload: " << r.attention.seq_len << " tokens per sequence, " << r.gpus << " GPUs, " << to_string(r.precision)
     << " GEMMs, micro-batch " << r.micro_batch << (r.offload == Offload::optimizer ? ", optimizer on the CPU" : "")
     << (r.stack == Stack::pytorch_cp ? ", CP attention as PyTorch's context_parallel (--stack pytorch-cp)" : "")
     << "; model FLOPs " << fmt(plan.model_flops_per_token / 1e9) << " GFLOP per token\n";
  os << "cluster " << cl.name << ": " << fmt(cl.bf16_flops / 1e12) << " / " << fmt(cl.fp8_flops / 1e12)
     << " TFLOP/s bf16 / fp8 peak, " << fmt_bytes(cl.memory_bytes) << " per GPU (" << fmt_bytes(plan.cases.front().memory_budget)
     << " usable), " << cl.gpus_per_node << " GPUs per node; " << plan.searched << " cases priced\n\n";
  os << std::left << std::setw(5) << "rank" << std::setw(34) << "degrees" << std::setw(11) << "recompute"
     << std::right << std::setw(11) << "tok/s/GPU" << std::setw(9) << "TFLOP/s" << std::setw(6) << "MFU" << std::setw(11)
     << "step" << std::setw(12) << "memory" << "  layout\n";
  int rank = 0;
  for (const auto& c : plan.cases) {
    os << std::left << std::setw(5) << ++rank << std::setw(34) << degrees_text(c.parallel) << std::setw(11)
       << to_string(c.training.recompute) << std::right << std::setw(11) << fmt(c.tokens_per_s_per_gpu, 4) << std::setw(9)
       << fmt(c.model_tflops_per_gpu, 3) << std::setw(6) << pct(c.mfu) << std::setw(11) << fmt_time(c.step_s)
       << std::setw(12) << fmt_bytes(c.memory_per_gpu_bytes()) << "  " << layout_text(c)
       << (c.fits_memory ? "" : "  (does not fit)") << "\n";
  }
  const StepCase& best = plan.cases.front();
  os << "\nrecommendation: " << degrees_text(best.parallel) << ", recompute " << to_string(best.training.recompute)
     << ", " << best.training.microbatches << " micro-batches of " << best.training.micro_batch << " (global batch "
     << best.global_batch << "), layout " << layout_text(best) << ": " << fmt(best.tokens_per_s_per_gpu, 4)
     << " tokens/s/GPU, " << fmt(best.model_tflops_per_gpu, 3) << " TFLOP/s/GPU (MFU " << pct(best.mfu) << "), "
     << fmt_bytes(best.memory_per_gpu_bytes()) << " per GPU" << (best.fits_memory ? "" : " (does not fit)") << "\n";
  os << "  step " << fmt_time(best.step_s) << ":";
  for (const auto& x : best.components)
    if (x.time_s > 0) os << " " << x.name << " " << fmt_time(x.time_s) << " (" << pct(x.time_s / best.step_s) << ")";
  os << "\n  per layer kind (one layout, a transport per kind):";
  for (const auto& k : best.kinds)
    os << "\n    " << k.kind << " x" << k.layers << (k.mask.empty() ? "" : " (" + k.mask + ")") << ": "
       << (best.parallel.cp > 1 ? best.sharder + " + " + k.transport : std::string("no CP"))
       << (k.wire.empty() ? "" : " + " + k.wire + " wire") << ", " << fmt_time(k.step_s);
  const Memory& mem = best.memory;
  os << "\n  memory: params " << fmt_bytes(mem.params) << ", grads " << fmt_bytes(mem.grads) << ", optimizer "
     << fmt_bytes(mem.optimizer) << ", gathered " << fmt_bytes(mem.gathered) << ", activations "
     << fmt_bytes(mem.activations) << ", CP buffers " << fmt_bytes(mem.cp_buffers) << ", logits " << fmt_bytes(mem.logits)
     << ", allocator " << fmt_bytes(mem.overhead) << "\n";
  for (const auto& n : plan.notes) os << "note: " << n << "\n";
  return os.str();
}

}  // namespace cpbench::plan::step
