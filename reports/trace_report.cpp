#include "reports/trace_report.hpp"

#include <algorithm>
#include <set>

namespace cpbench {

using nlohmann::json;

int trace_tid(const std::string& lane) {
  if (lane == "phases") return 0;
  if (lane == "compute") return 1;
  if (lane == "comm") return 2;
  return 3;  // comm_grad
}

const char* trace_thread_name(int tid) {
  switch (tid) {
    case 0:
      return "phases";
    case 1:
      return "attention compute / waits";
    case 2:
      return "K/V transfers";
    default:
      return "dK/dV transfers";
  }
}

json chrome_trace(const Report& report) {
  json events = json::array();
  std::set<int> ranks;
  double offset_s = 0;
  for (const auto& r : report.results) {
    if (r.timeline.empty()) continue;
    double end_s = 0;
    for (const auto& rt : r.timeline.ranks) {
      ranks.insert(rt.rank);
      for (const auto& e : rt.events) {
        end_s = std::max(end_s, e.start_s + e.dur_s);
        events.push_back({{"name", e.name},
                          {"cat", e.kind},
                          {"ph", "X"},
                          {"ts", (offset_s + e.start_s) * 1e6},
                          {"dur", e.dur_s * 1e6},
                          {"pid", rt.rank},
                          {"tid", trace_tid(e.lane)},
                          {"args", {{"case", r.name}, {"case_index", r.index}}}});
      }
    }
    offset_s += end_s * 1.1 + 1e-3;
  }
  json meta = json::array();
  for (int rank : ranks) {
    meta.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", rank},
                    {"tid", 0},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
    meta.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
    for (int tid = 0; tid < 4; ++tid)
      meta.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"name", trace_thread_name(tid)}}}});
  }
  for (auto& e : events) meta.push_back(std::move(e));
  return {{"traceEvents", meta},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"scenario", report.scenario_name}, {"generator", "cpbench " + report.env.cpbench_version}}}};
}

}  // namespace cpbench
