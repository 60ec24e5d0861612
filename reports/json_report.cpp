#include "reports/json_report.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cpbench {

using nlohmann::json;

json to_json(const RunResult& r) {
  json j;
  j["index"] = r.index;
  j["name"] = r.name;
  j["axes"] = r.axes;
  j["expect"] = r.expect;
  j["status"] = r.status;
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (!r.outcome.empty()) j["outcome"] = r.outcome;
  if (!r.reference.empty()) j["reference"] = r.reference;
  j["wall_s"] = r.wall_s;
  json errs = json::array();
  for (const auto& e : r.errors) {
    json x = {{"tensor", e.tensor},   {"criterion", e.criterion},   {"step", e.step},         {"elements", e.elements},
              {"mismatches", e.mismatches}, {"fraction", e.fraction()}, {"max_abs", e.max_abs}, {"max_rel", e.max_rel},
              {"score", e.score},     {"ok", e.ok},                 {"worst", e.worst}};
    if (e.criterion == "precision") {
      x["k"] = e.k;
      x["floor"] = e.floor;
      x["quantile"] = e.quantile;
      x["single_rank_max"] = e.single_rank_max;
      x["single_rank_q"] = e.single_rank_q;
      x["cp_q"] = e.cp_q;
    } else {
      x["rtol"] = e.rtol;
      x["atol"] = e.atol;
    }
    errs.push_back(x);
  }
  j["errors"] = errs;
  json metrics = json::object();
  for (const auto& m : r.metrics) metrics[m.name] = {{"value", m.value}, {"unit", m.unit}, {"spread", m.spread}};
  j["metrics"] = metrics;
  json ranks = json::array();
  for (const auto& s : r.ranks)
    ranks.push_back({{"rank", s.rank}, {"attention_s", s.attention_s}, {"attention_flops", s.attention_flops},
                     {"bytes_sent", s.bytes_sent}, {"comm_s", s.comm_s}, {"transfer_s", s.transfer_s},
                     {"step_s", s.step_s}, {"attention_flops_computed", s.attention_flops_computed},
                     {"ssm_s", s.ssm_s}, {"cpu_s", s.cpu_s}, {"kernel_blocks", s.kernel_blocks}});
  j["ranks"] = ranks;
  const MeasurementRecord& m = r.measurement;
  if (!m.step_s.empty() || !m.verdict.empty()) {
    const MachineState& ms = m.machine;
    j["measurement"] = {{"step_s", m.step_s},
                        {"cpu_s", m.cpu_s},
                        {"warmup", m.warmup},
                        {"min_iters", m.min_iters},
                        {"max_noise", m.max_noise},
                        {"max_time_s", m.max_time_s},
                        {"noise", m.noise},
                        {"stopped_by", m.stopped_by},
                        {"threads_per_rank", m.threads_per_rank},
                        {"rank_cpus", m.rank_cpus},
                        {"omp_wait_policy", m.omp_wait_policy},
                        {"verdict", m.verdict},
                        {"verdict_reason", m.verdict_reason},
                        {"slowdown", m.slowdown},
                        {"canary",
                         {{"memory_s", m.canary.memory_s},
                          {"compute_s", m.canary.compute_s},
                          {"repeats", m.canary.repeats}}},
                        {"machine",
                         {{"cores", ms.cores},
                          {"load1_before", ms.load1_before},
                          {"load1_after", ms.load1_after},
                          {"others_runnable_mean", ms.others_runnable_mean},
                          {"others_runnable_max", ms.others_runnable_max},
                          {"samples", ms.samples},
                          {"cpu_mhz", ms.cpu_mhz}}}};
  }
  if (!r.collectives.empty()) {
    json cs = json::array();
    for (const auto& c : r.collectives)
      cs.push_back({{"collective", c.collective}, {"bytes", c.bytes}, {"calls_per_step", c.calls_per_step},
                    {"time_s", c.time_s}, {"algbw", c.algbw}, {"busbw", c.busbw}, {"bus_factor", c.bus_factor}});
    j["collectives"] = cs;
  }
  if (!r.peak.flops_source.empty() || !r.peak.link_source.empty())
    j["peak"] = {{"flops", r.peak.flops}, {"flops_source", r.peak.flops_source},
                 {"link_bandwidth", r.peak.link_bandwidth}, {"link_source", r.peak.link_source}};
  if (!r.peak.route_flops.empty()) j["peak"]["route_flops"] = r.peak.route_flops;
  if (!r.warnings.empty()) j["warnings"] = r.warnings;
  if (!r.timeline.empty()) {
    json tl = {{"clock", r.timeline.clock}, {"ranks", json::array()}};
    for (const auto& rt : r.timeline.ranks) tl["ranks"].push_back(to_json(rt));
    j["timeline"] = tl;
  }
  return j;
}

json to_json(const RankTimeline& rt) {
  json events = json::array();
  for (const auto& e : rt.events)
    events.push_back(
        {{"name", e.name}, {"lane", e.lane}, {"kind", e.kind}, {"start_s", e.start_s}, {"dur_s", e.dur_s}});
  return {{"rank", rt.rank}, {"events", events}};
}

RankTimeline rank_timeline_from_json(const json& j) {
  RankTimeline rt;
  rt.rank = j.value("rank", 0);
  for (const auto& e : j.value("events", json::array()))
    rt.events.push_back({e.value("name", ""), e.value("lane", ""), e.value("kind", ""), e.value("start_s", 0.0),
                         e.value("dur_s", 0.0)});
  return rt;
}

Timeline timeline_from_json(const json& j) {
  Timeline t;
  t.clock = j.value("clock", "");
  for (const auto& rj : j.value("ranks", json::array())) t.ranks.push_back(rank_timeline_from_json(rj));
  return t;
}

RunResult run_result_from_json(const json& j) {
  RunResult r;
  r.index = j.value("index", 0);
  r.name = j.value("name", "");
  r.axes = j.value("axes", std::map<std::string, std::string>{});
  r.expect = j.value("expect", "match");
  r.status = j.value("status", "failed");
  r.reason = j.value("reason", "");
  r.outcome = j.value("outcome", "");
  r.reference = j.value("reference", "");
  r.wall_s = j.value("wall_s", 0.0);
  for (const auto& e : j.value("errors", json::array())) {
    TensorError x;
    x.tensor = e.value("tensor", "");
    x.criterion = e.value("criterion", "");
    x.step = e.value("step", "");
    x.elements = e.value("elements", int64_t{0});
    x.mismatches = e.value("mismatches", int64_t{0});
    x.max_abs = e.value("max_abs", 0.0);
    x.max_rel = e.value("max_rel", 0.0);
    // Schema 1 had only max_rel against a flat tolerance on it.
    x.score = e.contains("score") ? e.value("score", 0.0)
                                  : (e.value("tolerance", 0.0) > 0 ? x.max_rel / e.value("tolerance", 0.0) : 0.0);
    x.rtol = e.value("rtol", 0.0);
    x.atol = e.value("atol", 0.0);
    x.k = e.value("k", 0.0);
    x.floor = e.value("floor", 0.0);
    x.quantile = e.value("quantile", 0.0);
    x.single_rank_max = e.value("single_rank_max", 0.0);
    x.single_rank_q = e.value("single_rank_q", 0.0);
    x.cp_q = e.value("cp_q", 0.0);
    x.ok = e.value("ok", false);
    x.worst = e.value("worst", "");
    r.errors.push_back(x);
  }
  const json metrics = j.value("metrics", json::object());  // items() must not outlive its json
  for (const auto& [name, m] : metrics.items())
    r.metrics.push_back({name, m.value("value", 0.0), m.value("unit", ""), m.value("spread", 0.0)});
  for (const auto& s : j.value("ranks", json::array()))
    r.ranks.push_back({s.value("rank", 0), s.value("attention_s", 0.0), s.value("attention_flops", 0.0),
                       s.value("bytes_sent", 0.0), s.value("comm_s", 0.0), s.value("transfer_s", 0.0),
                       s.value("step_s", 0.0), s.value("attention_flops_computed", 0.0), s.value("ssm_s", 0.0),
                       s.value("kernel_blocks", std::map<std::string, int64_t>{}), s.value("cpu_s", 0.0)});
  if (j.contains("measurement")) {  // schema 4
    const json& m = j.at("measurement");
    MeasurementRecord& x = r.measurement;
    x.step_s = m.value("step_s", std::vector<double>{});
    x.cpu_s = m.value("cpu_s", std::vector<double>{});
    x.warmup = m.value("warmup", int64_t{0});
    x.min_iters = m.value("min_iters", int64_t{0});
    x.max_noise = m.value("max_noise", 0.0);
    x.max_time_s = m.value("max_time_s", 0.0);
    x.noise = m.value("noise", 0.0);
    x.stopped_by = m.value("stopped_by", "");
    x.threads_per_rank = m.value("threads_per_rank", int64_t{0});
    x.rank_cpus = m.value("rank_cpus", "");
    x.omp_wait_policy = m.value("omp_wait_policy", "");
    x.verdict = m.value("verdict", "");
    x.verdict_reason = m.value("verdict_reason", "");
    x.slowdown = m.value("slowdown", 0.0);
    const json canary = m.value("canary", json::object());
    x.canary.memory_s = canary.value("memory_s", 0.0);
    x.canary.compute_s = canary.value("compute_s", 0.0);
    x.canary.repeats = canary.value("repeats", int64_t{0});
    const json ms = m.value("machine", json::object());
    x.machine.cores = ms.value("cores", int64_t{0});
    x.machine.load1_before = ms.value("load1_before", 0.0);
    x.machine.load1_after = ms.value("load1_after", 0.0);
    x.machine.others_runnable_mean = ms.value("others_runnable_mean", 0.0);
    x.machine.others_runnable_max = ms.value("others_runnable_max", int64_t{0});
    x.machine.samples = ms.value("samples", int64_t{0});
    x.machine.cpu_mhz = ms.value("cpu_mhz", 0.0);
  }
  for (const auto& c : j.value("collectives", json::array()))
    r.collectives.push_back({c.value("collective", ""), c.value("bytes", int64_t{0}), c.value("calls_per_step", int64_t{0}),
                             c.value("time_s", 0.0), c.value("algbw", 0.0), c.value("busbw", 0.0),
                             c.value("bus_factor", 0.0)});
  if (j.contains("peak")) {
    const json& p = j.at("peak");
    r.peak = {p.value("flops", 0.0), p.value("flops_source", ""), p.value("link_bandwidth", 0.0),
              p.value("link_source", ""), p.value("route_flops", std::map<std::string, double>{})};
  }
  if (j.contains("warnings")) {
    r.warnings = j.at("warnings").get<std::vector<std::string>>();
  }
  if (j.contains("timeline")) r.timeline = timeline_from_json(j.at("timeline"));  // schema 3
  return r;
}

json to_json(const Report& r) {
  json j;
  j["schema"] = "cpbench-report";
  j["schema_version"] = r.schema_version;
  j["scenario"] = {{"name", r.scenario_name}, {"file", r.scenario_file}};
  j["environment"] = {{"cpbench_version", r.env.cpbench_version}, {"git_commit", r.env.git_commit},
                      {"torch_version", r.env.torch_version},     {"device", r.env.device},
                      {"cuda_available", r.env.cuda_available},   {"world_size", r.env.world_size},
                      {"host", r.env.host},                       {"started_at", r.env.started_at},
                      {"launcher", r.env.launcher},               {"platform", r.env.platform}};
  j["partial"] = r.partial;
  if (!r.partial_reason.empty()) j["partial_reason"] = r.partial_reason;
  j["total_cases"] = r.total_cases;
  int64_t ok = 0, failed = 0, skipped = 0;
  json results = json::array();
  for (const auto& c : r.results) {
    results.push_back(to_json(c));
    ok += c.status == "ok";
    failed += c.status == "failed";
    skipped += c.status == "skipped";
  }
  j["summary"] = {{"ok", ok}, {"failed", failed}, {"skipped", skipped}, {"completed", r.results.size()}};
  j["results"] = results;
  return j;
}

Report report_from_json(const json& j) {
  if (j.value("schema", "") != "cpbench-report")
    throw std::runtime_error("not a cpbench report (missing \"schema\": \"cpbench-report\")");
  Report r;
  r.schema_version = j.value("schema_version", 0);
  if (r.schema_version < 1 || r.schema_version > 4)
    throw std::runtime_error("unsupported report schema_version " + std::to_string(r.schema_version) +
                             " (this cpbench reads 1 to 4)");
  const auto sc = j.value("scenario", json::object());
  r.scenario_name = sc.value("name", "");
  r.scenario_file = sc.value("file", "");
  const auto e = j.value("environment", json::object());
  r.env.cpbench_version = e.value("cpbench_version", "");
  r.env.git_commit = e.value("git_commit", "");
  r.env.torch_version = e.value("torch_version", "");
  r.env.device = e.value("device", "");
  r.env.cuda_available = e.value("cuda_available", false);
  r.env.world_size = e.value("world_size", 0);
  r.env.host = e.value("host", "");
  r.env.started_at = e.value("started_at", "");
  r.env.launcher = e.value("launcher", "");
  r.env.platform = e.value("platform", std::map<std::string, std::string>{});
  r.partial = j.value("partial", false);
  r.partial_reason = j.value("partial_reason", "");
  r.total_cases = j.value("total_cases", 0);
  for (const auto& c : j.value("results", json::array())) r.results.push_back(run_result_from_json(c));
  return r;
}

void write_json_file(const std::string& path, const json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error(path + ": cannot write");
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error(path + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error(path + ": cannot rename " + tmp);
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace cpbench
