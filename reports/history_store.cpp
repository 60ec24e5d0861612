#include "reports/history_store.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "reports/json_report.hpp"
#include "reports/sqlite_store.hpp"

namespace cpbench {
namespace {

// The stores this build has, one line each (explicit: a static library drops unreferenced objects).
std::map<std::string, HistoryStoreFactory>& registry() {
  static std::map<std::string, HistoryStoreFactory> r = {
      {"sqlite", make_sqlite_history_store},
  };
  return r;
}

}  // namespace

bool register_history_store(const std::string& scheme, HistoryStoreFactory factory) {
  registry()[scheme] = std::move(factory);
  return true;
}

std::vector<std::string> history_store_schemes() {
  std::vector<std::string> out;
  for (const auto& [scheme, f] : registry()) out.push_back(scheme);
  return out;
}

std::unique_ptr<HistoryStore> open_history_store(const std::string& where, bool create) {
  // "scheme:rest" only when the prefix is a plain word (a Windows-free world: paths have no colon
  // before a slash); everything else is a file for the default store.
  std::string scheme = "sqlite", rest = where;
  const auto colon = where.find(':');
  if (colon != std::string::npos && colon > 0 && where.find('/') > colon) {
    scheme = where.substr(0, colon);
    rest = where.substr(colon + 1);
  }
  const auto it = registry().find(scheme);
  if (it == registry().end()) {
    std::string known;
    for (const auto& s : history_store_schemes()) known += (known.empty() ? "" : ", ") + s;
    throw std::invalid_argument("--db " + where + ": unknown history store '" + scheme + "' (known: " + known + ")");
  }
  return it->second(rest, create);
}

HistoryRun history_run_from_report(const Report& report, const std::string& label) {
  if (report.partial)
    throw std::invalid_argument("a partial report (" +
                                (report.partial_reason.empty() ? "interrupted" : report.partial_reason) +
                                "): only finished runs go into the history");
  if (report.results.empty()) throw std::invalid_argument("the report has no results");
  HistoryRun run;
  run.commit = report.env.git_commit;
  run.version = report.env.cpbench_version;
  run.started_at = report.env.started_at;
  run.host = report.env.host;
  run.device = report.env.device;
  run.label = label;
  run.scenario = report.scenario_name;
  run.environment_json = to_json(report).at("environment").dump();
  for (const auto& r : report.results) {
    HistoryCase c;
    c.name = r.name;
    c.status = r.status;
    for (const auto& m : r.metrics) c.metrics[m.name] = m;
    c.step_s = r.measurement.step_s;
    c.cpu_s = r.measurement.cpu_s;
    c.busy = r.measurement.machine.busy();
    // The canary read beside the case (harness/runner/canary.hpp) is stored as two of its metrics: the
    // history keeps the machine's series next to every case's.
    const CanaryReading& k = r.measurement.canary;
    if (k.repeats > 0 && k.memory_s > 0 && k.compute_s > 0) {
      c.metrics[kCanaryMemoryMetric] = {kCanaryMemoryMetric, k.memory_s, "s", 0};
      c.metrics[kCanaryComputeMetric] = {kCanaryComputeMetric, k.compute_s, "s", 0};
    }
    run.cases.push_back(std::move(c));
  }
  return run;
}

}  // namespace cpbench
