#pragma once
// The chunked delta rule (gdn_scan.hpp) without a graph, fused: the forward that inference (grad mode
// off, or no input requiring grad) runs. Each (row, head) runs on one intra-op thread, chunk by chunk
// of Q tokens, on buffers of a few Q x d that stay in the core's cache; nothing of the row's length is
// formed besides the output. Per chunk, with S the entering state [dk, dv]:
//   G   the cumulative log decays from the chunk start (compute dtype);
//   P, A  the decayed products q_t . exp(G_t - G_s) k_s (s <= t) and beta_t k_t . exp(G_t - G_s) k_s
//       (s < t), pairs of one group only. Per key channel (KDA) they take one reference, the chunk's
//       first token: (q_t exp(G_t - G_0)) (k_s exp(G_0 - G_s))^T, one matmul, where every channel's
//       cumulative decay over the chunk stays within kFusedDecayRange (both factors finite and normal in
//       float32); a chunk beyond it is halved until its blocks are, and the pairs across halves take
//       the second half's first token as reference (both exponents <= 0, decayed_products.hpp's
//       secondary chunking). One decay per head (GDN): q k^T times the Q x Q matrix exp(G_t - G_s).
//   (I + A)^-1 by forward substitution (Q^3 / 6), then u = (I + A)^-1 beta (v - (exp(G) k) S),
//   o = (exp(G) q) S + P u, S <- Diag(exp(G_end)) S + (exp(G_end - G) k)^T u,
// with exp(G) zero on the tokens the entering state does not reach (after a reset inside the chunk),
// the decay to the chunk end kept for its last group only, and the state replaced past a reset.
// The same quantities as delta_rule_apply(delta_rule_chunks(...)), so the same results up to rounding.
// Inputs as gdn_chunk_scan's, in the compute dtype (float32 or float64), L >= 1, no graph; `initial`
// [R, H, dk, dv] or undefined (zero). Results: o [R, L, H, dv] and the final state, in that dtype.
#include <ATen/ATen.h>

#include <cstdint>

#include "kernels/mixers/gdn/gdn_scan.hpp"  // GdnScanResult

namespace cpbench {

// The largest per-channel cumulative decay (in log units) a block's products take from one reference.
inline constexpr double kFusedDecayRange = 40.0;

[[nodiscard]] GdnScanResult delta_rule_fused_scan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const at::Tensor& g, const at::Tensor& beta, const at::Tensor& group,
                                                  int64_t chunk, const at::Tensor& initial);

}  // namespace cpbench
