#pragma once
// Mamba-2's selective scan (the recurrence of the `M` mixer, mamba.hpp): the chunked form the layer runs,
// its FLOP count, and two references (the quadratic form and the plain recurrence) for tests and benchmarks.
#include <ATen/ATen.h>

#include <cstdint>

#include "kernels/mixers/mamba/mamba_config.hpp"  // kSsmChunk

namespace cpbench {

// ---- the selective scan ----
// Every form computes, per row r and head h (heads h use B/C group h / (H / G)):
//   y[t] = sum_{s <= t, no reset in (s, t]} C[t]·B[s] exp(sum_{s < u <= t} dt[u] A) dt[s] x[s] + D x[t]
// i.e. the recurrence state[t] = exp(dt[t] A) state[t-1] + dt[t] x[t] B[t]^T, y[t] = state[t] C[t] + D x[t],
// with the state reset to zero where group[t] != group[t-1] (and at t = 0).
// Shapes: x [R, L, H, P], dt [R, L, H] (>= 0; 0 = a transparent slot: no decay, no input),
// A [H] (< 0), B/C [R, L, G, N], D [H], group int64 [R, L], groups contiguous runs along a row (as
// make_scan_plan builds them) -> y [R, L, H, P] in x's dtype. Differentiable in x, dt, A, B, C, D.
// bfloat16 / float16 inputs are computed in float32 (decays summed in bfloat16 lose everything) and
// the result is rounded back; float32 and float64 compute in their own dtype.


// The layer's scan: Mamba-2's chunked state-space-duality (SSD) form. The row is cut into chunks of
// `chunk` tokens (the last one shorter when L is no multiple of it; chunk > L means one chunk of L):
// inside a chunk the quadratic form above, between chunks a sequential pass of the [R, H, P, N] chunk
// states. Time O(L·Q·(N + P)), memory O(L·Q·H) for the intra-chunk weights plus one state per chunk;
// no L × L tensor. Decays are differences of cumulative sums inside one chunk only.
[[nodiscard]] at::Tensor ssm_scan(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                                  const at::Tensor& C, const at::Tensor& D, const at::Tensor& group,
                                  int64_t chunk = kSsmChunk);

// FLOPs of ssm_scan's forward pass per token per head, for a row of `seq_len` tokens cut into chunks
// of `chunk` (effective chunk min(chunk, seq_len)) with head dim P and state size N. Convention: a
// multiply-add is 2 FLOPs; the dense chunk is counted (Q keys per token, not the causal half the
// result keeps); C·B is counted per head although the H/G heads of a group share it; exp, masks and
// the D skip are not counted. Backward ≈ 2 × forward by the usual convention.
//   intra-chunk: 2·Q·N (C[t]·B[s] for the Q keys of its chunk) + 2·Q·P (weights times x)
//   state:       2·P·N (dt x ⊗ B into the chunk state) + 2·P·N (C · the incoming state)
//                + 2·P·N / Q (the chunk state's decay and sum, once per chunk)
[[nodiscard]] double ssm_scan_flops(int64_t seq_len, int64_t chunk, int64_t head_dim, int64_t state);

// References (unit tests and tests/bench/ssm_scan_bench.cpp; the layer does not use them). Same
// contract as ssm_scan.
// The quadratic (SSD "attention") form over whole rows: one [R, L, L, H] decay matrix, decays as
// differences of one cumulative sum over the row. O(L^2) time and memory per head.
[[nodiscard]] at::Tensor ssm_scan_quadratic(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                            const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                                            const at::Tensor& group);
// The plain recurrence over time (state [R, H, P, N]): the readable definition, L sequential steps.
[[nodiscard]] at::Tensor ssm_scan_recurrence(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                             const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                                             const at::Tensor& group);

}  // namespace cpbench
