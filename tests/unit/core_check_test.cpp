// The bottom layer's check macro: what failed, the condition, file:line, and the rank context.
#include <gtest/gtest.h>

#include <string>

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
