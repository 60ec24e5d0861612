// The attention FLOP formula (kernels/attention/flops.hpp) and what the transports report with it:
// AttentionStats::flops (visible pairs) and flops_computed (the tiles and bands the kernels evaluate),
// pinned on hand-computed blocks at W = 1.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>

#include "kernels/attention/flops.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench {
namespace {

TEST(AttentionFlops, ForwardIsFourHqDPerPairAndBackwardTwoAndAHalfTimesIt) {
  EXPECT_DOUBLE_EQ(attention_flops(10, 3, 8, AttentionPass::forward), 4.0 * 3 * 8 * 10);
  EXPECT_DOUBLE_EQ(attention_flops(10, 3, 8, AttentionPass::backward), 2.5 * 4.0 * 3 * 8 * 10);
  EXPECT_DOUBLE_EQ(attention_flops(10, 3, 8, AttentionPass::train), 3.5 * 4.0 * 3 * 8 * 10);
  EXPECT_DOUBLE_EQ(attention_flops(0, 3, 8, AttentionPass::train), 0);
}

// One attend() of 100 tokens (B = 1, Hq = 2, Hkv = 1, D = 8) at W = 1 under `mask`.
AttentionStats attend_once(const std::string& transport, const std::string& mask, bool tiled) {
  const comm::Communicator world;
  const int64_t n = 100;
  at::Tensor q = at::randn({1, 2, n, 8}, at::kDouble), k = at::randn({1, 1, n, 8}, at::kDouble);
  at::Tensor v = at::randn({1, 1, n, 8}, at::kDouble);
  at::Tensor pos = at::arange(n, at::kLong).unsqueeze(0);
  const TokenMeta meta{pos, at::zeros_like(pos), at::zeros_like(pos), at::ones_like(pos, at::kBool)};
  AttentionStats stats;
  const AttentionContext ctx{&world, MaskSpec::parse(mask), meta, meta, 0, &stats, "cp:test", nullptr, tiled};
  (void)make_transport(transport)->attend(q, k, v, ctx);
  return stats;
}

TEST(AttentionFlops, TransportsCountWholeTilesOfACausalDiagonal) {
  // 100 causal tokens in 64-token tiles: the visible triangle has 100 * 101 / 2 = 5050 pairs; the kernels
  // evaluate the lower tiles whole: 64 x 64 + 36 x 64 + 36 x 36 = 7696 pairs.
  const double per_pair = 4.0 * 2 * 8;
  for (const std::string transport : {"allgather", "ring"})
    for (const bool tiled : {false, true}) {
      const AttentionStats s = attend_once(transport, "causal", tiled);
      EXPECT_EQ(s.visible_pairs, 5050) << transport;
      EXPECT_DOUBLE_EQ(s.flops, per_pair * 5050) << transport;
      EXPECT_DOUBLE_EQ(s.flops_computed, per_pair * 7696) << transport << (tiled ? " tiled" : " fused");
    }
}

TEST(AttentionFlops, AMaskFreeBlockComputesExactlyItsVisiblePairs) {
  for (const std::string transport : {"allgather", "ring"}) {
    const AttentionStats s = attend_once(transport, "full", false);
    EXPECT_DOUBLE_EQ(s.flops, 4.0 * 2 * 8 * 100 * 100) << transport;
    EXPECT_DOUBLE_EQ(s.flops_computed, s.flops) << transport;
  }
}

TEST(AttentionFlops, ComputedIsNeverBelowVisible) {
  for (const std::string mask : {"causal", "document", "sliding_window:7", "sliding_window:70"})
    for (const bool tiled : {false, true}) {
      const AttentionStats s = attend_once("allgather", mask, tiled);
      EXPECT_GT(s.flops, 0) << mask;
      EXPECT_GE(s.flops_computed, s.flops) << mask << (tiled ? " tiled" : " fused");
    }
}

}  // namespace
}  // namespace cpbench
