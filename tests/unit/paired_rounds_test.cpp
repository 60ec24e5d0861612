// The A/B verdict on paired rounds (reports/paired_rounds.hpp): twin sessions under a load that moves
// between rounds stay ok, a 25% slowdown is named, a drop inside the session's A/A floor or without
// significance is inconclusive, and a round that fails in the new build is a regression.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "reports/compare.hpp"
#include "reports/paired_rounds.hpp"

using namespace cpbench;

namespace {
// A session of `pairs` pairs in blocks of four rounds (ABBA or BAAB, drawn): the machine's load is a
// random walk from round to round (steps of `drift`, log scale), each round jitters by `jitter` of its
// own, and the new build is `slow` x slower.
PairedCase session(int pairs, double slow, double drift, double jitter, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> step(0, drift), own(0, jitter);
  std::bernoulli_distribution coin(0.5);
  PairedCase c;
  c.name = "case";
  double load = 0;
  const auto round = [&](bool base) {
    load += step(g);
    return 0.1 * (base ? 1.0 : slow) * std::exp(load + own(g));
  };
  for (int b = 0; b < pairs / 2; ++b) {
    const bool abba = coin(g);
    PairedRound p, q;
    p.base_first = abba;
    q.base_first = !abba;
    if (abba) {
      p.base_s = round(true);
      p.new_s = round(false);
      q.new_s = round(false);
      q.base_s = round(true);
    } else {
      p.new_s = round(false);
      p.base_s = round(true);
      q.base_s = round(true);
      q.new_s = round(false);
    }
    c.pairs.push_back(p);
    c.pairs.push_back(q);
  }
  return c;
}
}  // namespace

TEST(PairedRounds, TwinSessionsUnderAMovingLoadStayAtTheStatedFalseAlarmRate) {
  // The load walks by 10% a round, each round jitters 5%: over a session of 32 rounds the load wanders
  // by about 60%, which pooled steps would read as a difference.
  int regressions = 0;
  for (unsigned seed = 1; seed <= 200; ++seed)
    regressions += judge_paired(session(8, 1.0, 0.1, 0.05, seed), PairedOptions{}).regression;
  EXPECT_LE(regressions, 8) << "of 200 twin sessions (1.9% expected)";
}

TEST(PairedRounds, ATwentyFivePercentSlowdownIsNamed) {
  int found = 0;
  for (unsigned seed = 1; seed <= 50; ++seed) {
    const PairedVerdict v = judge_paired(session(8, 1.25, 0.1, 0.05, seed), PairedOptions{});
    found += v.regression;
    if (seed == 1) {
      EXPECT_NEAR(v.delta, 1 / 1.25 - 1, 0.05);
      EXPECT_LE(v.delta_lo, v.delta);
      EXPECT_GE(v.delta_hi, v.delta);
      EXPECT_NEAR(v.p_value, 1.0 / 256, 1e-9);  // every pair slower: the exact one-sided minimum
      EXPECT_NE(v.why.find("Wilcoxon exact p = "), std::string::npos) << v.why;
    }
  }
  EXPECT_GE(found, 43) << "of 50 sessions (92% expected)";
}

TEST(PairedRounds, InconclusiveWithinTheFloorOrWithoutSignificance) {
  // Rounds of one build 40% apart in the same session: a 12% drop is within its A/A floor.
  PairedCase wide = session(8, 1.12, 0.0, 0.4, 3);
  const PairedVerdict w = judge_paired(wide, PairedOptions{});
  EXPECT_FALSE(w.regression);
  if (w.delta < -0.05) {
    EXPECT_TRUE(w.inconclusive) << w.why;
  }
  EXPECT_GT(w.floor, 0.12);
  // Two pairs cannot reach alpha 0.05 one-sided (1/4 at best).
  const PairedVerdict two = judge_paired(session(2, 2.0, 0.0, 0.01, 4), PairedOptions{});
  EXPECT_TRUE(two.inconclusive);
  EXPECT_NE(two.why.find("not significant"), std::string::npos) << two.why;
  // Faster is ok.
  const PairedVerdict faster = judge_paired(session(8, 0.5, 0.1, 0.02, 5), PairedOptions{});
  EXPECT_FALSE(faster.regression || faster.inconclusive);
  EXPECT_EQ(paired_exit_status({faster}), 0);
  EXPECT_EQ(paired_exit_status({faster, two}), kCompareInconclusive);
}

TEST(PairedRounds, ARoundThatFailsInTheNewBuildIsARegression) {
  PairedCase c = session(8, 1.0, 0.1, 0.02, 6);
  c.pairs[5].new_status = "failed";
  c.pairs[5].new_reason = "differs from the single-rank reference";
  const PairedVerdict v = judge_paired(c, PairedOptions{});
  EXPECT_TRUE(v.regression);
  EXPECT_NE(v.why.find("fails in the new"), std::string::npos) << v.why;
  EXPECT_EQ(paired_exit_status({v}), 1);
  EXPECT_NE(paired_table({v}, PairedOptions{}, "tokens_per_s").find("REGRESSION"), std::string::npos);
}
