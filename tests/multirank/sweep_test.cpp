// `cpbench run` as a user runs it: real rank processes, a crashing, a hanging and a throwing rank,
// and an interrupted sweep. The sweep must record the bad case and go on; an interruption must leave
// a valid report marked partial.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/fs_util.hpp"
#include "spawn_cpbench.hpp"
#include "reports/json_report.hpp"

using namespace cpbench;

namespace {

const char* kScenario = R"(name: robustness
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64, documents: [30, 34]}
dtype: float64
timeout_s: 5
sweep:
  sharder: [contiguous, load_balanced, striped]
  transport: [ring]
  cp: [2]
)";

std::string temp_dir(const std::string& tag) {
  std::string d = "/tmp/cpbench-sweep-test-" + tag + "-" + std::to_string(::getpid());
  fsu::remove_tree(d);
  fsu::make_dirs(d);
  return d;
}

struct Child {
  pid_t pid = -1;
};

// Starts `cpbench run` in its own process group with an extra environment entry.
Child start(const std::string& scenario, const std::string& out, const std::string& extra_env) {
  return Child{test::spawn_cpbench_run({scenario, "--out", out}, {extra_env})};
}

int wait_exit(const Child& c) { return test::wait_exit_status(c.pid); }

std::string write_scenario(const std::string& dir) {
  const std::string path = dir + "/robustness.yaml";
  std::ofstream(path) << kScenario;
  return path;
}

}  // namespace

class FaultInSweep : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultInSweep, BadCaseIsRecordedAndTheSweepGoesOn) {
  const std::string kind = GetParam();
  const std::string dir = temp_dir(kind);
  const auto t0 = std::chrono::steady_clock::now();
  Child c = start(write_scenario(dir), dir + "/out", "CPBENCH_FAULT=" + kind + ":1:1");
  const int rc = wait_exit(c);
  EXPECT_EQ(rc, 1) << "a failed case must make the exit status 1";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120));
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  EXPECT_FALSE(r.partial);
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_EQ(r.results[0].status, "ok");
  EXPECT_EQ(r.results[1].status, "failed");
  EXPECT_EQ(r.results[2].status, "ok") << "the sweep did not go on after the bad case";
  const std::string& why = r.results[1].reason;
  if (kind == "crash") {
    EXPECT_NE(why.find("rank 1 was killed by signal 6"), std::string::npos) << why;
  } else if (kind == "throw") {
    EXPECT_NE(why.find("rank 1: injected fault in case 1 on rank 1"), std::string::npos) << why;
  } else if (kind == "hang") {
    EXPECT_NE(why.find("rank 0"), std::string::npos) << why;  // the peer noticed, named itself
  }
  EXPECT_TRUE(fsu::exists(dir + "/out/report.md"));
  EXPECT_TRUE(fsu::exists(dir + "/out/report.html"));
  fsu::remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(Kinds, FaultInSweep, ::testing::Values("crash", "throw", "hang"));

TEST(InterruptedSweep, LeavesAValidPartialReport) {
  const std::string dir = temp_dir("sigint");
  // Case 2 hangs, so the sweep is certainly still running when we interrupt it.
  Child c = start(write_scenario(dir), dir + "/out", "CPBENCH_FAULT=hang:2:0");
  const std::string case0 = dir + "/out/.cases/0.json";
  for (int i = 0; i < 600 && !fsu::exists(case0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fsu::exists(case0));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(-c.pid, SIGINT);  // Ctrl-C reaches the whole process group
  const int rc = wait_exit(c);
  EXPECT_EQ(rc, 130);
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  EXPECT_TRUE(r.partial);
  EXPECT_EQ(r.partial_reason, "interrupted");
  EXPECT_GE(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].status, "ok");
  fsu::remove_tree(dir);
}

// Joining an existing job: two `cpbench run` processes started with the torchrun environment
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK) run the W=2 cases in-process; rank 0
// writes the report; cases of another world size are skipped with the reason.
#include "harness/launcher/launcher.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

TEST(JoinedJob, TorchrunStyleEnvironmentRunsTheCasesInProcess) {
  const std::string dir = temp_dir("joined");
  const std::string scenario = dir + "/joined.yaml";
  std::ofstream(scenario) << R"(name: joined
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64, documents: [30, 34]}
timeout_s: 30
sweep:
  sharder: [load_balanced, thd]
  transport: ring
  cp: [2, 3]
)";
  comm::LaunchOptions o;
  o.executable = CPBENCH_EXE;
  o.args = {"run", scenario, "--out", dir + "/out"};
  o.world_size = 2;
  o.env["OMP_NUM_THREADS"] = "1";
  o.deadline = std::chrono::seconds(120);
  comm::LaunchResult lr = comm::launch(o);
  EXPECT_TRUE(lr.ok()) << lr.describe_failures();
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  EXPECT_EQ(r.env.launcher, "joined");
  EXPECT_FALSE(r.partial);
  ASSERT_EQ(r.results.size(), 4u);
  for (const auto& c : r.results) {
    if (c.axes.at("cp") == "2") {
      EXPECT_EQ(c.status, "ok") << c.name << ": " << c.reason;
      EXPECT_EQ(c.outcome, "match") << c.name;
    } else {
      EXPECT_EQ(c.status, "skipped") << c.name;
      EXPECT_NE(c.reason.find("needs world size cp x dp = 3, the job has 2"), std::string::npos) << c.reason;
    }
  }
  fsu::remove_tree(dir);
}
