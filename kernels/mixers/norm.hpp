#pragma once
// The RMSNorm every layer of the test model uses (its mixers' and its MLP's): y = x / sqrt(mean(x^2) +
// 1e-6) * w over the last dim, computed in float32 for bfloat16 inputs, in x's dtype.
#include <ATen/ATen.h>

namespace cpbench {

[[nodiscard]] inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor xf = x.dtype() == at::kBFloat16 ? x.to(at::kFloat) : x;
  const at::Tensor y = xf * at::rsqrt(xf.pow(2).mean(-1, true) + 1e-6);
  return y.to(x.scalar_type()) * w;
}

}  // namespace cpbench
