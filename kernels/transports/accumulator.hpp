#pragma once
// The running state of a transport (internal to kernels/transports/, and the transport tests): every
// value a transport carries across blocks or ranks (the merged output and log-sum-exp, dQ, the dK/dV
// partial sums that travel the ring, the buffer a reduce-scatter sums) is held in the compute dtype
// (lse_merge.hpp: float64 for float64 inputs, float32 for every other dtype), whatever the input dtype.
// Only the final result is rounded to the input dtype, once. Why it must be checked, not assumed: a
// state held in bfloat16 is rounded once per block or hop, an error that grows with W and that the
// reference check cannot tell from bf16's own noise at small W (docs/correctness.md, "Accumulators").
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace cpbench::kernels {

struct TransportState;

// Throws cpbench::Error naming `what` (the transport, pass and state, e.g. "ring backward: dQ"), the
// state's dtype and shape, the dtype it must have and the rank when `state` is not in
// compute_dtype(input). Cheap (a dtype comparison): called on every state in every call.
void check_accumulator(const at::Tensor& state, at::ScalarType input, const char* what, const TransportState& st);

// Test hook (tests/transport_rank_main.cpp, mode "agree"): while a ScopedLseTap lives on this thread,
// every ring and all-gather forward appends its merged log-sum-exp, [B, H', S'] in the compute dtype,
// where the forward holds it: the all-gather and ring transports [B, Hq, S] of this rank's tokens; a2a
// and hybrid [B, Hq/U, U*S] of this rank's head slice over its Ulysses group's tokens in the group's
// global order (head_parallel.hpp). Taps do not nest; without one, recording costs nothing.
class ScopedLseTap {
 public:
  ScopedLseTap();
  ~ScopedLseTap();
  ScopedLseTap(const ScopedLseTap&) = delete;
  ScopedLseTap& operator=(const ScopedLseTap&) = delete;
  [[nodiscard]] const std::vector<at::Tensor>& lse() const { return lse_; }

 private:
  friend void tap_forward_lse(const at::Tensor& lse);
  std::vector<at::Tensor> lse_;
};
// Called by the transports' forwards with their final merged lse (a detached copy is recorded).
void tap_forward_lse(const at::Tensor& lse);

}  // namespace cpbench::kernels
