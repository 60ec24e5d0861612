#pragma once
// The single-rank reference a case's CP step is judged against (docs/correctness.md), and the record
// both sides fill: loss, logits, dL/d(x0) and every parameter gradient in the caller's coordinates.
#include <vector>

#include <ATen/ATen.h>

#include "harness/runner/case_context.hpp"

namespace cpbench {

// What the single-rank reference and the CP step are compared on.
struct Outputs {
  at::Tensor loss, logits, x0_grad;  // logits and dL/d(x0) in the caller's [B, S, ...] coordinates
  // The part of `loss` the mixers' layers added (DSA's indexer loss, MixerStepContext::aux_loss; summed
  // over the CP ranks), float64 scalar; undefined when none.
  at::Tensor aux_loss;
  // The keys DSA's layers picked per query, named by their input position and sorted per row (a set):
  // int64 [B, S, n] in the caller's coordinates, -1 for none (MixerStepContext::key_picks). Undefined: none.
  at::Tensor picks;
  std::vector<at::Tensor> grads;     // every parameter's gradient, in CaseContext::params order
  at::Tensor owner;                  // [B, S]: the CP rank owning each input position (-1: dropped)
  // CP runs with 16-bit parameters (else empty): per parameter, shaped like it, float32, the sum over
  // the CP ranks of half an ulp of each rank's partial gradient: the rounding the CP sum adds that one
  // rank's gradient does not have (docs/correctness.md, "The bf16 rule").
  std::vector<at::Tensor> grad_rounding;
};

// float64 / float32: the single-rank run in the case's dtype (`exact`). bfloat16 / float16: a float64
// reference (`exact`, the same rounded parameters and inputs upcast) and the single-rank run in the
// case's dtype (`single`), whose error against float64 is the precision's own.
struct References {
  Outputs exact, single;
  double seconds = 0;  // wall time of both
};

// Whether the 16-bit single-rank run (References::single, whose error against float64 is the
// precision's own) computes attention through the CP path's own block kernels, at W = 1, rather than
// the plain masked attention: yes where the CP path rounds like a flash kernel (CUDA's fused routes in
// bf16 / fp16, or the `kernels: flash_numerics` mode on any device), so both sides of the precision
// rule carry the same attention roundings (docs/correctness.md, "Flash numerics"). The float64
// reference (`exact`) always uses the plain attention.
[[nodiscard]] bool single_rank_uses_cp_kernels(AttentionKernels kernels, bool cuda, at::ScalarType dtype);

// Runs on the first rank of each CP group (the others do not call it). Leaves the case model's
// gradients set; the CP step zeroes them.
[[nodiscard]] References run_references(CaseContext& x);

// A parameter the forward did not use (the embedding when inputs_embeds is the primary) has no
// gradient; for the comparison and the all-reduce it is exactly zero.
[[nodiscard]] at::Tensor grad_or_zeros(const at::Tensor& p);

}  // namespace cpbench
