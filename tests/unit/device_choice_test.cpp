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
    (void)choose_device(true, 1, 2, 1, false);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("2 ranks on this node but 1 visible GPU"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("share_gpu: true"), std::string::npos) << e.what();
  }
  const DeviceChoice d = choose_device(true, 3, 4, 2, true);
  EXPECT_EQ(d.backend, comm::BackendKind::gloo);
  EXPECT_TRUE(d.shared_gpu);
  EXPECT_EQ(d.device_index, 1);
  EXPECT_THROW((void)choose_device(true, 0, 1, 0, true), UsageError);
  EXPECT_THROW((void)choose_device(false, 2, 2, 0, false), UsageError);
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

TEST(GlooBind, InterfaceTowardsTheMasterOrTheNamedOne) {
  EXPECT_EQ(comm::gloo_bind_address("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(comm::gloo_bind_address("localhost"), "127.0.0.1");
  EnvGuard g;
  g.set("GLOO_SOCKET_IFNAME", "lo,eth0");
  EXPECT_EQ(comm::gloo_bind_address("10.1.2.3"), "if:lo");
}

}  // namespace
}  // namespace cpbench
