// `cpbench history` as a user runs it: reports added in order, `check` naming the planted case and its
// first slow run (exit 1), too few runs (exit 4), the trend page and JSON, two `history add` processes at
// once, and one line with exit 2 for every kind of bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "harness/fs_util.hpp"
#include "reports/history_store.hpp"
#include "reports/json_report.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE

using namespace cpbench;

namespace {
struct Ran {
  int status = -1;
  std::string out;
};
Ran run_cli(const std::string& args) {
  const std::string log = "/tmp/cpbench-history-cli-" + std::to_string(::getpid()) + ".out";
  const int st = std::system((std::string(CPBENCH_EXE) + " " + args + " > " + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(log.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, ss.str()};
}

// A finished report of cases a and b; b runs at `b_factor` x its speed. Returns its path.
std::string write_report(const std::string& dir, int i, double b_factor, std::mt19937& g) {
  std::normal_distribution<double> jitter(0, 0.02);
  Report r;
  r.scenario_name = "nightly";
  r.env.git_commit = "commit" + std::to_string(i);
  r.env.started_at = "2026-12-02T00:00:" + std::to_string(10 + i);
  r.env.host = "vm";
  for (const char* name : {"a", "b"}) {
    RunResult c;
    c.name = name;
    const double step = 0.1 / (std::string(name) == "b" ? b_factor : 1.0) * (1 + jitter(g));
    c.measurement.step_s = {step * 0.99, step, step * 1.01, step, step};
    c.measurement.cpu_s = {step, step, step, step, step};
    c.metrics = {{"tokens_per_s", 2048 / step, "tokens/s", 0.02}, {"step_s", step, "s", 0.02}};
    r.results.push_back(c);
  }
  r.total_cases = 2;
  const std::string path = dir + "/report" + std::to_string(i) + ".json";
  write_json_file(path, to_json(r));
  return path;
}
}  // namespace

TEST(HistoryCli, NightlyWorkflowAddCheckShow) {
  char tmpl[] = "/tmp/cpbench-history-cli-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string db = " --db " + dir + "/h.db";
  std::mt19937 g(11);
  std::vector<std::string> reports;
  for (int i = 0; i < 18; ++i) reports.push_back(write_report(dir, i, i < 12 ? 1.0 : 0.85, g));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(run_cli("history add " + reports[i] + db).status, 0);
  const Ran short_check = run_cli("history check" + db);
  EXPECT_EQ(short_check.status, 4) << short_check.out;
  EXPECT_NE(short_check.out.find("too short to judge"), std::string::npos) << short_check.out;
  // Runs 6 to 17 through the library (the same store and file; each cpbench start loads LibTorch), the
  // last one through the CLI again.
  {
    const auto store = open_history_store(dir + "/h.db", false);
    for (int i = 5; i < 17; ++i)
      (void)store->add(history_run_from_report(report_from_json(read_json_file(reports[i])), "nightly"));
  }
  const Ran add = run_cli("history add " + reports[17] + db + " --label nightly");
  ASSERT_EQ(add.status, 0) << add.out;
  EXPECT_NE(add.out.find("run 18 (2 cases, commit commit17)"), std::string::npos) << add.out;
  const Ran check = run_cli("history check" + db);
  EXPECT_EQ(check.status, 1) << check.out;
  EXPECT_NE(check.out.find("a (18 runs): no change point"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("b (18 runs): change at run 13 (commits commit11..commit12)"), std::string::npos)
      << check.out;
  EXPECT_NE(check.out.find("REGRESSION: slower by"), std::string::npos) << check.out;
  EXPECT_EQ(run_cli("history check" + db + " --filter '^a$'").status, 0);
  EXPECT_EQ(run_cli("history check" + db + " --threshold 30").status, 0) << "a 15% drop under a 30% threshold";
  const Ran html = run_cli("history show" + db + " --html " + dir + "/trend.html");
  EXPECT_EQ(html.status, 0) << html.out;
  std::ifstream page(dir + "/trend.html");
  std::stringstream ps;
  ps << page.rdbuf();
  EXPECT_NE(ps.str().find("class='change' data-run='13'"), std::string::npos);
  const Ran json = run_cli("history show" + db + " --format json --metric step_s");
  ASSERT_EQ(json.status, 0) << json.out;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["metric"], "step_s");
  EXPECT_EQ(j["cases"][1]["changes"][0]["first_run_id"], 13);
  fsu::remove_tree(dir);  // not std::filesystem: libtorch.so exports its own copy (another ABI)
}

TEST(HistoryCli, TwoAddsAtOnceAndBadInputGetsOneLineAndExit2) {
  char tmpl[] = "/tmp/cpbench-history-cli-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  std::mt19937 g(12);
  const std::string r1 = write_report(dir, 1, 1.0, g), r2 = write_report(dir, 2, 1.0, g);
  const std::string db = dir + "/h.db";
  // Two processes, each adding five runs, at once.
  // (PIDs, not job specs: a non-interactive bash has no job control, and `wait %1` exits 127 there.)
  std::string both = "bash -c '";
  int n = 0;
  for (const auto& r : {r1, r2})
    both += "(for i in 1 2 3 4 5; do " + std::string(CPBENCH_EXE) + " history add " + r + " --db " + db +
            " > /dev/null || exit 1; done) & p" + std::to_string(++n) + "=$!; ";
  both += "wait $p1 && wait $p2'";
  ASSERT_EQ(std::system(both.c_str()), 0);
  const Ran all = run_cli("history show --db " + db + " --format json");
  ASSERT_EQ(all.status, 0) << all.out;
  EXPECT_EQ(nlohmann::json::parse(all.out)["runs"], 10);
  // Bad input: one line on stderr, exit 2, naming the culprit.
  const auto bad = [&](const std::string& args, const std::string& says) {
    const Ran r = run_cli(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  };
  std::ofstream(dir + "/foreign.json") << R"({"name": "not ours"})";
  std::ofstream(dir + "/text.db") << "plain text\n";
  nlohmann::json partial = read_json_file(r1);
  partial["partial"] = true;
  write_json_file(dir + "/partial.json", partial);
  bad("history add " + dir + "/absent.json --db " + db, "absent.json: cannot open");
  bad("history add " + dir + "/foreign.json --db " + db, "not a cpbench report");
  bad("history add " + dir + "/partial.json --db " + db, "a partial report");
  bad("history add " + r1 + " --db " + dir + "/text.db", "text.db: ");
  bad("history check --db " + dir + "/absent.db", "no such history database");
  bad("history check --db " + db + " --metric nope", "--metric nope: no stored run has it");
  bad("history check --db " + db + " --filter '^zz'", "no stored case matches");
  bad("history check --db nosql:x", "unknown history store 'nosql' (known: sqlite)");
  fsu::remove_tree(dir);  // not std::filesystem: libtorch.so exports its own copy (another ABI)
}
