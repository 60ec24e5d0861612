// The regression gate: noise-aware (capped) throughput threshold, ok->failed/skipped/missing
// transitions, inconclusive noisy runs, round-trip of the report schema.
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
  EXPECT_EQ(d.only_in_new.size(), 1u);
  ASSERT_EQ(d.cases.size(), 2u);
  EXPECT_EQ(d.cases[0].new_status, "missing");
  EXPECT_TRUE(d.regressed()) << "cases missing from the new report are lost coverage";
}

TEST(Compare, MissingCaseIsARegression) {
  Report base = report({result("a", 1000, 0.01), result("b", 1000, 0.01)});
  Report next = report({result("a", 1000, 0.01)});
  Comparison c = compare_reports(base, next, 0.05);
  EXPECT_TRUE(c.regressed());
  EXPECT_EQ(c.exit_status(), 1);
  EXPECT_NE(comparison_table(c, 0.05).find("b"), std::string::npos);
  EXPECT_NE(comparison_table(c, 0.05).find("REGRESSION: missing from the new report"), std::string::npos);
}

TEST(Compare, OkToSkippedIsARegression) {
  Report base = report({result("a", 1000, 0.01)});
  RunResult skipped = result("a", 0, 0.0, "skipped");
  skipped.reason = "device: cuda requested, but CUDA is not available here";
  Comparison c = compare_reports(base, report({skipped}), 0.05);
  EXPECT_TRUE(c.regressed());
  EXPECT_NE(c.cases[0].why.find("ran before, skipped now: device: cuda"), std::string::npos) << c.cases[0].why;
  // skipped -> skipped is not a regression: nothing was lost.
  EXPECT_FALSE(compare_reports(report({skipped}), report({skipped}), 0.05).regressed());
}

TEST(Compare, NoiseAllowanceIsCapped) {
  // A 40% spread must not hide a 30% drop: the allowance stops at --max-noise (25%).
  Report noisy_base = report({result("a", 1000, 0.40)});
  Report dropped = report({result("a", 700, 0.02)});
  Comparison c = compare_reports(noisy_base, dropped, 0.05, 0.25);
  EXPECT_TRUE(c.regressed());
  EXPECT_NEAR(c.cases[0].allowed, 0.25, 1e-12);
  EXPECT_EQ(c.exit_status(), 1);
  // A 10% drop inside a 40% spread: cannot tell, so neither pass nor regression.
  Comparison d = compare_reports(noisy_base, report({result("a", 900, 0.02)}), 0.05, 0.25);
  EXPECT_FALSE(d.regressed());
  EXPECT_TRUE(d.inconclusive());
  EXPECT_EQ(d.exit_status(), kCompareInconclusive);
  EXPECT_NE(comparison_table(d, 0.05, 0.25).find("INCONCLUSIVE: spread 40.0% exceeds --max-noise 25.0%"),
            std::string::npos)
      << comparison_table(d, 0.05, 0.25);
  // Spread within the cap still widens the allowance (the noise-aware gate).
  Comparison e = compare_reports(report({result("a", 1000, 0.20)}), report({result("a", 850, 0.02)}), 0.05, 0.25);
  EXPECT_FALSE(e.regressed());
  EXPECT_FALSE(e.inconclusive());
  EXPECT_EQ(e.exit_status(), 0);
  // A regression wins over inconclusive cases.
  Comparison f = compare_reports(report({result("a", 1000, 0.40), result("b", 1000, 0.01)}),
                                 report({result("a", 900, 0.02), result("b", 500, 0.01)}), 0.05, 0.25);
  EXPECT_TRUE(f.inconclusive());
  EXPECT_EQ(f.exit_status(), 1);
}

TEST(ReportJson, RoundTripsEveryField) {
  Report r = report({result("a", 1234.5, 0.07)});
  r.scenario_name = "s";
  r.partial = true;
  r.partial_reason = "interrupted";
  r.env.torch_version = "2.11.0";
  r.results[0].axes = {{"cp", "2"}};
  TensorError e;
  e.tensor = "logits";
  e.criterion = "elementwise";
  e.step = "last";
  e.elements = 4096;
  e.mismatches = 3;
  e.max_abs = 1e-12;
  e.max_rel = 3e-13;
  e.score = 1.5;
  e.rtol = 1e-10;
  e.atol = 1e-12;
  e.ok = false;
  e.worst = "(b=0, s=1, v=2) owned by rank 1";
  r.results[0].errors.push_back(e);
  TensorError p = e;
  p.criterion = "precision";
  p.k = 2;
  p.floor = 1e-6;
  p.quantile = 0.99;
  p.single_rank_max = 0.01;
  p.single_rank_q = 0.005;
  p.cp_q = 0.004;
  r.results[0].errors.push_back(p);
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
  // Noisy: every case's spread at 40% and throughput 10% lower -> inconclusive, its own status.
  nlohmann::json noisy = read_json_file(base);
  for (auto& r : noisy["results"])
    if (r["metrics"].contains("tokens_per_s")) {
      r["metrics"]["tokens_per_s"]["value"] = r["metrics"]["tokens_per_s"]["value"].get<double>() * 0.9;
      r["metrics"]["tokens_per_s"]["spread"] = 0.4;
    }
  const std::string noisy_path = "/tmp/cpbench-compare-noisy-" + std::to_string(::getpid()) + ".json";
  write_json_file(noisy_path, noisy);
  EXPECT_EQ(run(base + " " + noisy_path), kCompareInconclusive);
  EXPECT_EQ(run(base + " " + noisy_path + " --max-noise 50"), 0);
  // A case dropped from the new report.
  nlohmann::json fewer = read_json_file(base);
  fewer["results"].erase(fewer["results"].begin());
  const std::string fewer_path = "/tmp/cpbench-compare-fewer-" + std::to_string(::getpid()) + ".json";
  write_json_file(fewer_path, fewer);
  EXPECT_EQ(run(base + " " + fewer_path), 1);
  std::remove(halved.c_str());
  std::remove(noisy_path.c_str());
  std::remove(fewer_path.c_str());
}
