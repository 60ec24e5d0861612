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
// Results: o [R, L, H, dv] and final_state [R, H, dk, dv], the state after the row's last token. o in
// q's dtype, the state in the compute dtype; bfloat16 / float16 inputs are computed in float32 (the accumulator rule) and rounded
// back. Differentiable in q, k, v, g, beta and initial.
// The final state is affine in the initial one: final = T initial + C (delta_rule_summary).
#include <ATen/ATen.h>

#include <cstdint>

#include "kernels/mixers/gdn/gdn_config.hpp"  // kGdnChunk

namespace cpbench {

struct GdnScanResult {
  at::Tensor o;            // [R, L, H, dv]
  at::Tensor final_state;  // [R, H, dk, dv]
};


// The layer's form: chunkwise (WY / UT transform), in two parts.
// delta_rule_chunks: everything that does not depend on the state entering a chunk, every chunk of Q
// tokens at once. A[t, s] = beta_t (k_t . k_s) exp(G_t - G_s) for s < t of one group (G the within-chunk
// cumulative log decay); one unit lower triangular solve (I + A) [U | W] = [beta v | beta exp(G) k]
// gives the chunk's new values as u = U - W S_in. With a per-channel g, exp(G_t - G_s) is per key
// channel and the Q x Q products come from secondary chunking (decayed_products.hpp: matmuls, never
// [Q, Q, dk]). Every exponent is a difference of cumulative decays inside one chunk (<= 0: no overflow),
// the cumulative decays summed in the compute dtype (float32 for bfloat16 / float16).
// delta_rule_apply: the chunks in order from `initial` (undefined: zero), per chunk u = U - W S_in,
// o = exp(G) q S_in + P u, S_out = Diag(a) S_in + Kd^T u; the only sequential part.
// delta_rule_summary: the stretch's affine map final = T initial + C from the same factors (the
// delta rule's state step on [T | C] from [I | 0]); what state passing exchanges.
// Without a graph (grad mode off, or no input requiring grad), rows of more than 512 tokens take the
// factors in blocks of whole chunks (about 512 tokens), one block per intra-op thread, so that the
// elementwise passes run on cache-resident tensors, and delta_rule_apply runs each (row, head) in place
// on one thread; the same operations per chunk, so the same results up to rounding. With a graph, every
// chunk at once (the form autograd differentiates).
// Time O(L Q (dk + dv) + L dk dv) (summary: + L dk (dk + dv)); memory O(L Q H) for the intra-chunk
// matrices, O(L H dk log Q) more with a per-channel g, plus one state per chunk; no L x L tensor.
struct DeltaRuleChunks {
  at::Tensor qd;  // [R, H, nc, Q, dk]: exp(G_t) q_t, 0 for tokens the entering state does not reach
  at::Tensor P;   // [R, H, nc, Q, Q]: (q_t . exp(G_t - G_s) k_s) for s <= t of one group
  at::Tensor U;   // [R, H, nc, Q, dv]
  at::Tensor W;   // [R, H, nc, Q, dk]
  at::Tensor Kd;  // [R, H, nc, Q, dk]: keys of the chunk's last group decayed to its end
  at::Tensor a;   // [R, H, nc, Gd]: the chunk's whole decay (Gd = 1 or dk), 0 after a reset
  int64_t length = 0;  // L (nc * Q >= L; the last chunk is filled up with transparent slots)
};
struct DeltaRuleSummary {
  at::Tensor transition;    // [R, H, dk, dk]
  at::Tensor contribution;  // [R, H, dk, dv]
};
// Inputs as gdn_chunk_scan's (L >= 1); the factors in the compute dtype.
[[nodiscard]] DeltaRuleChunks delta_rule_chunks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& g, const at::Tensor& beta, const at::Tensor& group,
                                                int64_t chunk = kGdnChunk);
// o [R, L, H, dv] and the final state in the compute dtype.
[[nodiscard]] GdnScanResult delta_rule_apply(const DeltaRuleChunks& chunks, const at::Tensor& initial = {});
[[nodiscard]] DeltaRuleSummary delta_rule_summary(const DeltaRuleChunks& chunks);

// delta_rule_apply(delta_rule_chunks(...), initial), o rounded back to q's dtype. Without a graph (grad
// mode off, or no input requiring grad): the same form fused per (row, head) (delta_rule_fused.hpp).
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
//                product) + 2 Q dv (P u)
//   state:       2 dk dv (W S_in) + 2 dk dv (exp(G) q S_in) + 2 dk dv (Kd^T u)
//   per-channel gate (channel_gate): + 3 dk log2(Q) / 2 (the secondary chunking's scalings: three
//                multiplies of half the tokens per halving level)
// Backward ~ 2 x forward by the usual convention.
[[nodiscard]] double gdn_scan_flops(int64_t seq_len, int64_t chunk, int64_t key_head_dim, int64_t value_head_dim,
                                    bool channel_gate = false);

// FLOPs of delta_rule_summary per token per value head: 4 dk (dk + dv) (W X and Kd^T u on dk + dv columns).
[[nodiscard]] double delta_rule_summary_flops(int64_t key_head_dim, int64_t value_head_dim);

}  // namespace cpbench
