#pragma once
// Head-parallel attention (internal to kernels/transports/): the machinery the `a2a` (Ulysses) and
// `hybrid` (Ulysses x ring, USP) transports share. a2a is the mesh W x 1; hybrid is U x (W/U).
//
// The mesh. A CP group of W ranks is split into R = W/U Ulysses groups of U consecutive ranks: rank
// r = g*U + u sits in Ulysses group g at position u; ring u is the ranks u, U+u, 2U+u, ... (one rank
// of each Ulysses group). Consecutive ranks share a node first, so the all-to-all (the heavier
// traffic) stays on the fast link and the ring crosses nodes, as yunchang's use_ulysses_low does.
//
// One call, for q [B, H, S, D] and k, v [B, Hkv, S, D] of this rank's S tokens (the case's layout):
//   1. GQA: when Hkv is not a multiple of U, k and v repeat each head U / gcd(Hkv, U) times (the
//      repeat_interleave convention, so query head h still reads the copy of its kv head h / G); Hk =
//      lcm(Hkv, U) kv heads then split evenly. H % U == 0 is required (unsupported_heads).
//   2. One all-to-all inside the Ulysses group moves q, k, v from sequence-sharded to head-sharded:
//      rank (g, u) receives heads [u*H/U, (u+1)*H/U) (and the matching Hk/U kv heads) of the U*S tokens
//      of its group, concatenated in rank order: [B, H/U, U*S, D].
//   3. Those queries attend every group's keys for the same heads: ring attention over ring u (R
//      positions; the plain ring code, ring.cpp, with st.ring), its block plans from the metadata
//      of the tokens in the order they arrived (below). For a2a (R = 1) that is one block: the whole
//      sequence against itself.
//   4. The output goes back with the inverse all-to-all: [B, H, S, D] of this rank's tokens.
//   MLA (V's head dim Dv != K's): the tensors of one all-to-all travel flattened per destination. The
//   latent wire (k = the latent [B, 1, S, r + dr], every head's): only q takes the head all-to-all; the
//   latent is all-gathered in the group (comm::group_all_gather_autograd; backward: a reduce-scatter of
//   each rank's partial d latent, float32 for 16-bit inputs) and each rank up-projects the group's U*S
//   tokens with its heads' rows of W_up (AttentionContext::kv_up); the ring across groups moves the
//   group's latent (its latent wire). Bytes: head_parallel_costs.hpp, checked every MLA call per pass.
//   Backward: the all-to-alls are differentiable (comm::all_to_all_autograd, the same exchange
//   reversed) and the ring's backward is the ring transport's.
//
// Order of the gathered sequence: it arrives in rank order, which is not the global order for most
// layouts (load_balanced, striped, thd, workload_balanced). With the layout's own map
// (AttentionContext::global_index, the sharder's GlobalLayout) each Ulysses group's U*S tokens are put
// in global order right after the all-to-all (one index_select on the device, the permutation
// stored with the plans) and back to rank order before the all-to-all home; a2a's one block is then
// the causal triangle the fused kernels run with is_causal instead of masked band by band. Either
// way the plans evaluate the mask on ctx.all (every rank's token metadata, permuted the same way):
// each token carries its global position, row and document, so the mask rule (sharders/mask.hpp)
// holds in any order; without the map the tokens stay in rank order, correct but masked. The
// rank-order control (rank_order_positions) plants the bug the metadata guards against: it takes the
// tokens' arrival index as their position (and is never reordered).
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/transports/transport_common.hpp"

namespace cpbench::kernels {

struct UlyssesMesh {
  int ulysses = 1, ring = 1;  // U, R = W / U
  int group = 0, position = 0;  // g, u of this rank
  [[nodiscard]] std::vector<int> group_ranks() const;  // g*U .. g*U + U-1
  [[nodiscard]] std::vector<int> ring_ranks() const;   // u, U+u, ..., (R-1)*U + u
};
// Throws cpbench::Error naming both numbers when U does not divide W.
[[nodiscard]] UlyssesMesh ulysses_mesh(int world, int rank, int64_t ulysses);

// Times each kv head is repeated so that Hk = Hkv * it is a multiple of U: U / gcd(Hkv, U).
[[nodiscard]] int64_t kv_replication(int64_t kv_heads, int64_t ulysses);

// "" or why `transport` cannot split the heads over a Ulysses degree `ulysses` of a CP group of `cp`.
[[nodiscard]] std::string head_split_reason(const std::string& transport, int64_t cp, int64_t ulysses,
                                            int64_t q_heads, int64_t kv_heads);

struct HeadParallelOptions {
  std::string transport;              // for messages
  int64_t ulysses = 1;                // U
  bool rank_order_positions = false;  // negative control: positions = arrival index, not the global ones
};

// For each Ulysses group of `group_tokens` = U*S consecutive rank-order columns, the arrival index of
// its tokens in global order: int64 [R, U*S] from the layout's map `global_index` ([W*S], the global
// position of each rank-order column).
[[nodiscard]] at::Tensor gathered_global_order(const at::Tensor& global_index, int64_t group_tokens);

// The plans step 3 reads: ring position g's U*S gathered queries (ctx.all columns [g*U*S, (g+1)*U*S))
// against each ring position's key block, world R, rank g; with `global_index` defined, every group's
// tokens in global order (PlanCache::gathered_order holds this rank's group's permutation).
[[nodiscard]] std::shared_ptr<const PlanCache> head_parallel_plans(const HeadParallelOptions& o, const MaskSpec& mask,
                                                                   const TokenMeta& all, const at::Tensor& global_index,
                                                                   int rank, int world, const at::Device& device);

[[nodiscard]] at::Tensor head_parallel_attend(const HeadParallelOptions& o, const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const AttentionContext& ctx);

}  // namespace cpbench::kernels
