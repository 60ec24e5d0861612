// The precision rule's pieces (harness/runner/reference_check.hpp): half an ulp of a 16-bit value, and
// the CP rounding allowance (each CP rank's partial rounded once) added to the bound of a tensor, and
// the scale of a mean over tokens (the loss).
#include <gtest/gtest.h>

#include <cmath>

#include "harness/runner/reference_check.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;

TEST(ReferenceCheck, HalfUlpOfBfloat16AndFloat16) {
  const at::Tensor x = at::tensor({1.0, 1.5, -3.0, 0.0, 1024.0, std::ldexp(1.0, -20)}, at::kDouble);
  const at::Tensor want_bf16 =
      at::tensor({std::ldexp(1.0, -8), std::ldexp(1.0, -8), std::ldexp(1.0, -7), 0.0, 4.0, std::ldexp(1.0, -28)},
                 at::kDouble);
  EXPECT_TRUE(at::equal(half_ulp(x.to(at::kBFloat16)), want_bf16)) << half_ulp(x.to(at::kBFloat16));
  const at::Tensor h = half_ulp(at::tensor({1.0, 2.0}, at::kDouble).to(at::kHalf));
  EXPECT_EQ(h[0].item<double>(), std::ldexp(1.0, -11));
  EXPECT_EQ(h[1].item<double>(), std::ldexp(1.0, -10));
  EXPECT_THROW((void)half_ulp(at::ones({1}, at::kFloat)), Error);
}

// A CP error beyond k x the single-rank error passes only with the allowance for the ranks' roundings.
TEST(ReferenceCheck, CpRoundingAllowanceWidensTheBoundByItsMaxAndQuantile) {
  const at::Tensor ref = at::linspace(1.0, 2.0, 200, at::kDouble);
  const at::Tensor single = ref + 1e-3;          // e1 = 1e-3 everywhere
  const at::Tensor cp = ref + 3.5e-3;            // e_cp = 3.5e-3: above k e1 = 3e-3
  const PrecisionRule rule;
  const TensorError without = compare_precision("g", cp, single, ref, rule, {});
  EXPECT_FALSE(without.ok);
  EXPECT_NEAR(without.score, 3.5e-3 / (3e-3 + 2e-6), 1e-9);
  const at::Tensor allowance = at::full({200}, 1e-3, at::kDouble);
  const TensorError with = compare_precision("g", cp, single, ref, rule, {}, allowance);
  EXPECT_TRUE(with.ok) << with.worst;
  EXPECT_NEAR(with.score, 3.5e-3 / (4e-3 + 2e-6), 1e-9);
  EXPECT_NE(with.worst.find("CP rounding allowance"), std::string::npos) << with.worst;
  // The allowance is taken per tensor: a wrong size is an error, not a silent broadcast.
  EXPECT_THROW((void)compare_precision("g", cp, single, ref, rule, {}, at::zeros({3}, at::kDouble)), Error);
}

// A mean over tokens is judged against the single rank's per-token errors, not against its one signed
// sum: per-token errors that cancel in the single rank's mean (signed mean 0) still set the scale.
TEST(ReferenceCheck, MeanOverTokensTakesItsScaleFromThePerTokenErrors) {
  const at::Tensor ref_terms = at::linspace(1.0, 2.0, 100, at::kDouble);
  at::Tensor single_terms = ref_terms.clone();
  single_terms.narrow(0, 0, 50).add_(1e-3);
  single_terms.narrow(0, 50, 50).sub_(1e-3);  // signed sum of the errors: 0; mean |error| 1e-3
  const at::Tensor count = at::scalar_tensor(100.0, at::kDouble);
  const at::Tensor ref = ref_terms.sum() / count;
  const PrecisionRule rule;
  const double floor = 1e-6 * ref.item<double>();
  const TensorError ok = compare_precision_mean("loss", ref + 2e-3, ref, single_terms, ref_terms, count, rule);
  EXPECT_TRUE(ok.ok) << ok.worst;
  EXPECT_NEAR(ok.single_rank_max, 1e-3, 1e-15);
  EXPECT_NEAR(ok.score, 2e-3 / (3e-3 + floor), 1e-9);
  EXPECT_NE(ok.worst.find("signed mean"), std::string::npos) << ok.worst;
  const TensorError bad = compare_precision_mean("loss", ref + 4e-3, ref, single_terms, ref_terms, count, rule);
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.mismatches, 1);
  EXPECT_THROW((void)compare_precision_mean("loss", at::zeros({2}, at::kDouble), at::zeros({2}, at::kDouble),
                                            single_terms, ref_terms, count, rule),
               Error);
}
