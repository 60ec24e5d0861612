#pragma once
// The gated delta rule (Gated DeltaNet's recurrence; Yang, Kautz, Hatamizadeh 2024), per row r and
// value head h, with a state S of [dk, dv]:
//   S_t = (I - beta_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t,
// with one log decay per head (GDN: g_t a scalar, Diag(exp(g_t)) = exp(g_t) I) or one per key channel
// (Kimi Delta Attention, Kimi Linear 2025: g_t in R^dk, alpha_t = exp(g_t) in (0, 1]^dk; the scalar gate
// is its broadcast),
// with S_{t-1} replaced by zero where group[t] != group[t-1] (a document or row start), and by
// `initial` (zero when undefined) before the row's first token.
// Shapes: q, k [R, L, H, dk] (one per value head: the caller maps key heads to value heads), v
// [R, L, H, dv], g [R, L, H] or [R, L, H, dk] (log decay, <= 0), beta [R, L, H] (in [0, 1]; g = beta = 0 is a
// transparent slot: the state passes it unchanged), group int64 [R, L] in contiguous runs along a row
// (make_scan_plan builds them), initial [R, H, dk, dv] or undefined; the state applies to the tokens of
// the row's first group only (a reset ends its reach).
// Results: o [R, L, H, dv] and final_state [R, H, dk, dv], the state after the row's last token. In
// q's dtype; bfloat16 / float16 inputs are computed in float32 (the accumulator rule) and rounded
// back. Differentiable in q, k, v, g, beta and initial.
// The recurrence is linear in the value columns and in the initial state, column by column: callers
// that need the transition of a stretch (the map from the incoming state to the outgoing one) append
// dk zero value columns and pass [0 | I] as the initial state (the identity-column form; gdn_state_passing.cpp).
#include <ATen/ATen.h>

#include <cstdint>

#include "kernels/mixers/gdn/gdn_config.hpp"  // kGdnChunk

namespace cpbench {

struct GdnScanResult {
  at::Tensor o;            // [R, L, H, dv]
  at::Tensor final_state;  // [R, H, dk, dv]
};


// The layer's form: chunkwise (WY / UT transform). Per chunk of Q tokens: A[t, s] = beta_t (k_t . k_s)
// exp(G_t - G_s) for s < t of one group (G the within-chunk cumulative log decay); one unit lower
// triangular solve (I + A) [U | W] = [beta v | beta exp(G) k] gives the chunk's new values as
// U - W S_in; the chunk's transition S_in -> S_out (dk x dk) and its contribution (dk x dv) come from
// them, and a sequential pass over the chunks composes the states. Time O(L Q (dk + dv) + L dk (dk + dv)),
// memory O(L Q H) for the intra-chunk matrices plus one state per chunk; no L x L tensor. With a
// per-channel g, exp(G_t - G_s) is per key channel: the Q x Q products are formed as [Q, Q, dk]
// (memory O(L Q H dk)). Every exponent is a difference of cumulative decays inside one chunk (<= 0: no
// overflow), the cumulative decays summed in the compute dtype (float32 for bfloat16 / float16).
[[nodiscard]] GdnScanResult gdn_chunk_scan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& g, const at::Tensor& beta, const at::Tensor& group,
                                           int64_t chunk = kGdnChunk, const at::Tensor& initial = {});

// The oracle: the recurrence above, token by token (L sequential steps), in the inputs' dtype. The unit
// tests' independent reference and the benchmark's baseline; the layer does not use it.
[[nodiscard]] GdnScanResult gdn_recurrence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           const at::Tensor& g, const at::Tensor& beta, const at::Tensor& group,
                                           const at::Tensor& initial = {});

// FLOPs of gdn_chunk_scan's forward per token per value head, for a row of `seq_len` tokens in chunks
// of `chunk` (effective Q = min(chunk, seq_len)), key dim dk, value dim dv. A multiply-add is 2 FLOPs;
// the dense Q x Q blocks are counted whole; exp, masks and the normalisations are not counted.
//   intra-chunk: 2 Q dk (k k^T) + 2 Q dk (q k^T) + Q (dv + dk) (the triangular solve, half a dense
//                product) + 2 Q dv (P U) + 2 Q dk (P W)
//   state:       2 dk dv ((exp(G) q - P W) S_in) + 2 dk dk (transition: Kd^T W) + 2 dk dv
//                (contribution: Kd^T U) + 2 dk dk dv / Q (the state pass, once per chunk)
//   per-channel gate (channel_gate): + 2 Q dk (the per-channel decay multiply in the two Q x Q products)
// Backward ~ 2 x forward by the usual convention.
[[nodiscard]] double gdn_scan_flops(int64_t seq_len, int64_t chunk, int64_t key_head_dim, int64_t value_head_dim,
                                    bool channel_gate = false);

}  // namespace cpbench
