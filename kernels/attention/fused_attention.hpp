#pragma once
// Block attention on ATen's fused SDPA kernels that return the log-sum-exp (internal to kernels/).
//
// Each (query block, key block) pair of a CP transport runs through one route:
//   skipped         the plan is empty: nothing runs
//   tiled           the tiled kernel of tiled_kernel.hpp (the fallback and the CPU twin)
//   cpu_flash       at::_scaled_dot_product_flash_attention_for_cpu (+ _backward); float64, float32
//                   (CPU computes 16-bit inputs in float32); takes an additive mask
//   cuda_flash      at::_scaled_dot_product_flash_attention (+ _backward); bfloat16 / float16,
//                   head_dim <= 256 (zero-padded to a multiple of 8); no mask (diagonal causal or fully visible blocks)
//   cuda_flash_window  at::_flash_attention_forward (+ _backward) with window_size_left / right,
//                   band by band (flash_args.hpp FlashWindow: shifted-causal and sliding-window bands);
//                   a masked band no window expresses runs on cuda_efficient, a full band on flash
//   cuda_flash_varlen  at::_flash_attention_forward (+ _backward) with cum_seq_q / k: the whole block in
//                   one call (flash_args.hpp FlashVarlen: document masks)
//   cuda_efficient  at::_scaled_dot_product_efficient_attention (+ _backward); float32 / 16-bit;
//                   takes an additive bias (masked blocks neither flash route expresses, float32 ones)
// The flash routes need 16-bit inputs and head_dim <= 256 (padded to a multiple of 8, fused_head_dim); the window and varlen arguments
// are decided on the host with the plan (attach_flash_args, PlanCache on CUDA), so the CPU routes and
// CPU plans are untouched.
// Per plan: a diagonal causal block (BlockPlan::causal) runs with is_causal; a fully visible block
// unmasked; a masked block runs band by band (block_plan.hpp mask_bands: query tiles grouped by the
// key span of their non-empty cells), each band on its span only, unmasked when its cells are all full
// (a head-tail block off the diagonal is one such rectangle), else with the band's own mask window, so
// no call builds a mask of the whole block (rows that see nothing are fixed to out 0, lse -inf). Float64 on CUDA stays on the tiled kernel (no fused CUDA kernel takes it).
//
// Results are in the compute dtype (lse_merge.hpp: float64 stays float64, else float32), so the
// transports merge partial results in float32 by LSE whatever the kernel's input dtype.
#include <ATen/ATen.h>

#include <array>

#include "kernels/attention/tiled_kernel.hpp"

namespace cpbench::kernels {

// fused: the best fused route per block (above); tiled: every block on the tiled kernel;
// flash_numerics: every block on the tiled kernel with FlashAttention-2's 16-bit roundings
// (tiled_kernel.hpp FlashRounding; a no-op for float32 / float64 inputs): the CPU's stand-in for the
// numerics of a GPU's bf16 flash routes (docs/correctness.md, "Flash numerics").
enum class KernelPolicy { fused, tiled, flash_numerics };

// What a block's kernel call hands back beyond the route's maths.
struct BlockNumerics {
  FlashRounding rounding;  // tiled route only: FA2's roundings (KernelPolicy::flash_numerics)
  // A rank that holds one block (W = 1) merges nothing: the fused routes then return out and dq, dk,
  // dv in the kernel's own dtype (16-bit on CUDA) instead of the compute dtype, so no float32 round
  // trip is paid (lse stays in the compute dtype). Full and causal blocks on one kernel call only;
  // every other block comes back in the compute dtype as before.
  bool kernel_dtype_out = false;
  // The head dim the fused kernel is called with, q, k, v zero-padded to it and the results sliced
  // back (0: fused_head_dim of the route; a CPU test passes one to prove the padding on cpu_flash).
  int64_t call_head_dim = 0;
};

enum class KernelRoute { skipped, tiled, cpu_flash, cuda_flash, cuda_flash_window, cuda_flash_varlen, cuda_efficient };
// Every route, in enum order (fixed-width per-route counters, e.g. the runner's rank summaries).
inline constexpr std::array<KernelRoute, 7> kKernelRoutes{
    KernelRoute::skipped,          KernelRoute::tiled,          KernelRoute::cpu_flash,     KernelRoute::cuda_flash,
    KernelRoute::cuda_flash_window, KernelRoute::cuda_flash_varlen, KernelRoute::cuda_efficient};
[[nodiscard]] const char* to_string(KernelRoute route);

// The dtype a block kernel reads q, k, v in: the compute dtype, except 16-bit inputs on CUDA under the
// fused policy (flash / efficient read bfloat16 / float16 directly).
[[nodiscard]] at::ScalarType kernel_dtype(at::ScalarType input, const at::Device& device, KernelPolicy policy);

// The head dim `route`'s kernel is called with for inputs of `dtype` (a kernel_dtype) with `head_dim`:
// on the CUDA fused routes, 16-bit inputs are zero-padded to a multiple of 8 (flash's head-dim rule;
// the memory-efficient kernel's 16-bit kernels need 8-element aligned rows, else "query is not
// correctly aligned (strideM)"), as SDPA pads them; else head_dim. routed_forward / routed_backward pad
// q, k, v (and dout, out) to it and slice the results back; the softmax scale stays the caller's
// (1/sqrt of the original head_dim), and zero columns add nothing to q.k, out, dq, dk or dv.
[[nodiscard]] int64_t fused_head_dim(KernelRoute route, at::ScalarType dtype, int64_t head_dim);

// The route a block with `plan` takes for inputs of `dtype` (a kernel_dtype) on `device`, with
// `head_dim` and q_heads over kv_heads (1, 1: no GQA). On CUDA with flash's dtypes and head dims
// (16-bit, fused_head_dim <= 256): cuda_flash when unmasked; cuda_flash_window when every masked band
// has a window; else cuda_flash_varlen when the block has varlen segments its call runs
// (flash_args.hpp varlen_call_runs: not max_q == 1 with GQA); else cuda_flash_window when some band
// has a window; else cuda_efficient.
[[nodiscard]] KernelRoute block_route(const BlockPlan& plan, at::ScalarType dtype, const at::Device& device,
                                      int64_t head_dim, KernelPolicy policy, int64_t q_heads = 1,
                                      int64_t kv_heads = 1);

// (query, key) pairs `route` evaluates for a block with `plan` of `batch` rows, summed over the batch
// (per head): 0 skipped; the plan's computed_pairs on the tiled route and for full or causal blocks on
// a fused one (a causal diagonal tile counts whole); the bands' area (mask_bands) for a masked block
// on a fused route, where cuda_flash_window counts a windowed band as its call's rows x keys, and
// cuda_flash_varlen the segments' sum of lq x lk. >= plan.visible_pairs.
[[nodiscard]] int64_t routed_pairs(const BlockPlan& plan, KernelRoute route, int64_t batch);

// One block through `route` (from block_route). q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] in the
// kernel dtype. Returns out [B, Hq, Sq, D] and lse [B, Hq, Sq] in the compute dtype; rows outside the
// plan: out 0, lse -inf. Not differentiable (call from a custom autograd Function).
// numerics.call_head_dim: the head dim the kernel is called with (0: fused_head_dim; a CPU test passes
// one to prove the padding on cpu_flash).
[[nodiscard]] BlockOutput routed_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const BlockPlan& plan, double scale, KernelRoute route,
                                         BlockNumerics numerics = {});

// Gradients of one block from the MERGED output and global lse (flash-attention backward). dout, q,
// k, v in the kernel dtype; out [B, Hq, Sq, D] and lse [B, Hq, Sq] (-inf on rows that see nothing
// anywhere) and dsum = rowsum(dout * out) in the compute dtype (dsum: tiled route only; with
// numerics.rounding on, it is recomputed from the rounded out, as FA2 reads it). out may also be in
// the kernel dtype (a BlockNumerics::kernel_dtype_out forward). Returns dq, dk, dv in the compute
// dtype (kernel dtype per BlockNumerics::kernel_dtype_out).
[[nodiscard]] BlockGrads routed_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                         const at::Tensor& dsum, const BlockPlan& plan, double scale,
                                         KernelRoute route, BlockNumerics numerics = {});

}  // namespace cpbench::kernels
