// Real processes, real c10d Gloo over a TCPStore on loopback: the distributed stack works from C++
// with Debian's gloo headers (see kernels/comm/process_group.cpp).
#include <gtest/gtest.h>

#include <chrono>

#include "harness/launcher/launcher.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {
comm::LaunchResult run_ranks(int world, const std::string& mode) {
  comm::LaunchOptions o;
  o.executable = CPBENCH_COMM_RANK_EXE;
  o.args = {mode};
  o.world_size = world;
  o.env["OMP_NUM_THREADS"] = "1";
  o.grace = std::chrono::seconds(20);
  o.deadline = std::chrono::seconds(120);
  return comm::launch(o);
}
}  // namespace

class CommCollectives : public ::testing::TestWithParam<int> {};

TEST_P(CommCollectives, AllGatherReduceScatterSendRecvAreExact) {
  auto res = run_ranks(GetParam(), "collectives");
  EXPECT_TRUE(res.ok()) << res.describe_failures();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CommCollectives, ::testing::Values(2, 3, 4));

TEST(CommFailure, DeadRankMakesOthersFailWithinTimeoutNotHang) {
  const auto start = std::chrono::steady_clock::now();
  auto res = run_ranks(3, "die");
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(res.ranks.size(), 3u);
  EXPECT_EQ(res.ranks[1].exit_code, 3);
  // The survivors must notice (collective timeout of 5 s) and exit non-zero on their own.
  EXPECT_FALSE(res.ranks[0].ok());
  EXPECT_FALSE(res.ranks[2].ok());
  EXPECT_FALSE(res.ranks[0].killed_by_launcher) << "rank 0 hung until the launcher killed it";
  EXPECT_FALSE(res.ranks[2].killed_by_launcher) << "rank 2 hung until the launcher killed it";
  EXPECT_LT(elapsed, std::chrono::seconds(60));
}
