#pragma once
// Learned attention sinks (gpt-oss): one logit s_h per query head that joins every query's softmax
// denominator and carries no value. THE rule, one place that every transport calls (internal to
// kernels/):
//
//   forward, once per query, after every key block of every ring / all-gather step is merged:
//     lse' = logaddexp(lse, s_h),  out' = out * exp(lse - lse')
//   backward: the block gradients read out' and lse' as they read out and lse without a sink (the
//     sink only rescales every probability by exp(lse - lse')); the sink's own gradient is
//     ds_h = -sum over the call's queries (b, i) of exp(s_h - lse'_bhi) * rowsum(dO * out')_bhi.
//
// ds is this rank's partial (its queries; under a2a / hybrid its head slice's queries). It is reduced
// over the CP ranks once, as every parameter's gradient is (harness/runner/train_step.cpp). Adding the
// sink after each block instead of once counts it once per merged block: the `sink_per_step` negative
// control (kernels/controls/sink_faults.cpp) does exactly that.
//
// A fully masked row (lse = -inf): lse' = s_h, out' = 0, no gradient.
#include <ATen/ATen.h>

namespace cpbench::kernels {

// The standard deviation of a sink's initial value, N(0, kSinkInitStddev): large enough that a sink's
// effect (and a missing or doubled one) is far above bf16's noise; a zero sink would hide a dropped one.
inline constexpr double kSinkInitStddev = 2.0;

// out [B, H, S, D] and lse [B, H, S] in the compute dtype are replaced by out' and lse'; sinks [H] in any
// floating dtype (H: the heads of out, i.e. this rank's head slice under head-parallel transports).
void apply_sink(at::Tensor& out, at::Tensor& lse, const at::Tensor& sinks);

// ds [H] in sinks' dtype from lse' [B, H, S] and dsum = rowsum(dO * out') [B, H, S] (compute dtype).
[[nodiscard]] at::Tensor sink_grad(const at::Tensor& lse_with_sink, const at::Tensor& dsum, const at::Tensor& sinks);

// Throws cpbench::Error naming `who` unless sinks is undefined or a floating [heads] tensor on `device`.
void check_sinks(const char* who, const at::Tensor& sinks, int64_t heads, const at::Device& device);

}  // namespace cpbench::kernels
