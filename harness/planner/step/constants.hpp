#pragma once
// Every constant of the whole-step model that is fitted or assumed, in one place (docs/planner.md, "The
// whole step: constants", says which published row each was fitted on). Nothing else in step/ holds a
// number that is not a definition (bytes of a dtype, 2 FLOPs per multiply-add).
namespace cpbench::plan::step {

struct StepConstants {
  // Achieved dense-GEMM rate / the GPU's peak of the precision (the model's matmuls: projections, MLP,
  // experts, LM head).
  double gemm_efficiency_bf16 = 0.50;       // Hopper / Blackwell
  double gemm_efficiency_bf16_a100 = 0.60;  // Ampere
  double gemm_efficiency_fp8 = 0.18;        // of the FP8 peak: dynamic scaling's casts and amax passes included
  // The part of each dimension's communication the stacks hide behind compute when there is compute to
  // hide it behind (exposed = max((1 - overlap) t, t - the compute it can run under)).
  double fsdp_overlap = 0.9;  // FSDP / ZeRO-3 prefetched all-gathers and async reduce-scatters
  double dp_overlap = 0.9;    // DDP / ZeRO-1/2 bucketed gradient reduction during the backward
  double tp_overlap = 0.0;    // TP + sequence parallel: on the critical path unless comm-overlap is set up
  double ep_overlap = 0.0;    // EP dispatch / combine: the experts wait for their tokens
  double pp_overlap = 0.5;    // PP's p2p sends
  // Gradient reduction dtype of FSDP / ZeRO (torchtitan's reduce_dtype fp32); parameters travel in bf16.
  double grad_reduce_bytes = 4;
  // Model states per parameter: bf16 weights 2, gradients 2 (fp32 reduce buffers are transient), fp32
  // master 4 + Adam m, v 8 = 12 in the optimizer state (DeepSpeed's 2 + 2 + 12; torchtitan's fp32 params,
  // grads and states total the same 16).
  double param_bytes = 2, grad_bytes = 2, optimizer_bytes = 12;
  // Adam on the GPU: HBM bytes read + written per parameter (fp32 master, m, v, grad read and written
  // back, bf16 copy out).
  double adam_hbm_bytes_per_param = 32;
  // The optimizer offloaded to the CPU (ZeRO-Offload): the host's passes over the parameters its GPUs
  // hold, one per micro-batch (the gradients accumulated on the CPU) and one for CPU Adam, at
  // host_params_per_s per host; PCIe bytes per parameter and micro-batch (bf16 gradients down) and per
  // step (bf16 weights up); the part of the shorter of host and GPU work hidden under the other.
  double host_params_per_s = 1.3e9;
  double offload_grad_bytes_per_param = 2, offload_param_bytes_per_param = 2;
  double offload_overlap = 0.7;
  // Logits per (token, vocab entry / tp) at the loss's peak: the backward of an fp32 log-softmax over
  // bf16 logits holds its saved output, its gradient and the input gradient, 4 B each.
  double logit_bytes = 12;
  // What DeepSpeed's ZeRO-3 with the optimizer offloaded still holds on the GPU per (sharded) parameter:
  // bf16 weights and gradients and its fp32 gradient partition and buckets.
  double offload_resident_bytes_per_param = 14.6;
  // The GPU memory a run cannot use beyond what torch reports as the device's (NCCL buffers, cuBLAS
  // workspace) and the caching allocator's reserve over the live peak, as a fraction of it.
  double memory_reserve_bytes = 1.0 * (1ull << 30);
  double allocator_overhead = 0.10;
  // --stack pytorch-cp (pytorch_cp.hpp): the rate of context_parallel's non-local SDPA calls (CP steps
  // 1 .. W - 1, dense) relative to what the kernel model gives the same block; the local call and every
  // counted merge, copy and wire term are priced as counted. Fitted on torchtitan's Llama 3.1 8B FSDP 4 /
  // CP 2 and FSDP 2 / CP 4 rows together (docs/planner.md, "The stack").
  double pytorch_cp_remote_call_efficiency = 0.35;
  // Microbatches per step when --global-batch is not given and pp > 1: pp_microbatches_per_stage x pp.
  int pp_microbatches_per_stage = 4;
};

// The constants in use.
[[nodiscard]] const StepConstants& constants();

}  // namespace cpbench::plan::step
