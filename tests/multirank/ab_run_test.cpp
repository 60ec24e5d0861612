// One real `cpbench compare --ab` session (issue 39: no test ran it): this build against itself on a
// one-case scenario, two rounds per side (one block). The rounds must run in an ABBA or BAAB order (read
// from the command's own progress lines, i.e. the order the processes ran), every round leaves its
// report, and the verdict table names the case with an exit status of 0 (ok) or 4 (inconclusive: one
// block of the same build can never reach a regression).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/fs_util.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE

extern char** environ;

using namespace cpbench;

namespace {

const char* kScenario = R"(name: ab-one-case
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64}
dtype: float32
device: cpu
timeout_s: 60
measure: {warmup: 1, iters: 3, max_time_s: 0.05, collectives: false, peak_flops: 1.0e+13}
sweep: {sharder: contiguous, transport: allgather, cp: 1, mask: causal}
)";

int run_to(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.push_back(*e);
  env_s.push_back("OMP_NUM_THREADS=1");
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "could not start " << argv[0];
  if (rc != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST(AbRun, OneCaseSessionRunsItsRoundsAbbaOrBaabAndJudgesThem) {
  const std::string dir = "/tmp/cpbench-ab-run-test-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  std::ofstream(dir + "/s.yaml") << kScenario;
  const std::string exe = CPBENCH_EXE;
  const int status = run_to({exe, "compare", "--ab", exe, dir + "/s.yaml", "--rounds", "2", "--seed", "3", "--out",
                             dir + "/ab"},
                            dir + "/log.txt");
  std::ifstream in(dir + "/log.txt");
  std::string line, order, all;
  while (std::getline(in, line)) {
    all += line + "\n";
    if (line.rfind("[ab] ", 0) != 0) continue;
    if (line.size() >= 5 && line.compare(line.size() - 5, 5, ": new") == 0) order += 'B';
    else if (line.size() >= 6 && line.compare(line.size() - 6, 6, ": base") == 0) order += 'A';
  }
  ASSERT_TRUE(status == 0 || status == 4) << "exit " << status << "\n" << all;
  EXPECT_TRUE(order == "ABBA" || order == "BAAB") << "the rounds ran " << order << "\n" << all;
  for (const std::string side : {"base", "new"})
    for (const std::string half : {"0", "1"})
      EXPECT_TRUE(fsu::exists(dir + "/ab/" + side + "/0-b0-" + half + "/report.json")) << side << " " << half;
  std::ifstream table(dir + "/ab/comparison.txt");
  std::stringstream t;
  t << table.rdbuf();
  EXPECT_NE(t.str().find("contiguous"), std::string::npos) << t.str();
  fsu::remove_tree(dir);
}
