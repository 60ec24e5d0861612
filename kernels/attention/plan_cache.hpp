#pragma once
// The block plans of a step from token metadata (internal to kernels/): the tile classification that
// plans a (query block, key block) pair without building its whole mask, and the PlanCache every
// attend() call of a step reads. The visibility rule is sharders/mask.hpp's (visibility(), on the
// tiles' bounds); the plans are block_plan.hpp's.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "kernels/attention/block_plan.hpp"
#include "sharders/mask.hpp"

namespace cpbench::kernels {

// The plan of queries `q` against keys `k` under `mask`: the same cells, visible pairs and
// effective mask as plan_block(build_mask(mask, q, k)) up to rows / cols trimming (none here), but
// without building the whole [B, Sq, Sk] mask. Each kBlockTile cell is classified from per-tile
// bounds of the metadata (position, segment and document ranges, key validity), which decide full
// and empty cells exactly; only the cells they leave open get their masks built. So planning costs
// O(Sq + Sk + cells + masked cells' area), not O(Sq x Sk). Two device -> host copies.
[[nodiscard]] BlockPlan plan_block(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k);

// The plans of one step: this rank's queries against each rank's key block, built once from CPU-side
// token metadata (the transports' make_plan_cache, kernels/transports/transport.hpp) and read by every attend() call of
// the step.
class PlanCache {
 public:
  PlanCache(const MaskSpec& mask, const TokenMeta& local, const TokenMeta& all, int rank, int world,
            const at::Device& device);
  // Queries of this rank against the key block of rank `src` (columns [src*S, (src+1)*S) of all).
  [[nodiscard]] const BlockPlan& plan(int src) const;
  [[nodiscard]] const MaskSpec& mask() const { return mask_; }
  [[nodiscard]] int world() const { return static_cast<int>(plans_.size()); }
  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int64_t batch() const { return batch_; }
  [[nodiscard]] int64_t tokens() const { return tokens_; }
  // Block plans built from metadata in this process so far (the plan-reuse tests read it).
  [[nodiscard]] static int64_t plans_built();
  // PlanCaches constructed in this process so far: one per step (the runner's make_plans).
  [[nodiscard]] static int64_t caches_built();

  // Head-parallel plans (kernels/transports/head_parallel.hpp) are made for the tokens a rank's
  // all-to-all gathers, put in an order other than their arrival: `order` int64 [N], the arrival
  // index of each planned token (a permutation of [0, N)); stored with its inverse on `device`, so
  // the transport reorders on the device without planning or copying anything in a step.
  void set_gathered_order(const at::Tensor& order, const at::Device& device);
  // Undefined: the plans take the tokens in arrival order.
  [[nodiscard]] const at::Tensor& gathered_order() const { return order_; }
  [[nodiscard]] const at::Tensor& gathered_inverse() const { return inverse_; }

 private:
  at::Tensor order_, inverse_;
  MaskSpec mask_;
  int rank_ = 0;
  int64_t batch_ = 0, tokens_ = 0;
  std::vector<BlockPlan> plans_;
};

// True when the rule makes the block of `meta` against itself exactly the lower triangle: a causal
// mask (document: one document per row), every token valid, one segment per row, positions strictly
// increasing along each row. Host tensors.
[[nodiscard]] bool diagonal_is_causal(const MaskSpec& mask, const TokenMeta& meta);

}  // namespace cpbench::kernels
