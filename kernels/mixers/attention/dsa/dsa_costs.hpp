#pragma once
// DSA's formulas, without tensors: what its key-side wire moves and what its two stages cost. The CP
// path checks its bytes against these every call (dsa_context.cpp); the planner (harness/planner) is to
// price the indexer and the sparse core with them as two stages with their own balance.
//
// Per layer, per query token t that sees n_t keys (causal: n_t = t + 1 in its document), forward FLOPs:
//   indexer scoring   2 * H_I * (d_I + 1) * n_t     (every head's q_I . k_I, then the weighted sum over
//                                                    heads); grows with t: wants a head-tail layout
//   sparse core       2 * H * (2 r + dr) * min(k, n_t) + 2 * H * r * (dn + dv)
//                                                    (absorbed MLA over the picks: logits over the latent
//                                                    and the RoPE key, values over the latent; plus the
//                                                    absorption of q_nope and the up-projection of the
//                                                    output, per token); flat once n_t >= k: any even split
//   dense MLA core    2 * H * (dn + dr + dv) * n_t  (for comparison: the expanded form DSA replaces)
// The indexer's projections (q_I, k_I, head weights) are dense per-token work, 2 * hidden * (H_I d_I +
// d_I + H_I) (from h here; DeepSeek's q_I reads the q latent, 2 * q_lora * H_I * d_I instead).
// DeepSeek-V3.2 (H 128, r 512, dr 64, dn 128, dv 128, H_I 64, d_I 128, k 2048) over a causal 128K row
// (mean n_t = 65 536.5): indexer 1.08 GFLOP / token (dsa.md: ~1.07, the dot products alone), sparse
// core 0.60 (dsa.md: ~0.57, without the per-token absorption), dense MLA core 5.37.
//
// Wire (the allgather path, Megatron's design): per token per layer the latent r + dr and the index key
// d_I: 704 values at DeepSeek-V3.2's dims (against 40 960 for its expanded K and V). Per call a rank sends
// (W - 1) * B * S * (r + dr + d_I) values forward in the input dtype and the same count of gradient values
// backward in the accumulation dtype (max(4, element size) bytes).
//
// Wire on ring (dsa_ring.hpp; each pass W - 1 hops of this rank's [B, S, .] block, so per rank the count an
// all-gather sends): the sparse stage's round 1 passes the index keys (d_I per token, the kept candidates
// carrying their rows), round 2 the latent (r + dr); the dense stage passes the whole key side once. Either
// way each key-side value crosses each link once: forward_bytes / backward_bytes as allgather's (704 values
// per token at DeepSeek-V3.2's dims), round 1's part of the forward ring_score_bytes.
//
// Wire (the head-split path, a2a: dsa_heads.hpp): the key side all-gathered as above, plus per call the
// all-to-alls of the query side and the index score's sums over the head group. With N = W S the sequence,
// K = min(k, N), e the input's element size and c = max(4, e) the score dtype's (float32 / float64), a rank
// sends, forward / backward:
//   q            (W-1) B S (H/W) (dn + dr) e        / the same            (heads <-> tokens)
//   q_I          (W-1) B S H_u d_I e                / the same    (H_u = ceil(H_I / W) index heads a rank)
//   head weights (W-1) B S H_u c                    / the same
//   score sum    (W-1) B S N c  (reduce-scatter by query rows of each rank's partial [B, N, N])
//                                                   / dense: the same (its gradient); sparse: 0 (detached)
//   picks        (W-1) B S K 8  (all-gather)        / 0
//   KL target    dense (W-1) B S N c, sparse (W-1) B S K c (the heads' probability sums)  / 0
//   picked score sparse only: (W-1) B S K c         / the same (the KL's gradient at the picks)
//   output       (W-1) B S (H/W) dv e               / the same
// The score sum is the price of splitting the heads: [B, N, N] per rank per layer against the key-side
// gather's 704 values per token (at N = 128K, W = 8, bf16: 56 GiB forward against 0.15 GiB per layer per rank
// for a row of B = 1; the transport to use for DSA at length is allgather or ring).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/mla_dims.hpp"
#include "kernels/mixers/attention/dsa/dsa_config.hpp"

namespace cpbench::dsa_costs {

struct DsaDims {
  MlaDims mla;
  int64_t heads = 0;           // H: the attention's query heads
  int64_t index_heads = 0;     // H_I
  int64_t index_head_dim = 0;  // d_I
  int64_t topk = 0;            // k
};

// Values one token puts on the key-side wire: r + dr + d_I; a shared indexer layer (GLM-5's
// indexer_types: no indexer of its own) gathers its latent only, r + dr.
[[nodiscard]] int64_t wire_elements_per_token(const DsaDims& d, bool shared = false);
// Bytes one rank sends per layer call: forward (W-1) B S n e, backward (W-1) B S n max(4, e).
[[nodiscard]] int64_t forward_bytes(const DsaDims& d, int64_t cp, int64_t batch, int64_t local_tokens, int64_t element_size,
                                    bool shared = false);
[[nodiscard]] int64_t backward_bytes(const DsaDims& d, int64_t cp, int64_t batch, int64_t local_tokens,
                                     int64_t element_size, bool shared = false);
// Ring's sparse stage: the bytes of round 1 (the index keys), (W-1) B S d_I e; round 2 sends the rest of
// forward_bytes.
[[nodiscard]] int64_t ring_score_bytes(const DsaDims& d, int64_t cp, int64_t batch, int64_t local_tokens,
                                       int64_t element_size);

// The head-split path's exchanges of one layer call, each with what a rank sends forward and backward
// (formulas above with W read as the Ulysses degree U in the head exchanges, N = cp S still: hybrid splits
// the heads over groups of U ranks, a2a is U = W; the key-side gather, over all cp ranks, not included).
// Needs H % U == 0.
struct Exchange {
  std::string name;
  int64_t forward = 0, backward = 0;
};
[[nodiscard]] std::vector<Exchange> head_split_exchanges(const DsaDims& d, DsaLoss loss, int64_t cp, int64_t ulysses,
                                                         int64_t batch, int64_t local_tokens, int64_t element_size);
// The same summed, the key-side gather included: what a rank sends per layer call, forward + backward.
[[nodiscard]] int64_t head_split_bytes(const DsaDims& d, DsaLoss loss, int64_t cp, int64_t ulysses, int64_t batch,
                                       int64_t local_tokens, int64_t element_size);

// Forward FLOPs of one query that sees `keys` keys (formulas above).
[[nodiscard]] double indexer_flops(const DsaDims& d, double keys);
[[nodiscard]] double sparse_core_flops(const DsaDims& d, double keys);
[[nodiscard]] double dense_core_flops(const DsaDims& d, double keys);
// The same summed over the queries of one causal row of `tokens` tokens (n_t = 1 .. tokens), per token.
[[nodiscard]] double indexer_flops_per_token(const DsaDims& d, int64_t tokens);
[[nodiscard]] double sparse_core_flops_per_token(const DsaDims& d, int64_t tokens);
[[nodiscard]] double dense_core_flops_per_token(const DsaDims& d, int64_t tokens);

}  // namespace cpbench::dsa_costs
