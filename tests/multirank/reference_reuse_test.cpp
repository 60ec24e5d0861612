// One single-rank reference per problem, end to end (harness/runner/reference_cache.hpp): a sweep of
// two masks at two CP sizes through `cpbench run`. Each world size's rank processes compute one
// reference per mask and every other case reuses its own mask's; a reference reused across masks would
// judge the document cases against the causal run's outputs and fail them, so every case matching is
// what shows the reuse never crossed problems.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <string>

#include "harness/fs_util.hpp"
#include "reports/json_report.hpp"
#include "spawn_cpbench.hpp"

using namespace cpbench;

TEST(ReferenceReuse, OnePerMaskAndWorldSizeAndEveryCaseMatches) {
  const std::string dir = "/tmp/cpbench-reference-reuse-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  const std::string scenario = dir + "/reuse.yaml";
  // Cases alternate masks (the mask is the innermost axis), so a cache keeping only the latest
  // problem would compute every time.
  std::ofstream(scenario) << R"(name: reuse
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64, documents: [30, 34]}
dtype: float64
measure: {max_time_s: 0, collectives: false}
timeout_s: 30
sweep:
  sharder: [contiguous, load_balanced, striped]
  transport: ring
  cp: [1, 2]
  mask: [causal, document]
)";
  ASSERT_EQ(test::wait_exit_status(test::spawn_cpbench_run({scenario, "--out", dir + "/out"})), 0);
  const Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  ASSERT_EQ(r.results.size(), 12u);
  std::map<std::string, int> computed;  // per "cp/mask"
  int reused = 0;
  for (const RunResult& c : r.results) {
    EXPECT_EQ(c.status, "ok") << c.name << ": " << c.reason;
    EXPECT_EQ(c.outcome, "match") << c.name;
    ASSERT_TRUE(c.reference == "computed" || c.reference == "reused") << c.name << ": '" << c.reference << "'";
    const std::string problem = c.axes.at("cp") + "/" + c.axes.at("mask");
    if (c.reference == "computed") {
      ++computed[problem];
      EXPECT_GT(c.metric("reference_step_s")->value, 0) << c.name;
    } else {
      ++reused;
      EXPECT_EQ(computed[problem], 1) << c.name << ": reused before its problem's reference was computed";
      EXPECT_EQ(c.metric("reference_step_s")->value, 0) << c.name;
    }
  }
  EXPECT_EQ(computed.size(), 4u);  // W = 1 and W = 2 run in their own rank processes
  for (const auto& [problem, n] : computed) EXPECT_EQ(n, 1) << problem;
  EXPECT_EQ(reused, 8);
  std::ifstream md(dir + "/out/report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("single-rank references: 4 computed, 8 reused"), std::string::npos) << text.substr(0, 1200);
  fsu::remove_tree(dir);
}
