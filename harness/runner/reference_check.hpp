#pragma once
// The reference check's criteria (docs/correctness.md): how one tensor of the CP run is compared
// with the single-rank reference. Plain functions over CPU copies; the runner decides what to compare.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "reports/result.hpp"

namespace cpbench {

// The elementwise bound of a dtype: |cp - ref| <= atol_scale * max|ref| + rtol * |ref| per element.
struct ElementwiseBound {
  double rtol = 0;
  double atol_scale = 0;  // atol as a fraction of the tensor's max |ref|
};
// float64 and float32 (the dtypes checked elementwise against a reference in the same dtype).
[[nodiscard]] ElementwiseBound elementwise_bound(at::ScalarType dtype);
// True for the cases judged against their own precision: bfloat16 and float16 always; float32 when
// the model has recurrent layers (Mixer::recurrent). The elementwise float32 rule compares with a
// float32 reference and so assumes that reference's own error is far below the bound; a recurrence's
// parameter gradients break that (exp of long decay sums, cancelling sums over every token): on
// scenarios/mamba_state_passing.yaml the float32 single-rank grad:layer2_dt_bias[0] is 1.1e-4 off
// float64, above the float32 bound, while the CP run is 1e-5 off (docs/correctness.md).
[[nodiscard]] bool judged_by_precision(at::ScalarType dtype, bool recurrent_layers);

// The precision rule's constants (FlashAttention-test style): the CP error against float64 may be at
// most k times the single-rank error in the same dtype, plus floor_scale * max|ref64|, on the max and
// on the q-quantile.
struct PrecisionRule {
  double k = 3.0;
  double floor_scale = 1e-6;
  double quantile = 0.99;
};

// Where a mismatch sits: names of the axes of the compared tensor ("b", "s", "v"), and optionally
// `owner` [B, S] mapping the first two axes to the CP rank that owns the token (-1: dropped).
// `zero_scale`: the scale the absolute bound is taken from when the reference tensor is exactly zero
// everywhere (a structurally zero gradient, e.g. dL/dwq when every query sees only itself); the
// runner passes the largest parameter gradient of the reference. Unused otherwise.
struct ElementNames {
  std::vector<std::string> axes;
  const at::Tensor* owner = nullptr;
  double zero_scale = 0;
};

[[nodiscard]] TensorError compare_elementwise(const std::string& name, const at::Tensor& cp, const at::Tensor& ref,
                                              const ElementwiseBound& bound, const ElementNames& names);
// `single` is the same model on one rank in the case's dtype; `ref64` the float64 reference;
// `cp_rounding` (optional, shaped like `cp`): the rounding the CP path legitimately adds per element
// beyond one rank's (for parameter gradients, Outputs::grad_rounding), added to both bounds as its max
// and its q-quantile.
[[nodiscard]] TensorError compare_precision(const std::string& name, const at::Tensor& cp, const at::Tensor& single,
                                            const at::Tensor& ref64, const PrecisionRule& rule,
                                            const ElementNames& names, const at::Tensor& cp_rounding = {});

// A mean over tokens (the loss, sum of `*_terms` / `count`) under the precision rule. A scalar has no
// distribution of errors to take a max or a quantile of: the single-rank error of a mean is one signed
// sum of the per-token errors, which cancel by chance (at S = 2048 it can be a tenth of its usual size),
// so a bound of k times it fails correct runs for luck alone. The scale is instead what that sum is
// without cancellation, the mean of the per-token errors' magnitudes, e_1 = sum |single_i - ref64_i| /
// count (>= the single-rank error of the mean for every sign pattern): a CP run whose per-token errors
// are of the single rank's size has |cp - ref64| <= k * e_1. Bound k * e_1 + floor_scale * |ref64|.
// `single_terms` and `ref64_terms`: the per-token terms of the two references (token_losses).
[[nodiscard]] TensorError compare_precision_mean(const std::string& name, const at::Tensor& cp, const at::Tensor& ref64,
                                                 const at::Tensor& single_terms, const at::Tensor& ref64_terms,
                                                 const at::Tensor& count, const PrecisionRule& rule);

// Half an ulp of every element of a 16-bit tensor (bfloat16: 2^(e-8), float16: 2^(e-11) for |x| in
// [2^e, 2^(e+1)); 0 for 0): the most one rounding to that dtype can have moved it. float64 result.
[[nodiscard]] at::Tensor half_ulp(const at::Tensor& x);

}  // namespace cpbench
