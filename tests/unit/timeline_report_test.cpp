// The timeline's way through the reporters: report.json (schema 3) round trip and older schemas still
// read, trace.json in the Chrome trace event format, and the Gantt chart in report.html.
#include <gtest/gtest.h>

#include <set>

#include "reports/json_report.hpp"
#include "reports/text_report.hpp"
#include "reports/trace_report.hpp"

using namespace cpbench;

namespace {

RunResult with_timeline(int64_t index, const std::string& name) {
  RunResult r;
  r.index = index;
  r.name = name;
  r.timeline.clock = "steady";
  for (int rank = 0; rank < 2; ++rank) {
    RankTimeline rt;
    rt.rank = rank;
    rt.events = {{"step", "phases", "phase", 0.0, 0.010},
                 {"forward", "phases", "phase", 0.001, 0.004},
                 {"ring_fwd:0", "compute", "compute", 0.0015, 0.001 * (rank + 1)},
                 {"ring_fwd:0", "compute", "wait", 0.0035, 0.0005},
                 {"ring_fwd:0", "comm", "transfer", 0.0014, 0.002},
                 {"ring_bwd:1", "comm_grad", "transfer", 0.006, 0.001}};
    r.timeline.ranks.push_back(rt);
  }
  return r;
}

}  // namespace

TEST(TimelineReport, RoundTripsThroughReportJson) {
  Report rep;
  rep.results.push_back(with_timeline(0, "a"));
  const Report back = report_from_json(to_json(rep));
  EXPECT_EQ(back.schema_version, 4);
  ASSERT_EQ(back.results.size(), 1u);
  const Timeline& t = back.results[0].timeline;
  EXPECT_EQ(t.clock, "steady");
  ASSERT_EQ(t.ranks.size(), 2u);
  ASSERT_EQ(t.ranks[1].events.size(), 6u);
  EXPECT_EQ(t.ranks[1].rank, 1);
  EXPECT_EQ(t.ranks[1].events[2].name, "ring_fwd:0");
  EXPECT_EQ(t.ranks[1].events[2].lane, "compute");
  EXPECT_DOUBLE_EQ(t.ranks[1].events[2].dur_s, 0.002);
}

TEST(TimelineReport, OlderSchemasWithoutATimelineStillRead) {
  Report rep;
  rep.results.push_back(RunResult{});
  nlohmann::json j = to_json(rep);
  j["schema_version"] = 2;
  const Report back = report_from_json(j);
  EXPECT_TRUE(back.results[0].timeline.empty());
  j["schema_version"] = 5;  // newer than this reader
  EXPECT_THROW((void)report_from_json(j), std::runtime_error);
}

TEST(TimelineReport, ChromeTraceHasOneProcessPerRankAndCasesInSequence) {
  Report rep;
  rep.results.push_back(with_timeline(0, "a"));
  rep.results.push_back(with_timeline(1, "b"));
  const nlohmann::json t = chrome_trace(rep);
  ASSERT_TRUE(t["traceEvents"].is_array());
  std::set<int> names;
  double a_end = 0, b_start = 1e18;
  int x = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") names.insert(e["pid"].get<int>());
      continue;
    }
    ++x;
    EXPECT_EQ(e["ph"], "X");
    const double ts = e["ts"], dur = e["dur"];
    if (e["args"]["case"] == "a") a_end = std::max(a_end, ts + dur);
    if (e["args"]["case"] == "b") b_start = std::min(b_start, ts);
    if (e["name"] == "ring_bwd:1") {
      EXPECT_EQ(e["tid"], 3);
    }
    if (e["name"] == "forward") {
      EXPECT_EQ(e["tid"], 0);
    }
  }
  EXPECT_EQ(x, 2 * 2 * 6);
  EXPECT_EQ(names, (std::set<int>{0, 1}));
  EXPECT_GT(b_start, a_end) << "cases overlap on the time axis";
}

TEST(TimelineReport, HtmlShowsAGanttChartAndMarkdownATablePerCase) {
  Report rep;
  rep.results.push_back(with_timeline(0, "case-with-timeline"));
  const std::string html = html_report(rep);
  EXPECT_NE(html.find("Timeline of the median timed step"), std::string::npos);
  EXPECT_NE(html.find("rank 1 ring_fwd:0 (wait)"), std::string::npos);
  EXPECT_NE(html.find("rank 0 ring_bwd:1 (transfer)"), std::string::npos);
  const std::string md = markdown_report(rep);
  EXPECT_NE(md.find("| case-with-timeline | 1 | 10 | 2 | 0.5 |"), std::string::npos) << md;
  Report none;
  none.results.push_back(RunResult{});
  EXPECT_EQ(html_report(none).find("Timeline of the median timed step"), std::string::npos);
}
