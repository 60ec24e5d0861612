// The delta rule with a per-channel decay (Kimi Delta Attention; kernels/mixers/gdn/gdn_scan.hpp with g
// [R, L, H, dk]): the chunked form against the token-by-token recurrence in float64 (values, final state
// and every gradient, chunk lengths that do and do not divide the row, resets at and away from chunk
// boundaries, with an initial state, decays from a token's to hundreds of tokens' reach per channel;
// without a graph also the blocked factors and the fused inference form),
// the recurrence against a token worked by hand, the scalar gate as the per-channel one's broadcast, and
// bfloat16 computed in float32 without overflow at strong decays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/mixers/gdn/gdn_scan.hpp"
#include "tests/unit/delta_rule_scan_util.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;
using namespace cpbench::delta_rule_test;

constexpr Gate kGate = Gate::channel;

TEST(KdaScan, RecurrenceMatchesATokenWorkedByHand) {
  // dk = 2, dv = 1, S_0 = (1, 1)^T, alpha = (0.5, 0.25), k = (1, 0), beta = 0.5, v = 2:
  // Diag(alpha) S_0 = (0.5, 0.25); k^T of it = 0.5; S_1 = (0.5, 0.25) + 0.5 (1, 0) (2 - 0.5) = (1.25, 0.25);
  // o = S_1 . q with q = (1, 2): 1.75.
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::tensor({1.0, 2.0}, o).view({1, 1, 1, 2});
  const at::Tensor k = at::tensor({1.0, 0.0}, o).view({1, 1, 1, 2});
  const at::Tensor v = at::tensor({2.0}, o).view({1, 1, 1, 1});
  const at::Tensor g = at::tensor({std::log(0.5), std::log(0.25)}, o).view({1, 1, 1, 2});
  const at::Tensor beta = at::tensor({0.5}, o).view({1, 1, 1});
  const at::Tensor initial = at::ones({1, 1, 2, 1}, o);
  const at::Tensor group = at::zeros({1, 1}, at::kLong);
  for (const bool chunked : {false, true}) {
    const GdnScanResult r = chunked ? gdn_chunk_scan(q, k, v, g, beta, group, 4, initial)
                                    : gdn_recurrence(q, k, v, g, beta, group, initial);
    EXPECT_NEAR(r.o.item<double>(), 1.75, 1e-15) << (chunked ? "chunked" : "recurrence");
    EXPECT_NEAR(r.final_state[0][0][0][0].item<double>(), 1.25, 1e-15);
    EXPECT_NEAR(r.final_state[0][0][1][0].item<double>(), 0.25, 1e-15);
  }
}

TEST(KdaScan, ChunkedMatchesTheRecurrenceToFloat64Rounding) {
  // 100 tokens: documents of 23, 41 (resets inside chunks of 16), four one-token documents, the rest;
  // chunk 16 also puts a reset exactly at a chunk start (t = 64).
  const std::vector<int64_t> docs = {23, 41, 1, 1, 1, 1};
  double worst = 0;
  for (const int64_t chunk : {1, 7, 16, 64, 100, 256})
    for (const bool initial : {false, true}) {
      const double d = worst_difference(kGate, docs, 100, chunk, initial);
      worst = std::max(worst, d);
      EXPECT_LT(d, 1e-12) << "chunk " << chunk << (initial ? " with" : " without") << " an initial state";
    }
  EXPECT_LT(worst_difference(kGate, {100}, 100, 16, true), 1e-12) << "one document";
  RecordProperty("worst_relative_difference", std::to_string(worst));
  std::printf("KdaScan: worst relative difference chunked vs recurrence (float64): %.3g\n", worst);
}

TEST(KdaScan, TheSummaryIsTheStretchsAffineMap) {
  // State passing's pair from the chunks' own factors (delta_rule_summary): the recurrence's final state
  // from any initial state S0 is T S0 + C. Per-channel and per-head gates, chunks that do and do not
  // divide the stretch, a reset inside (T = 0 past it: the reset ends the initial state's reach). Decays
  // weak enough (x 0.02) that the initial state still weighs at the end.
  for (const bool channel : {true, false})
    for (const int64_t chunk : {7, 16, 64}) {
      const std::vector<int64_t> docs = chunk == 16 ? std::vector<int64_t>{30, 70} : std::vector<int64_t>{100};
      Inputs in = draw(kGate, 2, 100, 3, 8, 6, docs, 17, true, 0.02);
      const at::Tensor g = channel ? in.g : in.g.select(3, 0);
      const DeltaRuleSummary sum = delta_rule_summary(delta_rule_chunks(in.q, in.k, in.v, g, in.beta, in.group, chunk));
      const at::Tensor from_zero = gdn_recurrence(in.q, in.k, in.v, g, in.beta, in.group).final_state;
      const at::Tensor from_s0 = gdn_recurrence(in.q, in.k, in.v, g, in.beta, in.group, in.initial).final_state;
      const std::string what = std::string(channel ? "per-channel" : "per-head") + " gate, chunk " + std::to_string(chunk);
      EXPECT_LT(rel(sum.contribution, from_zero), 1e-12) << what;
      EXPECT_LT(rel(at::matmul(sum.transition, in.initial) + sum.contribution, from_s0), 1e-12) << what;
      if (chunk == 16) {
        EXPECT_LT(sum.transition.abs().max().item<double>(), 1e-300) << what << ": a reset inside";
      } else {
        EXPECT_GT(sum.transition.abs().max().item<double>(), 1e-3) << what;
      }
    }
}

TEST(KdaScan, WithoutAGraphTheBlockedFormMatchesTheRecurrence) {
  // Without autograd (no input requires grad) delta_rule_chunks on rows longer than 512 tokens runs in
  // blocks of chunks (gdn_scan.cpp, blocked_chunk_factors, and the in-place apply; state passing's
  // route): 1200 tokens are 3 blocks at every chunk here. Documents of 300 and 212 end exactly at a block start (512) at chunk 16 and inside one at 7, 64
  // and 100; one of 5 tokens follows; the block after a reset starts in a new group. Values, final state
  // and the summary's T S0 + C, both gates, to float64 rounding. Weak decays (x 0.02), so that the state
  // carries across blocks.
  at::NoGradGuard no_grad;
  double worst = 0;
  Inputs in = draw(kGate, 2, 1200, 3, 8, 6, {300, 212, 5, 400}, 23, true, 0.02);
  for (const bool channel : {true, false}) {
    const at::Tensor g = channel ? in.g : in.g.select(3, 0);
    const GdnScanResult r = gdn_recurrence(in.q, in.k, in.v, g, in.beta, in.group, in.initial);
    for (const int64_t chunk : {7, 16, 64, 100}) {
      const std::string what = std::string(channel ? "per-channel" : "per-head") + " gate, chunk " + std::to_string(chunk);
      const DeltaRuleChunks factors = delta_rule_chunks(in.q, in.k, in.v, g, in.beta, in.group, chunk);
      const GdnScanResult c = delta_rule_apply(factors, in.initial);
      const DeltaRuleSummary sum = delta_rule_summary(factors);
      const double d = std::max({rel(c.o, r.o), rel(c.final_state, r.final_state),
                                 rel(at::matmul(sum.transition, in.initial) + sum.contribution, r.final_state)});
      EXPECT_LT(d, 1e-12) << what;
      worst = std::max(worst, d);
    }
  }
  std::printf("KdaScan: worst relative difference blocked vs recurrence (float64, no graph): %.3g\n", worst);
}

TEST(KdaScan, WithoutAGraphTheFusedFormMatchesTheRecurrence) {
  // Inference (no graph) runs gdn_chunk_scan fused per (row, head) (delta_rule_fused.hpp). Chunks that
  // do and do not divide the row (7, 100: not whole vectors of 16 either), resets at and inside chunks,
  // one-token documents, an initial state, both gates; decays x 0.02 (every chunk takes one reference),
  // x 1 (some channels decay past kFusedDecayRange within a chunk: halves) and x 10 (down to single
  // tokens). Values and final state against the float64 recurrence.
  at::NoGradGuard no_grad;
  double worst = 0;
  for (const double scale : {0.02, 1.0, 10.0}) {
    Inputs in = draw(kGate, 2, 300, 3, 8, 6, {64, 37, 1, 1, 90}, 29, true, scale);
    for (const bool channel : {true, false}) {
      const at::Tensor g = channel ? in.g : in.g.select(3, 0);
      const GdnScanResult r = gdn_recurrence(in.q, in.k, in.v, g, in.beta, in.group, in.initial);
      for (const int64_t chunk : {1, 7, 16, 64, 100}) {
        const GdnScanResult c = gdn_chunk_scan(in.q, in.k, in.v, g, in.beta, in.group, chunk, in.initial);
        const double d = std::max(rel(c.o, r.o), rel(c.final_state, r.final_state));
        EXPECT_LT(d, 1e-12) << (channel ? "per-channel" : "per-head") << " gate, decays x " << scale << ", chunk " << chunk;
        worst = std::max(worst, d);
      }
    }
  }
  std::printf("KdaScan: worst relative difference fused vs recurrence (float64, no graph): %.3g\n", worst);
}

TEST(KdaScan, TheScalarGateIsItsBroadcast) {
  // GDN's one decay per head, given as the same value on every key channel, runs the same recurrence.
  Inputs in = draw(kGate, 2, 50, 2, 8, 4, {20, 30}, 7, true);
  const at::Tensor g = in.g.select(3, 0);  // [R, L, H]
  const at::Tensor wide = g.unsqueeze(-1).expand({2, 50, 2, 8});
  const GdnScanResult scalar = gdn_chunk_scan(in.q, in.k, in.v, g, in.beta, in.group, 16, in.initial);
  const GdnScanResult channel = gdn_chunk_scan(in.q, in.k, in.v, wide, in.beta, in.group, 16, in.initial);
  EXPECT_LT(rel(channel.o, scalar.o), 1e-13);
  EXPECT_LT(rel(channel.final_state, scalar.final_state), 1e-13);
  EXPECT_LT(rel(gdn_recurrence(in.q, in.k, in.v, wide, in.beta, in.group, in.initial).o, scalar.o), 1e-12);
  EXPECT_GT(rel(gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, in.group, 16, in.initial).o, scalar.o), 1e-3)
      << "per-channel decays that differ change the result";
}

TEST(KdaScan, Bfloat16StaysFiniteAtStrongDecays) {
  // Decays of up to ~-40 per token and channel: a cumulative decay over a chunk of 64 reaches ~-2500,
  // whose exp(-G) would overflow; every exponent the chunked form takes is a difference inside a chunk.
  Inputs in = draw(kGate, 1, 128, 2, 8, 8, {50, 78}, 13, false, 10.0);
  const auto bf = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
  const auto rounded = [&](const at::Tensor& t) { return bf(t).to(at::kDouble); };  // the same inputs in float64
  const GdnScanResult ref =
      gdn_recurrence(rounded(in.q), rounded(in.k), rounded(in.v), rounded(in.g), rounded(in.beta), in.group);
  const GdnScanResult low = gdn_chunk_scan(bf(in.q), bf(in.k), bf(in.v), bf(in.g), bf(in.beta), in.group, 64);
  EXPECT_TRUE(at::isfinite(low.o).all().item<bool>());
  EXPECT_EQ(low.final_state.scalar_type(), at::kFloat) << "the state stays in the accumulator dtype";
  EXPECT_LT(rel(low.o.to(at::kDouble), ref.o), 3e-2);
  const GdnScanResult f64 = gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, in.group, 64);
  EXPECT_LT(rel(f64.o, gdn_recurrence(in.q, in.k, in.v, in.g, in.beta, in.group).o), 1e-12)
      << "float64 at the same decays";
}

TEST(KdaScan, ShapesAreCheckedAndFlopsCountTheChannelDecay) {
  Inputs in = draw(kGate, 1, 8, 2, 4, 4, {8}, 1, false);
  EXPECT_THROW((void)gdn_chunk_scan(in.q, in.k, in.v, in.g.narrow(3, 0, 3), in.beta, in.group), Error);
  // The secondary chunking's scalings: 3/2 dk per halving level, log2(64) = 6 levels.
  EXPECT_DOUBLE_EQ(gdn_scan_flops(4096, 64, 128, 128, true) - gdn_scan_flops(4096, 64, 128, 128), 1.5 * 128 * 6);
}
