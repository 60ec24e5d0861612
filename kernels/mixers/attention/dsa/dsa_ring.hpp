#pragma once
// DSA on the ring transport: the key side never gathered whole. Every rank's block (its S tokens in its
// buffer order, block j = rank j's) passes the ring W - 1 hops, one pass per round, posted before the
// block's maths so the next block travels meanwhile (kernels/transports/ring.cpp's pattern):
//   round 1 (ring_topk, no gradient): the index keys k_I [B, S, d_I] pass; each rank scores its queries
//            against the block it holds (dsa.hpp index_scores), masks them by the step's visibility at the
//            block's GLOBAL key indices, and merges them into its running top-k (dsa.hpp merge_topk: score
//            descending, then global key index ascending), so the picks equal the single rank's (select_topk
//            over every key in global order) element for element, whatever order the blocks arrive in. The
//            kept candidates carry their index-key rows along, so the picks' k_I rows are known at the end.
//   round 2 (ring_collect): the latent [B, S, r + dr] passes; each rank copies the rows it asked for (its
//            picks) out of the block it holds, beside the index-key rows of round 1: [B, M, r + dr + d_I].
//            Backward: the gradient of the collected rows (latent and index key) is scattered into a
//            partial sum per block that travels the ring home (the holder of block j adds its part and
//            sends it on; after W - 1 hops it reaches rank j), in the accumulation dtype (max(4, e) bytes: a
//            bf16 sum rounded at every hop would lose precision growing with W).
// So each value of the key side crosses each link once forward (d_I in round 1, r + dr in round 2):
// allgather's bytes, with one block and the picked rows in memory instead of the W S keys. The dense loss
// stage's KL reads every visible key's score, so it collects every row of the whole key side (columns 0 ..
// W S - 1: global order, memory like allgather's) in one pass and skips round 1. Bytes per pass are checked
// against dsa_costs.hpp every call (DsaRing's expected counts).
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "kernels/comm/communicator.hpp"

namespace cpbench::kernels::dsa {

// What the ring passes need on this rank; built once per step (dsa_context.cpp), copied into the autograd
// node for its backward.
struct DsaRing {
  comm::Communicator comm;
  int64_t local_tokens = 0;  // S: every rank's block
  // int64 [W * S]: the global key index (the visibility's column) of each rank-order column; block j is
  // columns [j S, (j + 1) S).
  at::Tensor key_global;
  // int64 [W * S]: its inverse, the rank-order column of each global key index.
  at::Tensor key_column;
  std::string nvtx;  // "cp:<sharder>"
  // What each pass must send from this rank (dsa_costs.hpp); a pass that sends otherwise throws.
  int64_t score_bytes = 0, collect_bytes = 0, return_bytes = 0;  // round 1, round 2, backward
};

struct RingPicks {
  at::Tensor picks;  // int64 [B, Sq, K]: global key indices in select_topk's order, -1 where invisible
  at::Tensor rows;   // [B, Sq, K, d_I]: the picks' index keys (zeros at -1), no gradient
};
// Round 1: this rank's queries' picks among every rank's keys, K = min(k, W S). k_local [B, S, d_I] this
// rank's index keys, q_idx [B, Sq, H_I, d_I], w [B, Sq, H_I] (compute dtype), visible bool [B, Sq, W S]
// (columns in global order). `stable` false: the merge by at::topk (the dsa_buffer_order control).
// Collective: every rank calls it.
[[nodiscard]] RingPicks ring_topk(const DsaRing& ring, const at::Tensor& k_local, const at::Tensor& q_idx,
                                  const at::Tensor& w, const at::Tensor& visible, bool relu, int64_t k,
                                  bool stable = true);

// Round 2: rows [B, M, n] of every rank's key side keys_local [B, S, n]; row m of batch b is key
// columns[b, m] (a global key index; -1: zeros). `known` [B, M, n_k] (optional): the rows' last n_k values,
// already collected (round 1's index keys), so only the first n - n_k travel. Differentiable in keys_local,
// all n values (the backward is collective too).
[[nodiscard]] at::Tensor ring_collect(const DsaRing& ring, const at::Tensor& keys_local, const at::Tensor& columns,
                                      const at::Tensor& known = {});

}  // namespace cpbench::kernels::dsa
