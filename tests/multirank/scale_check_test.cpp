// scripts/scale-check.sh (the W = 5-8 CPU sweeps a session with the 16-core GPU machine runs, issue 36)
// run on this machine at W = 2 with the built cpbench (CPBENCH_SCALE_BIN) and the CI scenarios
// (CPBENCH_SCALE_SCENARIOS): its summary must count what cpbench reported, and `all_ok` and the exit
// status must follow a failing case and a scenario that ran out of its budget.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_paths.hpp"

namespace cpbench {
namespace {

struct ScriptRun {
  int status = -1;
  nlohmann::json summary;
  std::string output;
};

// Runs the script with OUT = `out`; `scenarios` are paths relative to the source tree.
ScriptRun run_scale_check(const std::string& out, const std::string& scenarios, const std::string& args) {
  const std::string src = CPBENCH_SOURCE_DIR;
  std::string list;
  std::istringstream in(scenarios);
  for (std::string s; in >> s;) {
    if (!list.empty()) list += ' ';
    if (s.front() != '/') list += src + '/';
    list += s;
  }
  // The shell clears OUT (std::filesystem resolves to libtorch's own copy of it, which crashes here).
  std::string cmd = "rm -rf '" + out;
  cmd += "'; OUT='" + out;
  cmd += "' CPBENCH_SCALE_SCENARIOS='" + list;
  cmd += "' CPBENCH_SCALE_BIN='";
  cmd += CPBENCH_EXE;
  cmd += "' OMP_NUM_THREADS=1 bash '" + src;
  cmd += "/scripts/scale-check.sh' " + args;
  cmd += " 2>&1";
  ScriptRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  const int st = pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(out + "/scale-summary.json");
  if (f) r.summary = nlohmann::json::parse(f, nullptr, false);
  return r;
}

// Per process: two clones' test runs at once must not share a folder.
std::string scratch(const std::string& name) {
  return "/tmp/cpbench_scale_check_" + std::to_string(::getpid()) + "_" + name;
}

// A passing test leaves nothing behind; a failing one keeps its folders to read.
void remove_unless_failed(const std::vector<std::string>& paths) {
  if (::testing::Test::HasFailure()) return;
  for (const auto& p : paths) std::system(("rm -rf '" + p + "'").c_str());
}

TEST(ScaleCheck, CountsWhatEachScenarioRan) {
  const ScriptRun r = run_scale_check(scratch("ok"), "scenarios/mla_latent.yaml scenarios/sliding_layers.yaml",
                                      "--filter 'load_balanced/a2a/cp2/' --budget 240");
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(r.summary.is_object()) << r.output;
  EXPECT_TRUE(r.summary["all_ok"].get<bool>());
  const auto& s = r.summary["scenarios"];
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0]["scenario"], "mla_latent");
  EXPECT_EQ(s[0]["ok"], 2);  // float64 and bf16
  EXPECT_EQ(s[1]["scenario"], "sliding_layers");
  EXPECT_EQ(s[1]["ok"], 1);
  EXPECT_EQ(s[0]["budget_s"], 120);
  remove_unless_failed({scratch("ok")});
}

TEST(ScaleCheck, AFailingCaseOrAnExhaustedBudgetIsNotOk) {
  // A negative control expected to match: the case fails, cpbench exits non-zero.
  const std::string yaml = scratch("control.yaml");
  std::ofstream(yaml) << "name: control\nmodel: {preset: tiny}\nbatch: {batch_size: 1, seq_len: 64}\n"
                         "measure: {max_time_s: 0, collectives: false}\n"
                         "sweep:\n  - {sharder: local_only, transport: allgather, cp: 2, mask: causal}\n";
  const ScriptRun failed = run_scale_check(scratch("fail"), yaml, "--filter '' --budget 120");
  EXPECT_EQ(failed.status, 1) << failed.output;
  ASSERT_TRUE(failed.summary.is_object()) << failed.output;
  EXPECT_FALSE(failed.summary["all_ok"].get<bool>());
  EXPECT_EQ(failed.summary["scenarios"][0]["failed"], 1);

  const ScriptRun late = run_scale_check(scratch("late"), "scenarios/mla_latent.yaml", "--filter 'cp2/' --budget 1");
  EXPECT_EQ(late.status, 1) << late.output;
  ASSERT_TRUE(late.summary.is_object()) << late.output;
  EXPECT_FALSE(late.summary["all_ok"].get<bool>());
  EXPECT_EQ(late.summary["scenarios"][0]["exit"], 124);
  EXPECT_EQ(late.summary["scenarios"][0]["why"], "timed out");
  remove_unless_failed({yaml, scratch("fail"), scratch("late")});
}

}  // namespace
}  // namespace cpbench
