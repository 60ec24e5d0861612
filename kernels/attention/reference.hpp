#pragma once
// The single-device reference attention (the reference check and the local_only control): plain
// masked attention through ATen autograd, deliberately without fast paths or LSE merging, so the
// transports' kernels are checked against independent maths.
#include <ATen/ATen.h>

#include "sharders/mask.hpp"

namespace cpbench {

// Plain single-device attention with the same mask semantics (the reference and local_only path):
// queries with meta q_meta attend keys with meta k_meta. Differentiable through ATen autograd (sinks
// included). `sinks`: [Hq] learned sink logits or undefined (see reference_attention).
[[nodiscard]] at::Tensor local_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const TokenMeta& q_meta, const TokenMeta& k_meta, const MaskSpec& mask,
                                         double scale, const at::Tensor& sinks = {});

namespace kernels {
// The reference on a dense mask. q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] in any floating dtype (computed
// in the compute dtype, lse_merge.hpp), `mask` bool [B, Sq, Sk]. Returns [B, Hq, Sq, D] in q's dtype;
// fully masked rows 0 (and gradient 0) without NaN. Expands kv heads with repeat_interleave.
// `sinks` [Hq] (or undefined): learned attention sinks as the model defines them, one extra softmax
// column per head with score s_h that every query sees and whose value is zero; computed that way here,
// independently of the transports' rule after the merge (kernels/attention/sink.hpp).
[[nodiscard]] at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& mask, double scale, const at::Tensor& sinks = {});
}  // namespace kernels

}  // namespace cpbench
