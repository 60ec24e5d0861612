#pragma once
// Multi-head latent attention (MLA; DeepSeek-V2/V3, Kimi K2), the parts CP needs, in one place: its
// dims, what its K/V weigh on the wire (expanded or latent), the up-projection a receiver does and that
// projection's gradient and FLOPs.
//
// Per token, a layer projects its input h to the latent c [r] (kv_lora_rank, RMS-normed) and ONE RoPE
// key k_rope [dr] (qk_rope_head_dim) shared by every head; the latent L = [c, k_rope] [r + dr]. The
// up-projection W_up [H * (dn + dv), r] (HF's kv_b_proj: per head h its rows [h*(dn+dv), (h+1)*(dn+dv)),
// the first dn W_UK_h, the next dv W_UV_h) gives per head
//   k_h = [W_UK_h c, k_rope]  (dn + dr = the q/k head dim)      v_h = W_UV_h c  (dv)
// and attention runs with q/k head dim dn + dr and v head dim dv, softmax scale 1/sqrt(dn + dr).
//
// The wire (model.attention.mla_wire): `expanded` moves every head's k and v, H*(dn + dr) + H*dv values
// per token; `latent` moves L, r + dr values per token, and the receiver up-projects each block it gets
// (2 * r * H * (dn + dv) FLOPs per token per block, counted as the kernel's work). DeepSeek-V3
// (H 128, r 512, dr 64, dn 128, dv 128): 40 960 against 576 values per token, 71.1x.
#include <ATen/ATen.h>

#include <cstdint>
#include <utility>

#include "kernels/attention/mla_dims.hpp"

namespace cpbench {

namespace kernels {

// The layer's (and the single-rank reference's) up-projection, HF's form: latent [B, S, r + dr] (c, then
// the RoPE'd shared key), w_up [H*(dn+dv), r] -> k [B, H, S, dn+dr], v [B, H, S, dv]. Differentiable.
[[nodiscard]] std::pair<at::Tensor, at::Tensor> mla_expand(const at::Tensor& latent, const at::Tensor& w_up,
                                                           int64_t heads, int64_t qk_nope_head_dim);

// A transport's up-projection of one received block, per head (internal to kernels/): latent
// [B, 1, S, r + dr] (one "head": the latent is not per head), w_up as above -> k [B, H, S, dn+dr],
// v [B, H, S, dv] in the latent's dtype. Not differentiable (called inside a transport's autograd node).
[[nodiscard]] std::pair<at::Tensor, at::Tensor> mla_up_project_block(const at::Tensor& latent, const at::Tensor& w_up,
                                                                     int64_t heads, int64_t qk_nope_head_dim);
// Its gradient: dk [B, H, S, dn+dr] and dv [B, H, S, dv] of the block -> d latent [B, 1, S, r + dr] (the
// shared key's gradient summed over heads), and adds the block's d w_up [H*(dn+dv), r] to dw_up. All in
// dk's dtype (the accumulation dtype); latent and w_up are cast to it.
[[nodiscard]] at::Tensor mla_up_project_block_grad(const at::Tensor& latent, const at::Tensor& w_up, int64_t heads,
                                                   int64_t qk_nope_head_dim, const at::Tensor& dk,
                                                   const at::Tensor& dv, at::Tensor& dw_up);

}  // namespace kernels
}  // namespace cpbench
