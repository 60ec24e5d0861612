// The learned sink's gradient (kernels/attention/sink.hpp sink_grad) against a hand count in float64:
// ds_h = -sum over (b, i) of exp(s_h - lse'_bhi) * dsum_bhi. In bf16 training the sinks are bf16 while the
// log-sum-exp and the row sums are float32; the sum must be taken at the float32 lse, and only the result
// rounded to the sinks' dtype. A log-sum-exp bf16 cannot hold (10.03: bf16's spacing on [8, 16) is 1/16,
// so it reads 10.0) puts exp(0.03) = 3 % on every term when the sum runs in the sinks' dtype, far above the
// final rounding's 2^-9.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "kernels/attention/sink.hpp"

namespace cpbench {
namespace {

TEST(SinkGrad, SummedAtTheLogSumExpsPrecisionAndRoundedOnceToTheSinksDtype) {
  const int64_t B = 2, H = 3, S = 40;
  const double sink[H] = {1.0, -0.5, 2.25};  // exact in bf16
  // lse'_bhi = 9.03 + (i mod 4) + h, dsum_bhi = 0.5 + 0.25 (i mod 3) + 0.125 b: float32 values; every lse is
  // 0.03 above a bf16 value (bf16 spacing 1/16 on [8, 16)).
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor lse = at::empty({B, H, S}, f32), dsum = at::empty({B, H, S}, f32);
  auto L = lse.accessor<float, 3>();
  auto Dm = dsum.accessor<float, 3>();
  double want[H] = {0, 0, 0};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        L[b][h][i] = static_cast<float>(9.03 + static_cast<double>(i % 4 + h));
        Dm[b][h][i] = static_cast<float>(0.5 + 0.25 * static_cast<double>(i % 3) + 0.125 * static_cast<double>(b));
        // By hand, from the float32 values the call gets.
        want[h] -= std::exp(sink[h] - static_cast<double>(L[b][h][i])) * static_cast<double>(Dm[b][h][i]);
      }
  for (const auto dtype : {at::kBFloat16, at::kFloat, at::kDouble}) {
    const at::Tensor sinks = at::tensor({sink[0], sink[1], sink[2]}, at::TensorOptions().dtype(at::kDouble)).to(dtype);
    const at::Tensor ds = kernels::sink_grad(lse, dsum, sinks);
    ASSERT_EQ(ds.scalar_type(), dtype) << "the gradient comes back in the sinks' dtype";
    // bf16: one rounding of the float32 result (2^-9 relative, with margin); float32 / float64: float32's sum.
    const double tol = dtype == at::kBFloat16 ? 1.0 / 256 : 1e-5;
    for (int64_t h = 0; h < H; ++h)
      EXPECT_NEAR(ds[h].item<double>() / want[h], 1.0, tol)
          << "head " << h << ", sinks " << c10::toString(dtype) << ": got " << ds[h].item<double>() << ", by hand "
          << want[h];
  }
}

}  // namespace
}  // namespace cpbench
