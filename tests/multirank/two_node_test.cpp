// One job as two "nodes" on loopback, the way torchrun or SLURM starts it: each node runs its own
// `cpbench run` process with NODE_RANK, LOCAL_RANK = 0, LOCAL_WORLD_SIZE = 1, RANK, WORLD_SIZE = 2,
// MASTER_ADDR / MASTER_PORT. The ranks find each other through the store, bind Gloo to the interface
// towards MASTER_ADDR, choose the backend from the local world size, and pass the reference check; the
// report records the job's shape (2 nodes of 1 rank).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "harness/fs_util.hpp"
#include "harness/launcher/launcher.hpp"
#include "reports/json_report.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

extern char** environ;

namespace cpbench {
namespace {

pid_t spawn_node(const std::vector<std::string>& args, const std::vector<std::string>& extra_env) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    bool ours = false;  // the test's own torchrun variables replace any inherited ones
    for (const char* k : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "NODE_RANK=", "MASTER_ADDR=",
                          "MASTER_PORT=", "GLOO_SOCKET_IFNAME=", "SLURM_"})
      ours = ours || kv.rfind(k, 0) == 0;
    if (!ours) env.push_back(kv);
  }
  for (const auto& e : extra_env) env.push_back(e);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, CPBENCH_EXE, nullptr, nullptr, argv.data(), envp.data()), 0);
  return pid;
}

TEST(TwoNodeJob, TorchrunStyleNodesOnLoopbackPassTheCheck) {
  const std::string dir = "/tmp/cpbench-two-node-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  const std::string scenario = dir + "/two_node.yaml";
  std::ofstream(scenario) << R"(name: two-node
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 128, documents: [70, 58]}
timeout_s: 60
measure: {warmup: 0, iters: 1}
sweep:
  sharder: [load_balanced, thd]
  transport: [ring, allgather]
  cp: 2
  mask: [causal, document]
)";
  const int port = comm::find_free_port();
  std::vector<pid_t> pids;
  for (int node = 0; node < 2; ++node) {
    pids.push_back(spawn_node({CPBENCH_EXE, "run", scenario, "--out", dir + "/node" + std::to_string(node)},
                              {"RANK=" + std::to_string(node), "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
                               "NODE_RANK=" + std::to_string(node), "MASTER_ADDR=127.0.0.1",
                               "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"}));
  }
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "node exit status " << st;
  }
  const Report r = report_from_json(read_json_file(dir + "/node0/report.json"));
  EXPECT_EQ(r.env.launcher, "joined");
  EXPECT_EQ(r.env.platform.at("nodes"), "2");
  EXPECT_EQ(r.env.platform.at("local_world_size"), "1");
  ASSERT_EQ(r.results.size(), 8u);
  for (const auto& c : r.results) {
    EXPECT_EQ(c.status, "ok") << c.name << ": " << c.reason;
    EXPECT_EQ(c.axes.at("backend"), "gloo") << c.name;
  }
  fsu::remove_tree(dir);
}

// `srun --nodes 2 --ntasks-per-node 1 cpbench run ...` without a wrapper: each task reads SLURM's own
// variables (no RANK / WORLD_SIZE / LOCAL_RANK set), MASTER_ADDR / MASTER_PORT from the environment.
TEST(TwoNodeJob, SlurmTasksWithoutAWrapperPassTheCheck) {
  const std::string dir = "/tmp/cpbench-slurm-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  const std::string scenario = dir + "/slurm.yaml";
  std::ofstream(scenario) << R"(name: slurm
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 128, documents: [70, 58]}
timeout_s: 60
measure: {max_time_s: 0}
sweep: {sharder: load_balanced, transport: ring, cp: 2, mask: causal}
)";
  const int port = comm::find_free_port();
  std::vector<pid_t> pids;
  for (int node = 0; node < 2; ++node) {
    pids.push_back(spawn_node({CPBENCH_EXE, "run", scenario, "--out", dir + "/node" + std::to_string(node)},
                              {"SLURM_PROCID=" + std::to_string(node), "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                               "SLURM_NTASKS_PER_NODE=1(x2)", "SLURM_NODEID=" + std::to_string(node),
                               "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"}));
  }
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "task exit status " << st;
  }
  const Report r = report_from_json(read_json_file(dir + "/node0/report.json"));
  EXPECT_EQ(r.env.launcher, "joined");
  EXPECT_EQ(r.env.platform.at("nodes"), "2");
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].status, "ok") << r.results[0].reason;
  fsu::remove_tree(dir);
}

}  // namespace
}  // namespace cpbench
