#pragma once
// DeepSeek Sparse Attention where the heads split (the `a2a` transport, Ulysses, and `hybrid`): the
// attention's heads AND the indexer's heads are split over a Ulysses group of U consecutive ranks (a2a:
// U = W, one group; hybrid: W/U groups), each query's index score summed over the head group before its
// top-k. On hybrid the key side is all-gathered over all W ranks, not passed around the ring across
// groups: DSA's key side is small (r + dr + d_I values a token) and every rank must pick among every
// visible key (the two-round ring is the ring transport's). The steps below are a2a's; on hybrid read the
// group's U S queries where "all N queries" is said (the keys stay N = W S), and U for W in the head split. The rules are dsa.hpp's; the step context (order, visibility, loss rows, the
// key-side gather) is dsa_context.hpp's; the wire is dsa_costs.hpp's head_split_exchanges.
//
// One layer call on rank u of W (N = W S; H % U == 0, the transport's own check before ranks start):
//   1. The key side [latent, k_I] is all-gathered and put in global order, as on allgather (the MLA latent
//      is every head's: MQA form).
//   2. q [B, H, S, dn + dr], q_I [B, S, H_I, d_I] and the head weights w [B, S, H_I] go head-parallel by
//      all-to-all: heads [u H/W, (u+1) H/W) and index heads [u H_u, (u+1) H_u) (H_u = ceil(H_I / W); the
//      index heads padded to W H_u with zero q_I and zero weight, which add an exact 0 to every score: 2
//      index heads split over W = 4 as 1, 1, 0, 0) of all N queries, the queries in RANK order (block v =
//      rank v's S tokens; a query's order never matters, the keys' does).
//   3. Each rank scores every query against every key over its index heads: a partial I_u [B, N, N]. The
//      partials are summed by a reduce-scatter over query rows (an all-to-all of row blocks, then the sum):
//      rank v gets the whole score of ITS OWN S queries, takes their top-k (the single rank's rule, on the
//      single rank's score) and runs the indexer's KL on its own rows only, divided by the sequence's valid
//      rows (as on allgather). The reduce-scatter's backward is the all-gather of the gradient: every rank
//      gets dL/dI of every row, the gradient of its partial, counted once (an all-reduce with every rank
//      taking the KL of every row would count it W times).
//   4. The picks are all-gathered (every rank needs every query's picks for its heads), sparse MLA runs
//      this rank's heads over all N queries with its heads' rows of W_up, and the output goes home by the
//      inverse all-to-all.
//   5. The KL's target p = mean over ALL H heads of the main attention's softmax: each rank's heads'
//      probability sum (dense: every visible key, [B, N, N]; sparse: the picks, [B, N, K]) is reduce-
//      scattered by rows like the score. In the sparse stage the score's reduce-scatter is detached (the
//      top-k only) and the KL's gradient travels through the partial scores at the picks ([B, N, K]).
// Every exchange checks its bytes against dsa_costs::head_split_exchanges, forward and backward.
#include <ATen/ATen.h>

#include "kernels/attention/mla_dims.hpp"
#include "kernels/mixers/attention/dsa/dsa_config.hpp"

namespace cpbench {

struct DsaStepContext;

// One DSA layer's tensors on this rank (dsa_indexer.cpp computes them; shapes of its S local tokens).
struct DsaLayerTensors {
  at::Tensor q;       // [B, H, S, dn + dr], RoPE'd
  at::Tensor latent;  // [B, S, r + dr]: [c, k_rope]
  at::Tensor w_up;    // [H (dn + dv), r]: W_kv_b
  at::Tensor q_idx;   // [B, S, H_I, d_I], RoPE'd
  at::Tensor k_idx;   // [B, S, d_I], RoPE'd
  at::Tensor w;       // [B, S, H_I], compute dtype, times H_I^-0.5
};

// The layer's attention output [B, H, S, dv] of this rank's tokens; adds the indexer loss and the picks
// to `ctx` (ctx.head_split() must hold).
[[nodiscard]] at::Tensor dsa_head_split_attend(const DsaLayerTensors& t, const DsaConfig& config, const MlaDims& dims,
                                               DsaStepContext& ctx);

}  // namespace cpbench
