#pragma once
// The rules every linear mixer's byte formulas share (linear_cp_bytes of mamba_cp_costs.hpp's and
// gdn_cp_costs.hpp's terms), checked once for each mixer's shape by its own cost test (ssm_cp_test.cpp,
// gdn_models_test.cpp) beside the numbers worked by hand there.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "kernels/mixers/linear/linear_costs.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::linear_test {

// A strategy's bytes: `bytes` sent each way (the backward mirrors the forward) in `calls` collectives each way.
inline void expect_each_way(const LinearCpBytes& b, int64_t bytes, int64_t calls) {
  EXPECT_EQ(b.forward, bytes);
  EXPECT_EQ(b.backward, b.forward);
  EXPECT_EQ(b.calls_forward, calls);
  EXPECT_EQ(b.calls_backward, calls);
}

// On `s` (cp 4, seq_len 64, heads that do not split over 3 ranks): K = 1 leaves state passing one
// collective a direction, one rank sends nothing under either strategy, and at cp 3 the channel-parallel
// strategy refuses the heads while state passing runs.
template <class Shape, class Strategy>
void expect_shared_byte_rules(const Shape& s, LinearCpTermsFn<Strategy, Shape> terms, Strategy channel_parallel) {
  const auto bytes = [terms](Strategy strategy, const Shape& shape) { return linear_cp_bytes(terms, strategy, shape); };
  Shape k1 = s;
  k1.conv = 1;
  EXPECT_EQ(bytes(Strategy::state_passing, k1).calls_forward, 1) << "no halo, no halo call";
  Shape one = s;
  one.cp = 1;
  EXPECT_EQ(bytes(Strategy::state_passing, one).total(), 0);
  EXPECT_EQ(bytes(channel_parallel, one).total(), 0);
  Shape three = s;
  three.cp = 3;
  three.seq_len = 63;
  EXPECT_THROW((void)bytes(channel_parallel, three), Error) << "heads that do not split over 3 ranks";
  EXPECT_NO_THROW((void)bytes(Strategy::state_passing, three));
}

// Every known strategy name parses back to itself; `foreign` (another mixer's name) does not parse.
template <class Strategy>
void expect_names_round_trip(const std::vector<std::string>& known,
                             std::optional<Strategy> (*parse)(const std::string&), const std::string& foreign) {
  for (const auto& n : known) EXPECT_EQ(to_string(*parse(n)), n);
  EXPECT_FALSE(parse(foreign).has_value()) << foreign;
}

}  // namespace cpbench::linear_test
