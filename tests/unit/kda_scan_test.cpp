// The delta rule with a per-channel decay (Kimi Delta Attention; kernels/mixers/gdn/gdn_scan.hpp with g
// [R, L, H, dk]): the chunked form against the token-by-token recurrence in float64 (values, final state
// and every gradient, chunk lengths that do and do not divide the row, resets at and away from chunk
// boundaries, with an initial state, decays from a token's to hundreds of tokens' reach per channel),
// the recurrence against a token worked by hand, the scalar gate as the per-channel one's broadcast, and
// bfloat16 computed in float32 without overflow at strong decays.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/mixers/gdn/gdn_scan.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;

namespace {

struct Inputs {
  at::Tensor q, k, v, g, beta, group, initial;
};

// R rows of L tokens, H heads, unit-norm keys, per-channel log decays spread from ~-3 (forgets within a
// token) to ~-0.005 (reaches hundreds of tokens); documents as given (a row start is a reset).
Inputs draw(int64_t R, int64_t L, int64_t H, int64_t dk, int64_t dv, const std::vector<int64_t>& docs, uint64_t seed,
            bool initial, double decay_scale = 1.0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  Inputs in;
  const auto unit = [](const at::Tensor& x) { return x / x.norm(2, -1, true); };
  in.q = unit(at::normal(0.0, 1.0, {R, L, H, dk}, gen, o)) / std::sqrt(static_cast<double>(dk));
  in.k = unit(at::normal(0.0, 1.0, {R, L, H, dk}, gen, o));
  in.v = at::normal(0.0, 1.0, {R, L, H, dv}, gen, o);
  in.g = -decay_scale * at::softplus(at::normal(-2.0, 2.0, {R, L, H, dk}, gen, o));
  in.beta = at::sigmoid(at::normal(0.0, 1.0, {R, L, H}, gen, o));
  in.group = at::zeros({R, L}, at::kLong);
  int64_t at_ = 0, d = 0;
  for (int64_t len : docs) {
    in.group.narrow(1, at_, std::min(len, L - at_)).fill_(d++);
    at_ += len;
    if (at_ >= L) break;
  }
  if (at_ < L) in.group.narrow(1, at_, L - at_).fill_(d);
  for (int64_t r = 0; r < R; ++r) in.group[r] += 1000 * r;
  if (initial) in.initial = at::normal(0.0, 1.0, {R, H, dk, dv}, gen, o);
  return in;
}

std::vector<at::Tensor> leaves(Inputs& in) {
  std::vector<at::Tensor> v{in.q, in.k, in.v, in.g, in.beta};
  if (in.initial.defined()) v.push_back(in.initial);
  for (auto& t : v) t.requires_grad_(true);
  return v;
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

// Values, final state and gradients of sum(o * w) + sum(final * w2): chunked vs recurrence.
double worst_difference(const std::vector<int64_t>& docs, int64_t L, int64_t chunk, bool initial) {
  Inputs a = draw(2, L, 3, 8, 6, docs, 11, initial);
  Inputs b = draw(2, L, 3, 8, 6, docs, 11, initial);
  const auto la = leaves(a), lb = leaves(b);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor w = at::normal(0.0, 1.0, {2, L, 3, 6}, gen, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor w2 = at::normal(0.0, 1.0, {2, 3, 8, 6}, gen, at::TensorOptions().dtype(at::kDouble));
  const GdnScanResult c = gdn_chunk_scan(a.q, a.k, a.v, a.g, a.beta, a.group, chunk, a.initial);
  const GdnScanResult r = gdn_recurrence(b.q, b.k, b.v, b.g, b.beta, b.group, b.initial);
  ((c.o * w).sum() + (c.final_state * w2).sum()).backward();
  ((r.o * w).sum() + (r.final_state * w2).sum()).backward();
  double worst = std::max(rel(c.o, r.o), rel(c.final_state, r.final_state));
  for (size_t i = 0; i < la.size(); ++i) worst = std::max(worst, rel(la[i].grad(), lb[i].grad()));
  return worst;
}

}  // namespace

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
      const double d = worst_difference(docs, 100, chunk, initial);
      worst = std::max(worst, d);
      EXPECT_LT(d, 1e-12) << "chunk " << chunk << (initial ? " with" : " without") << " an initial state";
    }
  EXPECT_LT(worst_difference({100}, 100, 16, true), 1e-12) << "one document";
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
      Inputs in = draw(2, 100, 3, 8, 6, docs, 17, true, 0.02);
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

TEST(KdaScan, TheScalarGateIsItsBroadcast) {
  // GDN's one decay per head, given as the same value on every key channel, runs the same recurrence.
  Inputs in = draw(2, 50, 2, 8, 4, {20, 30}, 7, true);
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
  Inputs in = draw(1, 128, 2, 8, 8, {50, 78}, 13, false, 10.0);
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
  Inputs in = draw(1, 8, 2, 4, 4, {8}, 1, false);
  EXPECT_THROW((void)gdn_chunk_scan(in.q, in.k, in.v, in.g.narrow(3, 0, 3), in.beta, in.group), Error);
  // The secondary chunking's scalings: 3/2 dk per halving level, log2(64) = 6 levels.
  EXPECT_DOUBLE_EQ(gdn_scan_flops(4096, 64, 128, 128, true) - gdn_scan_flops(4096, 64, 128, 128), 1.5 * 128 * 6);
}
