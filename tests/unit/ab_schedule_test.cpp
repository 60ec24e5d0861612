// The order `compare --ab` runs its rounds in (reports/ab_schedule.hpp), checked on its output: per case
// every block is ABBA or BAAB, its first two rounds one pair and its last two the other, each pair's
// base_first the order its two rounds actually run in, blocks case after case, both orders drawn. An ABAB
// order (issue 39) makes the "A/A" pair a base round beside a new one, so the floor measures the change.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "reports/ab_schedule.hpp"

using namespace cpbench;

TEST(AbSchedule, EveryBlockIsAbbaOrBaabAndEachPairRecordsTheOrderItRan) {
  for (uint64_t seed : {1u, 2u, 7u, 12345u})
    for (int64_t cases : {1, 3})
      for (int64_t rounds : {2, 7, 8}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " cases " + std::to_string(cases) + " rounds " +
                     std::to_string(rounds));
        const std::vector<AbRound> s = ab_schedule(cases, rounds, seed);
        const int64_t blocks = (rounds + 1) / 2;
        ASSERT_EQ(static_cast<int64_t>(s.size()), cases * blocks * 4);
        // Blocks go case after case: the session is (block 0: case 0, 1, ...), (block 1: ...), 4 rounds each.
        for (size_t k = 0; k < s.size(); ++k) {
          EXPECT_EQ(s[k].case_index, static_cast<int64_t>(k / 4) % cases) << "round " << k;
          EXPECT_EQ(s[k].block, static_cast<int64_t>(k / 4) / cases) << "round " << k;
        }
        std::map<int64_t, std::vector<size_t>> of_case;  // session positions of each case's rounds
        for (size_t k = 0; k < s.size(); ++k) of_case[s[k].case_index].push_back(k);
        for (const auto& [ci, pos] : of_case) {
          ASSERT_EQ(static_cast<int64_t>(pos.size()), 4 * blocks);
          for (int64_t b = 0; b < blocks; ++b) {
            std::string order;
            for (int k = 0; k < 4; ++k) order += s[pos[static_cast<size_t>(4 * b + k)]].base_side ? 'A' : 'B';
            EXPECT_TRUE(order == "ABBA" || order == "BAAB") << "case " << ci << " block " << b << ": " << order;
          }
          // Each pair: one base and one new round, adjacent in the case's run order, its base_first the
          // side that ran first.
          std::map<int64_t, std::vector<size_t>> of_pair;
          for (size_t j = 0; j < pos.size(); ++j) of_pair[s[pos[j]].pair].push_back(j);
          ASSERT_EQ(static_cast<int64_t>(of_pair.size()), 2 * blocks);
          for (const auto& [p, idx] : of_pair) {
            ASSERT_EQ(idx.size(), 2u) << "pair " << p;
            EXPECT_EQ(idx[1], idx[0] + 1) << "pair " << p << "'s rounds are not adjacent";
            EXPECT_EQ(static_cast<int64_t>(idx[0]) / 4, p / 2) << "pair " << p << " outside its block";
            const AbRound& first = s[pos[idx[0]]];
            const AbRound& second = s[pos[idx[1]]];
            EXPECT_NE(first.base_side, second.base_side) << "pair " << p << " is one build twice";
            EXPECT_EQ(first.base_first, first.base_side) << "pair " << p << ": base_first is not the order it ran";
            EXPECT_EQ(second.base_first, first.base_side) << "pair " << p;
          }
        }
      }
}

TEST(AbSchedule, BothOrdersAreDrawnAndTheSeedFixesThem) {
  const std::vector<AbRound> a = ab_schedule(3, 8, 1), b = ab_schedule(3, 8, 1), c = ab_schedule(3, 8, 2);
  int abba = 0, baab = 0;
  bool differs = false;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].base_side, b[k].base_side);
    differs = differs || a[k].base_side != c[k].base_side;
    if (k % 4 == 0) (a[k].base_side ? abba : baab)++;
  }
  EXPECT_GT(abba, 0);
  EXPECT_GT(baab, 0);
  EXPECT_TRUE(differs) << "another seed draws other orders";
  EXPECT_THROW((void)ab_schedule(1, 1, 1), std::invalid_argument);
}
