#pragma once
// The two intra-chunk products of the chunked delta rule (gdn_scan.hpp), for every chunk at once:
//   kk[t, s] = sum_c k_t[c] k_s[c] exp(G_t[c] - G_s[c])   where `strict` holds (pairs s < t),
//   qk[t, s] = sum_c q_t[c] k_s[c] exp(G_t[c] - G_s[c])   where `keep` holds (pairs s <= t),
// and 0 elsewhere.
// Shapes: q, k [..., Q, d]; G [..., Q, Gd], the cumulative log decays inside each chunk (non-increasing
// along Q, since every log decay is <= 0), Gd = 1 (one decay per head, GDN) or d (one per key channel,
// KDA); keep, strict bool, broadcastable to [..., Q, Q], holding pairs with s <= t only. Results
// [..., Q, Q] in q's dtype, differentiable in q, k and G.
// Gd = 1: one Q x Q matmul each, times exp(G_t - G_s).
// Gd = d: secondary chunking (flash-linear-attention's chunk_kda splits a chunk into sub-chunks of 16;
// here the split recurses, halving down to single tokens). A block of 2b tokens holds its two halves'
// blocks and the pairs t in the second half, s in the first: one b x b product of q_t exp(G_t - G_m) and
// k_s exp(G_m - G_s), m the second half's first token (s < m <= t, so both exponents are <= 0: no factor
// overflows, and where one underflows the true product is smaller still). At b = 1 the diagonal pairs
// (t = s) need no decay. The chunk (Q) is padded to a power of two with empty tokens. Time per token:
// 2 Q d multiply-adds for the products (as the dense Q x Q matmul) and O(d log Q) elementwise for the
// scalings; memory O(Q d) per chunk and level (O(L d log Q) per head kept for the backward), never the
// [Q, Q, d] decays.
#include <ATen/ATen.h>

#include <cstdint>

namespace cpbench {

struct DecayedProducts {
  at::Tensor kk;  // [..., Q, Q]
  at::Tensor qk;  // [..., Q, Q]
};

[[nodiscard]] DecayedProducts decayed_products(const at::Tensor& q, const at::Tensor& k, const at::Tensor& G,
                                               const at::Tensor& keep, const at::Tensor& strict);

}  // namespace cpbench
