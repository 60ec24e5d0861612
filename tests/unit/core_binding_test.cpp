// Each spawned rank's timed steps run on its own share of the cores (harness/launcher/core_binding.hpp):
// the shares, the cpu-list text both ways, and a binding that reaches every thread of the process
// (a binding of the calling thread alone leaves the communication and intra-op threads to the
// scheduler, which is what kept two ranks on one core) and gives each its mask back.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "harness/launcher/core_binding.hpp"

using namespace cpbench;

namespace {

std::vector<int> cpus_of(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(tid, sizeof set, &set), 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

}  // namespace

TEST(CoreBinding, EachRankGetsItsOwnEqualShareOfTheMask) {
  const std::vector<int> two = {0, 1};
  EXPECT_EQ(rank_core_share(two, 0, 2), std::vector<int>({0}));
  EXPECT_EQ(rank_core_share(two, 1, 2), std::vector<int>({1}));
  EXPECT_EQ(rank_core_share(two, 0, 1), two);
  // More ranks than cores: neighbours in rank order share a core, the same in every invocation.
  EXPECT_EQ(rank_core_share(two, 0, 4), std::vector<int>({0}));
  EXPECT_EQ(rank_core_share(two, 1, 4), std::vector<int>({0}));
  EXPECT_EQ(rank_core_share(two, 2, 4), std::vector<int>({1}));
  EXPECT_EQ(rank_core_share(two, 3, 4), std::vector<int>({1}));
  EXPECT_EQ(rank_core_share(two, 2, 3), std::vector<int>({1}));
  EXPECT_TRUE(rank_core_share(std::vector<int>{}, 0, 2).empty());
  // A mask with holes (a launcher or cgroup gave us these): shares follow the mask, not the numbering.
  const std::vector<int> mask = {2, 3, 5, 8, 9, 10, 11};
  EXPECT_EQ(rank_core_share(mask, 0, 3), std::vector<int>({2, 3}));
  EXPECT_EQ(rank_core_share(mask, 1, 3), std::vector<int>({5, 8}));
  EXPECT_EQ(rank_core_share(mask, 2, 3), std::vector<int>({9, 10})) << "the remainder (11) stays unused";
  EXPECT_THROW((void)rank_core_share(mask, 3, 3), std::invalid_argument);
  EXPECT_THROW((void)rank_core_share(mask, -1, 3), std::invalid_argument);
}

TEST(CoreBinding, CpuListsReadAndWriteLikeLinux) {
  EXPECT_EQ(cpu_list_text(std::vector<int>{0}), "0");
  EXPECT_EQ(cpu_list_text(std::vector<int>{2, 3}), "2-3");
  EXPECT_EQ(cpu_list_text(std::vector<int>{0, 1, 2, 4, 6, 7}), "0-2,4,6-7");
  EXPECT_EQ(cpu_list_text(std::vector<int>{}), "");
  EXPECT_EQ(parse_cpu_list("0-2,4,6-7"), std::vector<int>({0, 1, 2, 4, 6, 7}));
  EXPECT_EQ(parse_cpu_list("5"), std::vector<int>({5}));
  for (const char* bad : {"", "a", "1-", "3-1", "1,1", "2,1", "-1", "0-99999"}) {
    SCOPED_TRACE(bad);
    try {
      (void)parse_cpu_list(bad);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos) << e.what();
    }
  }
}

TEST(CoreBinding, BindsEveryThreadOfTheProcessAndGivesTheMasksBack) {
  const std::vector<int> mask = affinity_cpus();
  ASSERT_FALSE(mask.empty());
  std::atomic<pid_t> other{0};
  std::atomic<bool> stop{false};
  std::thread t([&] {
    other = static_cast<pid_t>(::syscall(SYS_gettid));
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (other == 0) std::this_thread::yield();
  const std::vector<int> share = {mask.back()};
  {
    const ThreadBinding bound(share);
    EXPECT_EQ(bound.cpus(), share);
    EXPECT_TRUE(bound.bound());
    EXPECT_EQ(cpus_of(0), share) << "the calling thread";
    EXPECT_EQ(cpus_of(other), share) << "another thread of the process (a communication or intra-op thread)";
  }
  EXPECT_EQ(cpus_of(0), mask);
  EXPECT_EQ(cpus_of(other), mask);
  {
    const ThreadBinding none(std::vector<int>{});
    EXPECT_EQ(cpus_of(0), mask) << "an empty share binds nothing";
    EXPECT_FALSE(none.bound());
  }
  {
    // A CPU outside this process's mask (a cgroup cpuset, a launcher's binding): the kernel refuses it,
    // nothing changes, and the binding says so (the report then records no cores).
    const ThreadBinding outside(std::vector<int>{CPU_SETSIZE - 1});
    EXPECT_FALSE(outside.bound());
    EXPECT_EQ(cpus_of(0), mask);
  }
  stop = true;
  t.join();
}
