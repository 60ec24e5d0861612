// Ranks never outlive their launcher, and `cpbench run`'s exit status tells a CI what happened:
//  - the launcher SIGKILLed, SIGTERMed or interrupted (SIGINT) while its ranks are busy: no rank is
//    alive 5 s later (found by an environment marker only this test's processes carry);
//  - every case skipped (device: cuda without CUDA) exits 3, spawned or joined, unless --allow-skips;
//  - a joined (torchrun-style) run with a failed case exits 1, not 130;
//  - mutated scenarios through the real CLI exit 0, 1, 2 or 3 and never leave a half-written report.
#include <gtest/gtest.h>
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <torch/cuda.h>

#include "../scenario_mutator.hpp"
#include "harness/fs_util.hpp"
#include "spawn_cpbench.hpp"
#include "harness/launcher/launcher.hpp"
#include "harness/runner/scenario.hpp"
#include "reports/json_report.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {

std::string temp_dir(const std::string& tag) {
  std::string d = "/tmp/cpbench-lifecycle-" + tag + "-" + std::to_string(::getpid());
  fsu::remove_tree(d);
  fsu::make_dirs(d);
  return d;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `cpbench run ARGS` in its own process group (as a shell job), with extra environment entries.
pid_t start(const std::vector<std::string>& run_args, const std::vector<std::string>& extra_env) {
  return test::spawn_cpbench_run(run_args, extra_env);
}

// Exit status as a shell reports it (128 + signal when killed); -1 when it did not end in `limit`.
int wait_exit(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(300)) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > limit) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Live (not zombie) processes whose environment holds `marker`, other than `except`.
std::set<pid_t> marked_processes(const std::string& marker, pid_t except) {
  std::set<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* d = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(d->d_name));
    if (pid <= 0 || pid == except) continue;
    const std::string base = std::string("/proc/") + d->d_name;
    const std::string env = slurp(base + "/environ");
    if (env.find(marker) == std::string::npos) continue;
    const std::string stat = slurp(base + "/stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    out.insert(pid);
  }
  ::closedir(proc);
  return out;
}

// Rank 0 hangs in case 0; rank 1 waits for it (timeout_s 60): busy ranks that would outlive a
// launcher that cannot take them down.
const char* kBusy = R"(name: busy
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64}
timeout_s: 60
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)";

}  // namespace

class LauncherDeath : public ::testing::TestWithParam<int> {};

TEST_P(LauncherDeath, NoRankOutlivesItsLauncher) {
  const int sig = GetParam();
  const std::string dir = temp_dir("death" + std::to_string(sig));
  std::ofstream(dir + "/busy.yaml") << kBusy;
  const std::string marker = "CPBENCH_LIFECYCLE_MARK=" + std::to_string(::getpid()) + "-" + std::to_string(sig);
  const pid_t launcher = start({dir + "/busy.yaml", "--out", dir + "/out"}, {marker, "CPBENCH_FAULT=hang:0:0"});
  std::set<pid_t> ranks;
  for (int i = 0; i < 600 && ranks.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ranks = marked_processes(marker, launcher);
  }
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start";
  std::this_thread::sleep_for(std::chrono::seconds(2));  // past start-up: in LibTorch, in the case
  if (sig == SIGINT)
    ::kill(-launcher, SIGINT);  // Ctrl-C: the terminal signals the launcher's process group
  else
    ::kill(launcher, sig);
  const auto t_signal = std::chrono::steady_clock::now();
  const int rc = wait_exit(launcher, std::chrono::seconds(60));
  std::set<pid_t> alive = marked_processes(marker, launcher);
  while (!alive.empty() && std::chrono::steady_clock::now() - t_signal < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    alive = marked_processes(marker, launcher);
  }
  EXPECT_TRUE(alive.empty()) << alive.size() << " rank process(es) outlived the launcher by 5 s";
  for (pid_t p : alive) ::kill(p, SIGKILL);  // do not leave them to the next test
  EXPECT_EQ(rc, sig == SIGINT ? 130 : 128 + sig);
  if (sig != SIGKILL) {
    // The launcher could clean up: a valid report, marked partial (interrupted).
    Report r = report_from_json(read_json_file(dir + "/out/report.json"));
    EXPECT_TRUE(r.partial);
    EXPECT_EQ(r.partial_reason, "interrupted");
  }
  fsu::remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(Signals, LauncherDeath, ::testing::Values(SIGKILL, SIGTERM, SIGINT),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == SIGKILL ? "SIGKILL" : i.param == SIGTERM ? "SIGTERM" : "SIGINT");
                         });

const char* kCuda = R"(name: cuda
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64}
device: cuda
timeout_s: 30
sweep: {sharder: load_balanced, transport: ring, cp: [1, 2]}
)";

TEST(ExitCodes, NothingRanIsExit3UnlessSkipsAreAllowed) {
  const std::string dir = temp_dir("skips");
  std::ofstream(dir + "/cuda.yaml") << kCuda;
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA is available here: the cuda cases would run";
  EXPECT_EQ(wait_exit(start({dir + "/cuda.yaml", "--out", dir + "/out"}, {})), 3);
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].status, "skipped");
  EXPECT_EQ(wait_exit(start({dir + "/cuda.yaml", "--out", dir + "/out2", "--allow-skips"}, {})), 0);
  // Joined (torchrun-style): both ranks report 3 as well.
  comm::LaunchOptions o;
  o.executable = CPBENCH_EXE;
  o.args = {"run", dir + "/cuda.yaml", "--out", dir + "/joined", "--filter", "cp2"};
  o.world_size = 2;
  o.env["OMP_NUM_THREADS"] = "1";
  o.deadline = std::chrono::seconds(120);
  const comm::LaunchResult lr = comm::launch(o);
  ASSERT_EQ(lr.ranks.size(), 2u);
  EXPECT_EQ(lr.ranks[0].exit_code, 3) << lr.describe_failures();
  EXPECT_EQ(lr.ranks[1].exit_code, 3) << lr.describe_failures();
  fsu::remove_tree(dir);
}

TEST(ExitCodes, JoinedRunWithAFailedCaseExits1) {
  const std::string dir = temp_dir("joinedfail");
  std::ofstream(dir + "/s.yaml") << R"(name: jf
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64}
timeout_s: 5
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)";
  comm::LaunchOptions o;
  o.executable = CPBENCH_EXE;
  o.args = {"run", dir + "/s.yaml", "--out", dir + "/out"};
  o.world_size = 2;
  o.env["OMP_NUM_THREADS"] = "1";
  o.env["CPBENCH_FAULT"] = "throw:0:1";
  o.grace = std::chrono::seconds(30);
  o.deadline = std::chrono::seconds(120);
  const comm::LaunchResult lr = comm::launch(o);
  ASSERT_EQ(lr.ranks.size(), 2u);
  EXPECT_EQ(lr.ranks[0].exit_code, 1) << "rank 0 reports the failed case; " << lr.describe_failures();
  EXPECT_EQ(lr.ranks[1].exit_code, 1) << lr.describe_failures();
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].status, "failed");
  fsu::remove_tree(dir);
}

// A few mutated scenarios through the real CLI (each spawns ranks, so a handful, not thousands; the
// in-process fuzz in tests/unit/fuzz_test.cpp covers the parser). Cases are limited to W <= 2 of the
// small shipped scenarios to keep it short.
TEST(ScenarioFuzzCli, ExitStatusIsKnownAndReportsAreWhole) {
  const std::string dir = temp_dir("fuzzcli");
  std::vector<std::string> bases;
  for (const char* name : {"correctness", "variants"}) bases.push_back(slurp(std::string(CPBENCH_SOURCE_DIR) + "/scenarios/" + name + ".yaml"));
  // Most mutations are bad input; take four that parse (so ranks do start) and two that do not.
  std::vector<std::string> picked;
  int parsing = 0, failing = 0;
  for (uint64_t seed = 7000; picked.size() < 6 && seed < 9000; ++seed) {
    const std::string text = test::mutate_scenario(bases[seed % bases.size()], seed);
    bool parses = true;
    try {
      (void)parse_scenario(text, "m.yaml");
    } catch (const std::exception&) {
      parses = false;
    }
    if (parses ? parsing++ < 4 : failing++ < 2) picked.push_back(text);
  }
  ASSERT_EQ(picked.size(), 6u);
  int ran = 0;
  for (uint64_t i = 0; i < picked.size(); ++i) {
    const std::string& text = picked[i];
    const std::string path = dir + "/m" + std::to_string(i) + ".yaml", out = dir + "/out" + std::to_string(i);
    std::ofstream(path) << text;
    const pid_t p = start({path, "--out", out, "--filter", "^load_balanced/ring/cp[12]/(causal|document)/float64$"},
                          {});
    const int rc = wait_exit(p, std::chrono::seconds(240));
    EXPECT_TRUE(rc == 0 || rc == 1 || rc == 2 || rc == 3) << "mutation " << i << " exited " << rc << "\n" << text;
    ran += rc == 0 || rc == 1;
    if (fsu::exists(out + "/report.json")) {
      EXPECT_NO_THROW((void)report_from_json(read_json_file(out + "/report.json"))) << "mutation " << i;
      EXPECT_FALSE(fsu::exists(out + "/report.json.tmp")) << "a half-written report was left behind";
    }
  }
  std::cout << "[fuzz] CLI: " << ran << " of 6 mutated scenarios ran cases\n";
  EXPECT_GE(ran, 1) << "no mutated scenario reached the ranks";
  fsu::remove_tree(dir);
}
