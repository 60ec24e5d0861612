// The bottom layer's check macro: what failed, the condition, file:line, and the rank context.
#include <gtest/gtest.h>

#include <string>

#include "kernels/comm/device_time.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {
namespace {

int check_line = 0;

std::string message_of(int x) {
  try {
    check_line = __LINE__ + 1;
    CP_CHECK(x > 0, "tensor q [2, 4, 8] must have x > 0, got ", x);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckMacro, NamesTheConditionAndItsFileAndLine) {
  const std::string m = message_of(-3);
  EXPECT_NE(m.find("tensor q [2, 4, 8] must have x > 0, got -3"), std::string::npos) << m;
  EXPECT_NE(m.find("check `x > 0` failed"), std::string::npos) << m;
  EXPECT_NE(m.find("tests/unit/core_check_test.cpp:" + std::to_string(check_line) + ","), std::string::npos) << m;
}

TEST(CheckMacro, PrefixesTheRankContextWhileOneIsSet) {
  EXPECT_EQ(message_of(-1).rfind("[rank", 0), std::string::npos);
  {
    ScopedRankContext outer(2, 4);
    EXPECT_EQ(message_of(-1).rfind("[rank 2/4] tensor q", 0), 0u) << message_of(-1);
    {
      ScopedRankContext inner(0, 1);
      EXPECT_EQ(message_of(-1).rfind("[rank 0/1] ", 0), 0u);
    }
    EXPECT_EQ(message_of(-1).rfind("[rank 2/4] ", 0), 0u);
  }
  EXPECT_EQ(message_of(-1).rfind("[rank", 0), std::string::npos);
}

TEST(CheckMacro, UsageErrorsStayOneLineForTheUserAndKeepTheLocation) {
  try {
    ScopedRankContext rank(1, 2);  // user input has no rank: never prefixed
    CP_CHECK_USAGE(false, "scenarios/x.yaml: sweep.cp[2]: 0 is not a CP size");
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "scenarios/x.yaml: sweep.cp[2]: 0 is not a CP size");
    EXPECT_NE(e.location().find("core_check_test.cpp"), std::string::npos) << e.location();
    EXPECT_NE(e.location().find("check `false` failed"), std::string::npos) << e.location();
    return;
  }
  ADD_FAILURE() << "no UsageError";
}

}  // namespace
}  // namespace cpbench

// DeviceTime on the host: ordered, and mixing untaken times is an error naming the problem.
TEST(DeviceTime, HostTimesAreOrderedAndUntakenOnesRefused) {
  const auto a = cpbench::comm::DeviceTime::now(at::kCPU);
  volatile double sink = 0;
  for (int i = 0; i < 100000; ++i) sink = sink + i;
  const auto b = cpbench::comm::DeviceTime::now(at::kCPU);
  EXPECT_TRUE(a.valid());
  EXPECT_FALSE(a.on_cuda());
  EXPECT_GT(cpbench::comm::DeviceTime::between(a, b), 0.0);
  EXPECT_LT(cpbench::comm::DeviceTime::between(b, a), 0.0);
  try {
    (void)cpbench::comm::DeviceTime::between(a, cpbench::comm::DeviceTime{});
    FAIL() << "an untaken time was accepted";
  } catch (const cpbench::Error& e) {
    EXPECT_NE(std::string(e.what()).find("never taken"), std::string::npos) << e.what();
  }
}
