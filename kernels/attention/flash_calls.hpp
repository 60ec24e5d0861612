#pragma once
// The CUDA calls of the flash window and varlen routes (internal to kernels/; fused_attention.cpp
// routes to them): at::_flash_attention_forward / _flash_attention_backward with the arguments
// flash_args.hpp decided on the host. Nothing here runs without a CUDA device; every argument, shape and
// layout it uses is a flash_args.hpp function the CPU tests prove.
#include <ATen/ATen.h>

#include "kernels/attention/flash_args.hpp"
#include "kernels/attention/lse_merge.hpp"

namespace cpbench::kernels {

// One band through its window. q [B, Hq, n, D], k and v [B, Hkv, w, D] (the band's rows and key span)
// in bfloat16 / float16; `empty_rows` bool [B, n] (rows of the band that see nothing). Returns out
// [B, Hq, n, D] and lse [B, Hq, n] in the compute dtype: rows that see nothing out 0, lse -inf.
[[nodiscard]] BlockOutput flash_window_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const FlashWindow& win, const at::Tensor& empty_rows, double scale);
// Its gradients from the merged out and global lse ([B, Hq, n], -inf where nothing is seen anywhere):
// dq [B, Hq, n, D], dk / dv [B, Hkv, w, D] in the compute dtype (0 outside the call's rows / keys).
[[nodiscard]] BlockGrads flash_window_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                               const FlashWindow& win, double scale);
// A whole (trimmed) block through its varlen segments: q [B, Hq, n, D], k and v [B, Hkv, m, D];
// results as above. `v.cu_seqlens_q / k` and `v.empty_rows` must be on q's device (attach_flash_args).
[[nodiscard]] BlockOutput flash_varlen_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const FlashVarlen& var, double scale);
[[nodiscard]] BlockGrads flash_varlen_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                               const FlashVarlen& var, double scale);

}  // namespace cpbench::kernels
