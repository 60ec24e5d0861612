#pragma once
// The single-device reference attention (the reference check and the local_only control).
#include <ATen/ATen.h>

#include "sharders/mask.hpp"

namespace cpbench {

// Plain single-device attention with the same mask semantics (the reference and local_only path):
// queries with meta q_meta attend keys with meta k_meta. Differentiable through ATen autograd.
[[nodiscard]] at::Tensor local_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const TokenMeta& q_meta, const TokenMeta& k_meta, const MaskSpec& mask,
                                         double scale);

}  // namespace cpbench
