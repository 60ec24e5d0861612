#pragma once
// DeepSeek Sparse Attention (DSA; DeepSeek-V3.2, GLM-5): the lightning indexer's score, the top-k with
// its tie rule, sparse MLA over the picks and the indexer's KL loss. THE rules, one place: the layer
// (dsa_indexer.hpp) calls them on one rank (the single-rank reference) and on a CP rank alike, where
// the key side has been gathered and put in global order (dsa_context.hpp); the unit tests pin them
// against hand-written truth (tests/unit/dsa_test.cpp), as the mask's visibility rule is pinned.
//
// Score (HF DeepseekV32Indexer; Megatron's DSA indexer):
//   I[t, s] = sum_h w[t, h] * d_I^-0.5 * ReLU(q_I[t, h] . k_I[s])          (ReLU: model.attention.dsa.scoring_relu)
// computed in the compute dtype (float32 for 16-bit inputs, float64 for float64): the fp32 head weights.
//
// Top-k: among the keys visible to t (the mask module's rule; -inf elsewhere), the k_eff = min(k, keys)
// best by score DESCENDING, then by GLOBAL key index ASCENDING (Megatron's stable rule), so exact ties
// (ReLU makes many scores exactly 0, and w may be negative) never depend on where a key sits in a
// rank's buffer. A pick whose score is -inf (fewer than k visible keys) is -1 and is not attended: for
// the first k tokens of a document DSA is dense attention.
//
// Sparse MLA (absorbed / MQA form, DeepSeek's): per head h, q_abs = W_UK_h^T q_nope_h [r]; the key of s
// is the latent L_s = [c_s, k_rope_s] [r + dr], its value c_s; logits (q_abs, q_rope) . L_s * scale over
// the picks, softmax, o = sum p c_s, out_h = W_UV_h o [dv]. Equal to MLA's expanded attention over the
// same keys (W_UK_h c_s . q_nope_h = c_s . W_UK_h^T q_nope_h).
//
// Indexer loss per query row t (valid rows only; the caller sums and divides by the sequence's count):
//   dense   p = sum_h softmax_s(logits of every visible key), / H;  KL(p || softmax_s(I[t, s] visible))
//   sparse  p = sum_h softmax over the picks, / H;                   KL(p || softmax over the picks of I)
// p is a target (no gradient); the gradient reaches the indexer through I only.
#include <ATen/ATen.h>

#include <cstdint>

namespace cpbench::kernels::dsa {

// I [B, Sq, Sk] in the compute dtype from q_idx [B, Sq, H_I, d_I], w [B, Sq, H_I] (already times
// H_I^-0.5, in the compute dtype) and k_idx [B, Sk, d_I]. Differentiable.
[[nodiscard]] at::Tensor index_scores(const at::Tensor& q_idx, const at::Tensor& w, const at::Tensor& k_idx, bool relu);
// The same score of each query against its own keys, k_rows [B, Sq, K, d_I] -> [B, Sq, K] (the ring's
// collected index keys of the picks). Differentiable.
[[nodiscard]] at::Tensor index_scores_rows(const at::Tensor& q_idx, const at::Tensor& w, const at::Tensor& k_rows,
                                           bool relu);

// The picks: int64 [B, Sq, min(k, Sk)] of key columns (columns in global order), -1 where invisible.
// scores [B, Sq, Sk] (not differentiated), visible bool [B, Sq, Sk].
[[nodiscard]] at::Tensor select_topk(const at::Tensor& scores, const at::Tensor& visible, int64_t k);
// The same picks by at::topk, which leaves ties to the order the keys sit in (the dsa_buffer_order
// negative control; never the real path).
[[nodiscard]] at::Tensor select_topk_unstable(const at::Tensor& scores, const at::Tensor& visible, int64_t k);

// The same top-k kept while key blocks arrive one at a time (the ring transport, dsa_ring.hpp): the best
// min(k, keys seen) candidates so far, [B, Sq, n] each, ordered by THE rule (score descending, then global
// key index ascending), invisible keys kept at -inf with their index. Merging a block ranks the union of
// the kept candidates and the block's keys by that same strict total order and keeps the first min(k, n +
// block): the k best of a union are among the k best of each part, so after every block has been merged,
// in any order, the picks equal select_topk's over all keys in global order, element for element
// (tests/unit/dsa_test.cpp, DsaRunningTopk). `stable` false: the candidates ranked by at::topk, which
// leaves ties to arrival order (the dsa_buffer_order control on ring; never the real path).
struct RunningTopk {
  at::Tensor scores;  // [B, Sq, n] compute dtype, -inf for invisible keys; undefined before the first block
  at::Tensor index;   // int64 [B, Sq, n]: each candidate's global key index
  at::Tensor rows;    // [B, Sq, n, d]: each candidate's row of block_rows (when the merges pass them)
};
// block_scores [B, Sq, Sb] (not differentiated), block_visible bool [B, Sq, Sb], block_index int64 [Sb]:
// the block's keys' global indices (unique across blocks). block_rows [B, Sb, d] (optional, every merge
// or none): a row per key that the kept candidates carry along (the ring's index keys, dsa_ring.hpp).
void merge_topk(RunningTopk& top, const at::Tensor& block_scores, const at::Tensor& block_visible,
                const at::Tensor& block_index, int64_t k, bool stable = true, const at::Tensor& block_rows = {});
// The picks of a finished running top-k: its indices, -1 where the score is -inf (select_topk's form).
[[nodiscard]] at::Tensor running_picks(const RunningTopk& top);

struct SparseMla {
  at::Tensor out;     // [B, H, Sq, dv], q's dtype
  at::Tensor logits;  // [B, H, Sq, K] compute dtype, -inf at the -1 picks (scaled)
};
// q [B, H, Sq, dn + dr], latent [B, Sk, r + dr], w_up [H*(dn+dv), r] (HF's kv_b_proj), picks [B, Sq, K].
// Differentiable in q, latent and w_up. A row with no pick gives 0.
[[nodiscard]] SparseMla sparse_mla(const at::Tensor& q, const at::Tensor& latent, const at::Tensor& w_up,
                                   const at::Tensor& picks, int64_t qk_nope_head_dim, double scale);
// The same over the picked latents already collected per query, rows [B, Sq, K, r + dr] (row j of query t
// is the latent of picks[t, j]; any value where the pick is -1): what sparse_mla computes after its
// gather, and what the ring path (dsa_ring.hpp) calls with the rows it collected as their blocks passed.
[[nodiscard]] SparseMla sparse_mla_rows(const at::Tensor& q, const at::Tensor& rows, const at::Tensor& w_up,
                                        const at::Tensor& picks, int64_t qk_nope_head_dim, double scale);

// The main attention's logits of every (query, key) pair, [B, H, Sq, Sk] compute dtype, no gradient
// (the dense stage's target).
[[nodiscard]] at::Tensor dense_logits(const at::Tensor& q, const at::Tensor& latent, const at::Tensor& w_up,
                                      int64_t qk_nope_head_dim, double scale);

// KL per query row, [B, Sq] compute dtype (0 for a row with no visible key). target_logits [B, H, Sq, N]
// (detached here), index [B, Sq, N] differentiable, keep bool [B, Sq, N]: the keys the KL runs over (the
// visible keys, or the valid picks).
[[nodiscard]] at::Tensor indexer_kl(const at::Tensor& target_logits, const at::Tensor& index, const at::Tensor& keep);
// indexer_kl in two halves, for a caller whose heads are split over ranks (dsa_heads.hpp): the target's
// softmax over `keep`, summed over the heads given, [B, Sq, N] (no gradient; 0 where not kept), and the KL
// from such a sum over all `heads` heads (p = sum / heads). indexer_kl is the one composed of the other two.
[[nodiscard]] at::Tensor head_probability_sum(const at::Tensor& target_logits, const at::Tensor& keep);
[[nodiscard]] at::Tensor indexer_kl_of_sum(const at::Tensor& probability_sum, int64_t heads, const at::Tensor& index,
                                           const at::Tensor& keep);

// The compute dtype of DSA's scores and softmax: float64 for float64, float32 otherwise.
[[nodiscard]] at::ScalarType score_dtype(at::ScalarType input);

}  // namespace cpbench::kernels::dsa
