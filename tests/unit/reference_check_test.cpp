// The precision rule's pieces (harness/runner/reference_check.hpp): half an ulp of a 16-bit value, and
// the CP rounding allowance (each CP rank's partial rounded once) added to the bound of a tensor.
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
