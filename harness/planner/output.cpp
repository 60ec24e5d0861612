#include "harness/planner/output.hpp"

#include <algorithm>
#include <cctype>
#include <iomanip>
#include <sstream>
#include <vector>

#include "harness/planner/format.hpp"
#include "harness/planner/mixer_cost.hpp"

namespace cpbench::plan {

nlohmann::json plan_to_json(const Plan& plan) {
  using nlohmann::json;
  const auto& r = plan.request;
  json j;
  const ModelShape& m = r.model;
  j["model"] = {{"name", m.name},
                {"layers", m.layers},
                {"attention_layers", m.attention_layers()},
                {"hidden", m.hidden},
                {"heads", m.heads},
                {"kv_heads", m.kv_heads},
                {"head_dim", m.head_dim}};
  for (const auto& mixer : mixers())
    if (!mixer->layers_json_key().empty()) j["model"][mixer->layers_json_key()] = m.layers_of(mixer->letter());
  if (!m.mixers.empty()) j["model"]["mixers"] = m.mixers;
  if (const Mixer* mixer = planned_mixer(m); mixer && !mixer->config_key().empty()) {
    ModelShape sizes = m;
    for (const auto& f : mixer->config_fields(sizes)) j["model"][mixer->config_key()][f.name] = *f.value;
  }
  if (m.sliding_window > 0)
    j["model"]["sliding_window"] = {{"tokens", m.sliding_window}, {"layers", m.sliding_layers}};
  if (!m.source.empty()) j["model"]["source"] = m.source;
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
                  {"memory_bytes", r.cluster.memory_bytes},
                  {"ssm_flops", r.cluster.ssm_flops}};
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
    k["attention_step_s"] = c.attention_step_s;
    if (c.dsa.enabled)
      k["dsa"] = {{"indexer", {{"flops_per_rank_max", c.dsa.indexer_flops_max}, {"balance", c.dsa.indexer_balance},
                               {"time_s", c.dsa.indexer_s}}},
                  {"sparse", {{"flops_per_rank_max", c.dsa.sparse_flops_max}, {"balance", c.dsa.sparse_balance},
                              {"time_s", c.dsa.sparse_s}}},
                  {"wire_bytes_per_rank", c.dsa.wire_bytes}, {"wire_s", c.dsa.wire_s}, {"step_s", c.dsa.step_s}};
    if (!c.ssm.strategy.empty())
      k["ssm"] = {{"mixer", c.ssm.mixer},             {"strategy", c.ssm.strategy},
                  {"flops_per_rank", c.ssm.flops_per_rank},
                  {"bytes_per_rank", c.ssm.bytes_per_rank}, {"compute_s", c.ssm.compute_s},
                  {"comm_s", c.ssm.comm_s},           {"step_s", c.ssm.step_s},
                  {"activation_bytes", c.ssm.activation_bytes},
                  {"core", {{"compute_s", c.ssm.core_compute_s}, {"comm_s", c.ssm.core_comm_s},
                            {"step_s", c.ssm.core_step_s}}}};
    cases.push_back(k);
  }
  j["cases"] = cases;
  const auto& rec = plan.recommendation;
  json per_cp = json::array();
  for (const auto& cr : rec.per_cp)
    per_cp.push_back({{"cp", cr.cp},
                      {"sharder", cr.sharder},
                      {"transport", cr.transport},
                      {"ssm_strategy", cr.ssm_strategy},
                      {"predicted_step_s", cr.predicted_step_s},
                      {"efficiency", cr.efficiency},
                      {"ranking", cr.ranking},
                      {"reason", cr.reason}});
  j["recommendation"] = {{"sharder", rec.sharder},
                         {"transport", rec.transport},
                         {"ssm_strategy", rec.ssm_strategy},
                         {"cp", rec.cp},
                         {"predicted_step_s", rec.predicted_step_s},
                         {"efficiency", rec.efficiency},
                         {"reason", rec.reason},
                         {"per_cp", per_cp}};
  j["notes"] = plan.notes;
  if (!plan.per_kind.empty()) {
    json kinds = json::array();
    for (const auto& k : plan.per_kind)
      kinds.push_back({{"kind", k.kind},
                       {"layers", k.layers},
                       {"mask", k.mask},
                       {"cp", k.cp},
                       {"sharder", k.sharder},
                       {"transport", k.transport},
                       {"wire", k.wire},
                       {"predicted_step_s", k.step_s},
                       {"bytes_per_rank", k.bytes_per_rank},
                       {"why", k.why}});
    j["per_kind"] = kinds;
  }
  return j;
}

std::string plan_to_table(const Plan& plan) {
  const auto& r = plan.request;
  std::ostringstream os;
  const ModelShape& m = r.model;
  const Mixer* linear = planned_mixer(m);
  const bool ssm = linear != nullptr;  // the other mixer's columns
  std::string mixer = ssm ? linear->label() : "";
  std::transform(mixer.begin(), mixer.end(), mixer.begin(), [](unsigned char ch) { return std::tolower(ch); });
  os << "model " << m.name << ": ";
  if (ssm)
    os << m.layers << " mixer layers (" << m.attention_layers() << " attention, " << m.layers_of(linear->letter())
       << " " << linear->plan_layers_name() << "), ";
  else
    os << m.layers << " layers, ";
  if (m.attention_layers() > 0)
    os << m.heads << " heads / " << m.kv_heads << " kv heads x " << m.head_dim << ", ";
  os << "hidden " << m.hidden;
  if (ssm) os << "; " << linear->sizes_text(m);
  if (m.sliding_window > 0) os << "; sliding window " << m.sliding_window << " on " << m.sliding_layers << " layers";
  if (!m.source.empty()) os << " (" << m.source << ")";
  os << "\n";
  os << "workload: " << r.seq_len << " tokens";
  if (!r.doc_lens.empty()) os << " (" << r.doc_lens.size() << " documents, " << plan.real_tokens << " real tokens)";
  os << ", mask " << r.mask << ", " << r.dtype << ", unsharded attention " << fmt(plan.total_attention_flops)
     << " FLOP fwd per step\n";
  os << "cluster " << r.cluster.name << ": " << fmt(r.cluster.attention_flops / 1e12) << " TFLOP/s attention, "
     << fmt(r.cluster.intra_bandwidth / 1e9) << " GB/s intra-node, " << fmt(r.cluster.inter_bandwidth / 1e9)
     << " GB/s inter-node, " << fmt_time(r.cluster.latency_s) << " latency, " << r.cluster.gpus_per_node
     << " GPUs per node; kernel model " << to_string(r.kernel) << ", pass " << to_string(r.pass);
  if (ssm) {
    // A core with its HBM passes modelled runs at the dense rate plus them (mixer_cost.cpp, core_time).
    bool hbm = false;
    for (const auto& c : plan.cases) hbm = hbm || c.ssm.hbm_modelled;
    os << "; " << linear->label() << " " << linear->recurrence_name() << " ";
    if (hbm && r.cluster.kernel.hbm_bandwidth > 0)
      os << fmt(r.cluster.attention_flops / 1e12) << " TFLOP/s + passes at " << fmt(r.cluster.kernel.hbm_bandwidth / 1e12)
         << " TB/s HBM";
    else
      os << fmt(r.cluster.ssm_flops / 1e12) << " TFLOP/s";
  }
  os << "\n";
  bool dsa = false;
  for (const auto& c : plan.cases) dsa = dsa || c.dsa.enabled;
  for (int64_t W : r.cps) {
    std::vector<const PlanCase*> rows;
    for (const auto& c : plan.cases)
      if (c.cp == W) rows.push_back(&c);
    std::stable_sort(rows.begin(), rows.end(), [](const PlanCase* a, const PlanCase* b) { return a->rank < b->rank; });
    os << "\ncp=" << W << "  (ideal " << fmt_time(rows.empty() ? 0 : rows[0]->ideal_s) << " per step)\n";
    os << std::left << std::setw(5) << "rank" << std::setw(19) << "sharder" << std::setw(11) << "transport";
    if (ssm) os << std::setw(17) << mixer;
    os << std::right << std::setw(10) << "imbalance" << std::setw(12) << "step" << std::setw(12) << "exposed"
       << std::setw(7) << "eff" << std::setw(13) << "sent/rank";
    if (ssm)
      os << std::setw(12) << mixer + " time" << std::setw(12) << mixer + " comm" << std::setw(13) << mixer + " sent";
    if (dsa)
      os << std::setw(11) << "indexer" << std::setw(8) << "bal" << std::setw(11) << "sparse" << std::setw(8) << "bal"
         << std::setw(11) << "dsa wire";
    os << std::setw(13) << "act.mem" << std::setw(10) << "segments"
       << "\n";
    for (const auto* c : rows) {
      os << std::left << std::setw(5) << c->rank << std::setw(19) << c->sharder << std::setw(11) << c->transport;
      if (ssm) os << std::setw(17) << c->ssm.strategy;
      os << std::right;
      os << std::setw(10) << fmt_fixed(c->imbalance, 3) << std::setw(12) << fmt_time(c->predicted_step_s)
         << std::setw(12) << fmt_time(c->exposed_comm_s) << std::setw(7) << pct(c->efficiency) << std::setw(13)
         << fmt_bytes(static_cast<double>(c->bytes_per_rank));
      if (ssm)
        os << std::setw(12) << fmt_time(c->ssm.step_s) << std::setw(12) << fmt_time(c->ssm.comm_s) << std::setw(13)
           << fmt_bytes(static_cast<double>(c->ssm.bytes_per_rank));
      if (dsa)
        os << std::setw(11) << fmt_time(c->dsa.indexer_s) << std::setw(8) << fmt_fixed(c->dsa.indexer_balance, 3)
           << std::setw(11) << fmt_time(c->dsa.sparse_s) << std::setw(8) << fmt_fixed(c->dsa.sparse_balance, 3)
           << std::setw(11) << fmt_time(c->dsa.wire_s);
      os << std::setw(13) << fmt_bytes(static_cast<double>(c->peak_activation_bytes)) << std::setw(10) << c->max_segments
         << (c->fits_memory ? "" : "  (does not fit)") << "\n";
    }
  }
  for (const auto& n : plan.notes) os << "\nnote: " << n;
  if (!plan.notes.empty()) os << "\n";
  const auto& rec = plan.recommendation;
  os << "\nrecommendation: " << rec.sharder << " + " << rec.transport;
  if (!rec.ssm_strategy.empty()) os << " + " << linear->label() << " " << rec.ssm_strategy;
  os << " at cp=" << rec.cp << "\n  " << rec.reason << "\n";
  for (const auto& cr : rec.per_cp) os << "  cp=" << cr.cp << ": " << cr.reason << "\n";
  if (!plan.per_kind.empty()) os << "\nper layer kind (each kind's layers planned alone):\n";
  for (const auto& k : plan.per_kind)
    os << "  cp=" << k.cp << " " << k.kind << " x" << k.layers << " (" << k.mask << "): " << k.sharder << " + "
       << k.transport << (k.wire.empty() ? "" : " + " + k.wire + " wire") << ", " << fmt_time(k.step_s) << ", "
       << fmt_bytes(static_cast<double>(k.bytes_per_rank)) << " sent/rank\n    " << k.why << "\n";
  return os.str();
}

}  // namespace cpbench::plan
