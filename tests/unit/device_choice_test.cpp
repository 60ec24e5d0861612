// Device and backend choice from the torchrun-style environment (harness/runner/device_choice.hpp),
// the environment parsing behind it (harness/launcher), and where Gloo binds (kernels/comm).
#include <gtest/gtest.h>

#include <cstdlib>

#include "harness/launcher/launcher.hpp"
#include "harness/runner/device_choice.hpp"
#include "kernels/comm/process_group.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {
namespace {

TEST(DeviceChoice, CpuIsGloo) {
  const DeviceChoice d = choose_device(false, 1, 4, 0, false);
  EXPECT_FALSE(d.cuda);
  EXPECT_EQ(d.backend, comm::BackendKind::gloo);
}

TEST(DeviceChoice, OneGpuPerLocalRankIsNcclOnGpuLocalRank) {
  for (int lr = 0; lr < 8; ++lr) {
    const DeviceChoice d = choose_device(true, lr, 8, 8, false);
    EXPECT_EQ(d.device_index, lr);
    EXPECT_EQ(d.backend, comm::BackendKind::nccl);
    EXPECT_FALSE(d.shared_gpu);
  }
}

// A multi-node job: 16 ranks, 8 per node, 8 GPUs per node: NCCL (the global size never decides).
TEST(DeviceChoice, MultiNodeDecidesFromTheLocalWorldSize) {
  const DeviceChoice d = choose_device(true, 5, /*local_world_size=*/8, /*visible=*/8, false);
  EXPECT_EQ(d.backend, comm::BackendKind::nccl);
  EXPECT_EQ(d.device_index, 5);
}

TEST(DeviceChoice, MoreLocalRanksThanGpusIsAnErrorUnlessShared) {
  try {
    (void)choose_device(true, 1, 4, 2, false);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("4 ranks on this node but 2 visible GPU"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("share_gpu: true"), std::string::npos) << e.what();
  }
  const DeviceChoice d = choose_device(true, 3, 4, 2, true);
  EXPECT_EQ(d.backend, comm::BackendKind::gloo);
  EXPECT_TRUE(d.shared_gpu);
  EXPECT_EQ(d.device_index, 1);
  EXPECT_THROW((void)choose_device(true, 0, 1, 0, true), UsageError);
  EXPECT_THROW((void)choose_device(false, 2, 2, 0, false), UsageError);
}

// SLURM's per-task GPU binding: every rank of 8 on the node sees one GPU (its own, as index 0), so
// the job runs NCCL on device 0 of each rank; share_gpu still means several ranks on one GPU.
TEST(DeviceChoice, OneVisibleGpuPerRankIsNcclOnDeviceZero) {
  for (int lr = 0; lr < 8; ++lr) {
    const DeviceChoice d = choose_device(true, lr, 8, 1, false);
    EXPECT_EQ(d.device_index, 0);
    EXPECT_EQ(d.backend, comm::BackendKind::nccl);
    EXPECT_FALSE(d.shared_gpu);
  }
  const DeviceChoice shared = choose_device(true, 1, 2, 1, true);
  EXPECT_EQ(shared.backend, comm::BackendKind::gloo);
  EXPECT_TRUE(shared.shared_gpu);
  EXPECT_EQ(shared.device_index, 0);
}

struct EnvGuard {
  std::vector<std::string> names;
  void set(const std::string& n, const std::string& v) {
    names.push_back(n);
    ::setenv(n.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (const auto& n : names) ::unsetenv(n.c_str());
  }
};

TEST(RankEnvironment, TorchrunTwoNodes) {
  EnvGuard g;
  g.set("RANK", "3");
  g.set("WORLD_SIZE", "4");
  g.set("LOCAL_RANK", "1");
  g.set("LOCAL_WORLD_SIZE", "2");
  g.set("NODE_RANK", "1");
  g.set("MASTER_ADDR", "127.0.0.1");
  g.set("MASTER_PORT", "29500");
  const auto env = comm::rank_env_from_environment();
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->node_rank, 1);
  g.set("LOCAL_RANK", "2");
  EXPECT_THROW((void)comm::rank_env_from_environment(), UsageError);
}

TEST(RankEnvironment, LocalWorldSizeDefaultsToOneNode) {
  EnvGuard g;
  g.set("RANK", "0");
  g.set("WORLD_SIZE", "2");
  g.set("MASTER_PORT", "29500");
  const auto env = comm::rank_env_from_environment();
  ASSERT_TRUE(env);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->node_rank, 0);
}

// srun without a wrapper: SLURM's own variables when RANK / WORLD_SIZE are absent; torchrun's win.
TEST(RankEnvironment, SlurmTasks) {
  EnvGuard g;
  g.set("SLURM_PROCID", "11");
  g.set("SLURM_NTASKS", "16");
  g.set("SLURM_LOCALID", "3");
  g.set("SLURM_NTASKS_PER_NODE", "8(x2)");
  g.set("SLURM_NODEID", "1");
  g.set("MASTER_ADDR", "10.0.0.1");
  g.set("MASTER_PORT", "29500");
  auto env = comm::rank_env_from_environment();
  ASSERT_TRUE(env);
  EXPECT_TRUE(env->from_slurm);
  EXPECT_EQ(env->rank, 11);
  EXPECT_EQ(env->world_size, 16);
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->local_world_size, 8);
  EXPECT_EQ(env->node_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  g.set("SLURM_NTASKS_PER_NODE", "8,4");
  EXPECT_THROW((void)comm::rank_env_from_environment(), UsageError);
  g.set("SLURM_NTASKS_PER_NODE", "8");
  ::unsetenv("SLURM_LOCALID");
  EXPECT_THROW((void)comm::rank_env_from_environment(), UsageError);
  g.set("SLURM_LOCALID", "3");
  g.set("RANK", "0");
  g.set("WORLD_SIZE", "2");
  env = comm::rank_env_from_environment();
  ASSERT_TRUE(env);
  EXPECT_FALSE(env->from_slurm);
  EXPECT_EQ(env->world_size, 2);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  g.set("SLURM_NTASKS", "1");  // an salloc shell: cpbench launches its own ranks
  EXPECT_FALSE(comm::rank_env_from_environment());
}

TEST(GlooBind, InterfaceTowardsTheMasterOrTheNamedOne) {
  EXPECT_EQ(comm::gloo_bind_address("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(comm::gloo_bind_address("localhost"), "127.0.0.1");
  EnvGuard g;
  g.set("GLOO_SOCKET_IFNAME", "lo,eth0");
  EXPECT_EQ(comm::gloo_bind_address("10.1.2.3"), "if:lo");
}

}  // namespace
}  // namespace cpbench
