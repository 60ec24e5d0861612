// float16 activations in the linear mixers (kernels/mixers/linear/scan_plan.hpp recurrence_dtype): like
// bfloat16, they are computed in float32 and only the result is rounded. float16's range ends at 65 504, so
// sums of squares that float32 holds easily overflow it: the L2 norm of a 32-channel q whose channels are
// ~60 (32 x 3 600 = 115 200), the RMS of an output head whose values are ~300. Computed in float16 the norm
// is inf, its inverse 0, and the token's q or output vanishes. Each result against the same definition in
// float64 (for the norm, by hand).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>

#include "kernels/mixers/gdn/gdn.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/gdn_test_util.hpp"

using namespace cpbench;
using namespace cpbench::gdn_test;

TEST(RecurrenceDtype, Float16GdnLayerWithLargeActivationsMatchesFloat64) {
  // 2 key heads of dk = 32, 2 value heads of dv = 8, conv 4, chunk 16; projections ~N(0, 60^2).
  const GdnConfig c{2, 2, 32, 8, 4, 16};
  const GdnParams p = draw_params(c, 11);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
  const int64_t L = 40;
  const at::Tensor proj = at::normal(0.0, 60.0, {1, L, c.in_proj_width()}, gen, at::TensorOptions().dtype(at::kDouble))
                              .to(at::kHalf)
                              .to(at::kDouble);  // the same inputs in both dtypes
  const Laid st = make_stream("contiguous", 1, {{L}});
  const MaskSpec causal = MaskSpec::parse("causal");
  const auto run = [&](at::ScalarType dtype) {
    const GdnParams q = as_leaves(p, dtype);
    const GdnStepContext ctx = single_rank_linear_context(st.meta, causal, c, dtype, at::kCPU);
    return linear_forward<GdnParams, GdnConfig, GdnStepContext>(proj.to(dtype), q, c, ctx).detach();
  };
  const at::Tensor want = run(at::kDouble), got = run(at::kHalf);
  ASSERT_EQ(got.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::isfinite(got).all().item<bool>());
  EXPECT_GT(want.abs().max().item<double>(), 1.0) << "the outputs are not trivially small";
  EXPECT_LT(rel_error(got.to(at::kDouble), want), 1e-2) << "float16 against float64";
}

TEST(RecurrenceDtype, Float16GatedNormOfLargeOutputsIsTheDefinition) {
  // One head of dv = 4: o = (300, -200, 250, 100), z = 1, weights 1: mean of squares 60 625, above float16's max
  // once squared and summed. y = o / sqrt(60 625 + 1e-6) * silu(1).
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor o = at::tensor({300.0, -200.0, 250.0, 100.0}, f64).view({1, 1, 4});
  const at::Tensor z = at::ones({1, 1, 4}, f64), w = at::ones({4}, f64);
  const double rms = std::sqrt((300.0 * 300 + 200.0 * 200 + 250.0 * 250 + 100.0 * 100) / 4 + 1e-6);
  const double gate = 1 / (1 + std::exp(-1.0));
  const at::Tensor got = gated_rms_norm(o.to(at::kHalf), z.to(at::kHalf), w.to(at::kHalf), 1, 4, false);
  ASSERT_EQ(got.scalar_type(), at::kHalf);
  const double in[4] = {300, -200, 250, 100};
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_NEAR(got[0][0][j].item<double>(), in[j] / rms * gate, 2e-3) << "channel " << j;
}
