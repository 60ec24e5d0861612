#include "harness/planner/output.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <vector>

#include "harness/planner/format.hpp"

namespace cpbench::plan {

nlohmann::json plan_to_json(const Plan& plan) {
  using nlohmann::json;
  const auto& r = plan.request;
  json j;
  j["model"] = {{"name", r.model.name},   {"layers", r.model.layers},     {"hidden", r.model.hidden},
                {"heads", r.model.heads}, {"kv_heads", r.model.kv_heads}, {"head_dim", r.model.head_dim}};
  j["workload"] = {{"seq_len", r.seq_len},
                   {"real_tokens", plan.real_tokens},
                   {"documents", r.doc_lens.size()},
                   {"doc_lens", r.doc_lens},
                   {"mask", r.mask},
                   {"dtype", r.dtype},
                   {"total_attention_flops", plan.total_attention_flops}};
  j["cluster"] = {{"name", r.cluster.name},
                  {"attention_flops", r.cluster.attention_flops},
                  {"intra_bandwidth", r.cluster.intra_bandwidth},
                  {"inter_bandwidth", r.cluster.inter_bandwidth},
                  {"latency_s", r.cluster.latency_s},
                  {"gpus_per_node", r.cluster.gpus_per_node},
                  {"memory_bytes", r.cluster.memory_bytes}};
  j["kernel"] = to_string(r.kernel);
  j["pass"] = to_string(r.pass);
  if (r.kernel == Kernel::fitted) {
    const KernelModel& k = r.cluster.kernel;
    j["kernel_model"] = {{"causal_penalty", k.causal_penalty}, {"row_overhead_keys", k.row_overhead_keys},
                         {"launch_s", k.launch_s},             {"hbm_bandwidth", k.hbm_bandwidth},
                         {"merge_bytes", k.merge_bytes},       {"dq_bytes", k.dq_bytes},
                         {"dkv_bytes", k.dkv_bytes},           {"contention", k.contention},
                         {"source", k.source}};
  }
  json cases = json::array();
  for (const auto& c : plan.cases) {
    json k = {{"sharder", c.sharder}, {"transport", c.transport}, {"cp", c.cp}};
    if (c.ulysses > 0) k["ulysses"] = c.ulysses;
    k["rank"] = c.rank;
    k["imbalance"] = c.imbalance;
    k["compute_imbalance"] = c.compute_imbalance;
    k["attention_flops_per_rank"] = c.attention_flops_per_rank;
    k["bytes_per_rank"] = c.bytes_per_rank;
    k["predicted_step_s"] = c.predicted_step_s;
    k["efficiency"] = c.efficiency;
    k["ideal_s"] = c.ideal_s;
    k["compute_s"] = c.compute_s;
    k["transfer_s"] = c.transfer_s;
    k["exposed_comm_s"] = c.exposed_comm_s;
    k["peak_activation_bytes"] = c.peak_activation_bytes;
    k["max_segments"] = c.max_segments;
    k["fits_memory"] = c.fits_memory;
    k["padded_seq_len"] = c.padded_seq_len;
    k["local_tokens"] = c.local_tokens;
    cases.push_back(k);
  }
  j["cases"] = cases;
  const auto& rec = plan.recommendation;
  json per_cp = json::array();
  for (const auto& cr : rec.per_cp)
    per_cp.push_back({{"cp", cr.cp},
                      {"sharder", cr.sharder},
                      {"transport", cr.transport},
                      {"predicted_step_s", cr.predicted_step_s},
                      {"efficiency", cr.efficiency},
                      {"ranking", cr.ranking},
                      {"reason", cr.reason}});
  j["recommendation"] = {{"sharder", rec.sharder},
                         {"transport", rec.transport},
                         {"cp", rec.cp},
                         {"predicted_step_s", rec.predicted_step_s},
                         {"efficiency", rec.efficiency},
                         {"reason", rec.reason},
                         {"per_cp", per_cp}};
  j["notes"] = plan.notes;
  return j;
}

std::string plan_to_table(const Plan& plan) {
  const auto& r = plan.request;
  std::ostringstream os;
  os << "model " << r.model.name << ": " << r.model.layers << " layers, " << r.model.heads << " heads / "
     << r.model.kv_heads << " kv heads x " << r.model.head_dim << ", hidden " << r.model.hidden << "\n";
  os << "workload: " << r.seq_len << " tokens";
  if (!r.doc_lens.empty()) os << " (" << r.doc_lens.size() << " documents, " << plan.real_tokens << " real tokens)";
  os << ", mask " << r.mask << ", " << r.dtype << ", unsharded attention " << fmt(plan.total_attention_flops)
     << " FLOP fwd per step\n";
  os << "cluster " << r.cluster.name << ": " << fmt(r.cluster.attention_flops / 1e12) << " TFLOP/s attention, "
     << fmt(r.cluster.intra_bandwidth / 1e9) << " GB/s intra-node, " << fmt(r.cluster.inter_bandwidth / 1e9)
     << " GB/s inter-node, " << fmt_time(r.cluster.latency_s) << " latency, " << r.cluster.gpus_per_node
     << " GPUs per node; kernel model " << to_string(r.kernel) << ", pass " << to_string(r.pass) << "\n";
  for (int64_t W : r.cps) {
    std::vector<const PlanCase*> rows;
    for (const auto& c : plan.cases)
      if (c.cp == W) rows.push_back(&c);
    std::stable_sort(rows.begin(), rows.end(), [](const PlanCase* a, const PlanCase* b) { return a->rank < b->rank; });
    os << "\ncp=" << W << "  (ideal " << fmt_time(rows.empty() ? 0 : rows[0]->ideal_s) << " per step)\n";
    os << std::left << std::setw(5) << "rank" << std::setw(19) << "sharder" << std::setw(11) << "transport"
       << std::right << std::setw(10) << "imbalance" << std::setw(12) << "step" << std::setw(12) << "exposed"
       << std::setw(7) << "eff" << std::setw(13) << "sent/rank" << std::setw(13) << "act.mem" << std::setw(10)
       << "segments"
       << "\n";
    for (const auto* c : rows) {
      os << std::left << std::setw(5) << c->rank << std::setw(19) << c->sharder << std::setw(11) << c->transport
         << std::right;
      os << std::setw(10) << fmt_fixed(c->imbalance, 3) << std::setw(12) << fmt_time(c->predicted_step_s)
         << std::setw(12) << fmt_time(c->exposed_comm_s) << std::setw(7) << pct(c->efficiency) << std::setw(13)
         << fmt_bytes(static_cast<double>(c->bytes_per_rank)) << std::setw(13)
         << fmt_bytes(static_cast<double>(c->peak_activation_bytes)) << std::setw(10) << c->max_segments
         << (c->fits_memory ? "" : "  (does not fit)") << "\n";
    }
  }
  for (const auto& n : plan.notes) os << "\nnote: " << n;
  if (!plan.notes.empty()) os << "\n";
  const auto& rec = plan.recommendation;
  os << "\nrecommendation: " << rec.sharder << " + " << rec.transport << " at cp=" << rec.cp << "\n  " << rec.reason
     << "\n";
  for (const auto& cr : rec.per_cp) os << "  cp=" << cr.cp << ": " << cr.reason << "\n";
  return os.str();
}

}  // namespace cpbench::plan
