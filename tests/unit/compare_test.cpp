// The regression gate: noise-aware throughput threshold, ok->failed transitions, round-trip of the
// report schema.
#include <gtest/gtest.h>

#include "reports/compare.hpp"
#include "reports/json_report.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

using namespace cpbench;

namespace {
RunResult result(const std::string& name, double tps, double spread, const std::string& status = "ok") {
  RunResult r;
  r.name = name;
  r.status = status;
  r.metrics.push_back({"tokens_per_s", tps, "tokens/s", spread});
  return r;
}
Report report(std::vector<RunResult> rs) {
  Report r;
  r.results = std::move(rs);
  r.total_cases = static_cast<int64_t>(r.results.size());
  return r;
}
}  // namespace

TEST(Compare, UnchangedPassesHalvedFails) {
  Report base = report({result("a", 1000, 0.02), result("b", 500, 0.01)});
  EXPECT_FALSE(compare_reports(base, base, 0.05).regressed());
  Report half = report({result("a", 500, 0.02), result("b", 500, 0.01)});
  Comparison c = compare_reports(base, half, 0.05);
  EXPECT_TRUE(c.regressed());
  EXPECT_TRUE(c.cases[0].regression);
  EXPECT_FALSE(c.cases[1].regression);
  EXPECT_NE(comparison_table(c, 0.05).find("REGRESSION: throughput fell 50.0%"), std::string::npos);
}

TEST(Compare, ThresholdIsTheLargerOfPercentAndMeasuredSpread) {
  Report base = report({result("a", 1000, 0.30)});
  Report slower = report({result("a", 800, 0.01)});  // -20%: inside base's 30% spread
  EXPECT_FALSE(compare_reports(base, slower, 0.05).regressed());
  Report quiet = report({result("a", 1000, 0.01)});
  EXPECT_TRUE(compare_reports(quiet, slower, 0.05).regressed());   // -20% > max(5%, 1%)
  EXPECT_FALSE(compare_reports(quiet, slower, 0.25).regressed());  // threshold 25%
}

TEST(Compare, PassedBeforeFailsNowIsARegressionAndFasterIsNot) {
  Report base = report({result("a", 1000, 0.0), result("b", 1000, 0.0, "failed")});
  Report next = report({result("a", 0, 0.0, "failed"), result("b", 1000, 0.0)});
  Comparison c = compare_reports(base, next, 0.05);
  EXPECT_TRUE(c.cases[0].regression);
  EXPECT_FALSE(c.cases[1].regression);
  Report faster = report({result("a", 3000, 0.0), result("b", 1000, 0.0, "failed")});
  EXPECT_FALSE(compare_reports(base, faster, 0.05).regressed());
  Report other = report({result("c", 10, 0.0)});
  Comparison d = compare_reports(base, other, 0.05);
  EXPECT_EQ(d.only_in_base.size(), 2u);
  EXPECT_EQ(d.only_in_new.size(), 1u);
  EXPECT_FALSE(d.regressed());
}

TEST(ReportJson, RoundTripsEveryField) {
  Report r = report({result("a", 1234.5, 0.07)});
  r.scenario_name = "s";
  r.partial = true;
  r.partial_reason = "interrupted";
  r.env.torch_version = "2.11.0";
  r.results[0].axes = {{"cp", "2"}};
  r.results[0].errors.push_back({"logits", 1e-12, 3e-13, 1e-10, true, "(b=0, s=1, v=2) owned by rank 1"});
  r.results[0].ranks.push_back({1, 0.5, 2e9, 1e6, 0.1});
  Report back = report_from_json(to_json(r));
  EXPECT_EQ(to_json(back).dump(), to_json(r).dump());
  EXPECT_TRUE(back.partial);
  EXPECT_THROW((void)report_from_json(nlohmann::json{{"schema", "other"}}), std::runtime_error);
}

// The CLI, as a user runs it: unchanged report passes (exit 0), halved throughput fails (exit 1),
// a missing file is bad input (exit 2).
TEST(CompareCli, DoctoredReportWithHalvedThroughputFails) {
  const std::string base = std::string(CPBENCH_SOURCE_DIR) + "/reports/baselines/perf_ci.json";
  nlohmann::json j = read_json_file(base);
  for (auto& r : j["results"])
    if (r["metrics"].contains("tokens_per_s")) r["metrics"]["tokens_per_s"]["value"] = r["metrics"]["tokens_per_s"]["value"].get<double>() / 2;
  const std::string halved = "/tmp/cpbench-compare-halved-" + std::to_string(::getpid()) + ".json";
  write_json_file(halved, j);
  auto run = [](const std::string& args) {
    const int st = std::system((std::string(CPBENCH_EXE) + " compare " + args + " > /dev/null 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  EXPECT_EQ(run(base + " " + base), 0);
  EXPECT_EQ(run(base + " " + halved), 1);
  EXPECT_EQ(run(base + " /nonexistent.json"), 2);
  std::remove(halved.c_str());
}
