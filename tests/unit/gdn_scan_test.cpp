// The gated delta rule (kernels/mixers/gdn/gdn_scan.hpp): the chunked WY / UT form the layer runs against
// the token-by-token recurrence in float64 (values, final state and every gradient, at chunk lengths
// that do and do not divide the row, with document resets at and away from chunk boundaries, with an
// initial state), the recurrence itself against two tokens worked out by hand, resets against a
// fresh start, transparent slots, and low precision computed in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/mixers/gdn/gdn_scan.hpp"
#include "tests/unit/delta_rule_scan_util.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;
using namespace cpbench::delta_rule_test;

constexpr Gate kGate = Gate::scalar;

TEST(GdnScan, RecurrenceMatchesTwoTokensWorkedByHand) {
  // dk = 2, dv = 1, one row, one head. Token 1: S1 = beta1 k1 v1 = 0.5 * 2 * (0.6, 0.8) = (0.6, 0.8).
  // Token 2: exp(g2) (I - beta2 k2 k2^T) S1 + beta2 k2 v2 = 0.5 * ((0.6, 0.8) - 0.25 * 0.6 * (1, 0))
  // + 0.25 * (1, 0) * -1 = (0.225 - 0.25, 0.4) = (-0.025, 0.4); o2 = S2 . (1, 1) = 0.375; o1 = S1 . q1.
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::tensor({0.0, 1.0, 1.0, 1.0}, o).view({1, 2, 1, 2});
  const at::Tensor k = at::tensor({0.6, 0.8, 1.0, 0.0}, o).view({1, 2, 1, 2});
  const at::Tensor v = at::tensor({2.0, -1.0}, o).view({1, 2, 1, 1});
  const at::Tensor g = at::tensor({0.0, std::log(0.5)}, o).view({1, 2, 1});
  const at::Tensor beta = at::tensor({0.5, 0.25}, o).view({1, 2, 1});
  const at::Tensor group = at::zeros({1, 2}, at::kLong);
  for (const bool chunked : {false, true}) {
    const GdnScanResult r = chunked ? gdn_chunk_scan(q, k, v, g, beta, group, 2) : gdn_recurrence(q, k, v, g, beta, group);
    EXPECT_NEAR(r.o[0][0][0][0].item<double>(), 0.8, 1e-15) << (chunked ? "chunked" : "recurrence");
    EXPECT_NEAR(r.o[0][1][0][0].item<double>(), 0.375, 1e-15) << (chunked ? "chunked" : "recurrence");
    EXPECT_NEAR(r.final_state[0][0][0][0].item<double>(), -0.025, 1e-15);
    EXPECT_NEAR(r.final_state[0][0][1][0].item<double>(), 0.4, 1e-15);
  }
}

TEST(GdnScan, ChunkedMatchesTheRecurrenceToFloat64Rounding) {
  // 100 tokens: documents of 23, 41 (a reset inside chunks of 16 and at none of their starts), then 4
  // one-token documents and the rest; chunk 16 also puts a reset exactly at a chunk start (t = 64).
  const std::vector<int64_t> docs = {23, 41, 1, 1, 1, 1};
  for (const int64_t chunk : {1, 7, 16, 64, 100, 256})
    for (const bool initial : {false, true}) {
      const double d = worst_difference(kGate, docs, 100, chunk, initial);
      EXPECT_LT(d, 1e-12) << "chunk " << chunk << (initial ? " with" : " without") << " an initial state";
    }
  EXPECT_LT(worst_difference(kGate, {100}, 100, 16, true), 1e-12) << "one document";
}

TEST(GdnScan, AResetStartsFromZero) {
  // The second document's outputs equal a run of that document alone (no state crosses the reset).
  Inputs in = draw(kGate, 1, 60, 2, 8, 4, {25, 35}, 5, true);
  const GdnScanResult both = gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, in.group, 16, in.initial);
  const auto tail = [](const at::Tensor& t) { return t.narrow(1, 25, 35); };
  const GdnScanResult alone = gdn_recurrence(tail(in.q), tail(in.k), tail(in.v), tail(in.g), tail(in.beta),
                                             at::zeros({1, 35}, at::kLong));
  EXPECT_LT(rel(tail(both.o), alone.o), 1e-12);
  EXPECT_LT(rel(both.final_state, alone.final_state), 1e-12);
  EXPECT_GT(rel(tail(gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, at::zeros({1, 60}, at::kLong), 16).o), alone.o),
            1e-3)
      << "without the reset the first document's state reaches the second";
}

TEST(GdnScan, TransparentSlotsLeaveTheStateUnchanged) {
  // g = beta = 0 and q = k = v = 0 on 5 slots inserted at t = 30: every other output is unchanged.
  Inputs in = draw(kGate, 1, 60, 2, 8, 4, {60}, 9, false);
  const auto insert = [](const at::Tensor& t) {
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    shape[1] = 5;
    return at::cat({t.narrow(1, 0, 30), at::zeros(shape, t.options()), t.narrow(1, 30, 30)}, 1);
  };
  const at::Tensor group = at::zeros({1, 65}, at::kLong);
  const GdnScanResult with = gdn_chunk_scan(insert(in.q), insert(in.k), insert(in.v), insert(in.g), insert(in.beta),
                                            group, 16);
  const GdnScanResult without = gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, in.group, 16);
  EXPECT_LT(rel(at::cat({with.o.narrow(1, 0, 30), with.o.narrow(1, 35, 30)}, 1), without.o), 1e-12);
  EXPECT_LT(rel(with.final_state, without.final_state), 1e-12);
}

TEST(GdnScan, LowPrecisionComputesInFloat32) {
  Inputs in = draw(kGate, 1, 80, 2, 8, 8, {30, 50}, 13, false);
  const GdnScanResult ref = gdn_recurrence(in.q, in.k, in.v, in.g, in.beta, in.group);
  const auto bf = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
  const GdnScanResult low = gdn_chunk_scan(bf(in.q), bf(in.k), bf(in.v), bf(in.g), bf(in.beta), in.group, 16);
  EXPECT_EQ(low.o.scalar_type(), at::kBFloat16);
  EXPECT_EQ(low.final_state.scalar_type(), at::kFloat) << "the state stays in the accumulator dtype";
  EXPECT_LT(rel(low.o.to(at::kDouble), ref.o), 3e-2);
}

TEST(GdnScan, ShapesAreChecked) {
  Inputs in = draw(kGate, 1, 8, 2, 4, 4, {8}, 1, false);
  EXPECT_THROW((void)gdn_chunk_scan(in.q, in.k.narrow(3, 0, 3), in.v, in.g, in.beta, in.group), Error);
  EXPECT_THROW((void)gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, in.group.to(at::kInt)), Error);
  EXPECT_THROW((void)gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, in.group, 0), Error);
}

TEST(GdnScan, FlopCountFollowsTheFormula) {
  // Q = 64, dk = dv = 128: intra 2*64*128*2 + 64*256 + 2*64*128 = 65536; state 2*128*128*3 = 98304.
  EXPECT_DOUBLE_EQ(gdn_scan_flops(4096, 64, 128, 128), 65536.0 + 98304.0);
  // State passing's summary from the factors: 4 dk (dk + dv) = 131072, 0.8 x the scan at these sizes.
  EXPECT_DOUBLE_EQ(delta_rule_summary_flops(128, 128), 131072.0);
  EXPECT_DOUBLE_EQ(gdn_scan_flops(10, 64, 1, 1), gdn_scan_flops(10, 10, 1, 1)) << "Q = min(chunk, S)";
}
