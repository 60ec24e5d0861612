#pragma once
// The planner (`cpbench plan`): predicts, without running a model, what each layout x transport x W
// costs for a model's attention, a sequence (or a mix of packed documents), a mask and a cluster, and
// recommends one. Pure functions over the layout code (sharders/): per-rank work comes from the same
// Layout::compute the runner shards with and is counted with sharders/mask_area.hpp, the transports'
// mask semantics. No tensors. The cost model is described in docs/planner.md; in short, per layer:
//
//   pairs_r        visible (q, k) pairs of rank r's queries under the mask
//   fwd FLOPs_r    attention_flops(pairs_r, Hq, d, forward)   (kernels/attention/flops.hpp; x layers per step)
//   c_r            kernel "fitted" (default): the cluster's kernel model over rank r's blocks, each
//                  sliced to its active rows and keys and priced by its shape (kernel_model.hpp), with
//                  backward and merge passes of its own; "pairs": fwd FLOPs_r / F, backward 2.5x;
//                  "blocks": non-empty rank blocks x s^2 at F
//   compute        fwd + bwd (Pass::train, default) or fwd (Pass::forward)
//   bytes, time    the transport's own formulas (kernels/transports/transport.hpp): bytes_per_call and
//                  forward_bytes_per_call (W, 1, Hkv, s, d, e), then time_per_call (W, c_max, each c_r
//                  and local-block c_r, both byte counts, B, latency) -> step, exposed, transfer
//   memory         layers * s * (2 hidden e + 2 Hq d e + 2 Hkv d e + 4 Hq)
//                  + the transport's peak_activation_bytes (W, layers, Hkv, s, d, e)
//   ideal          the unsharded row as one call on one device, same kernel model and pass, / W;
//                  efficiency = ideal / step
// with B the intra-node bandwidth when W <= GPUs per node, else the inter-node bandwidth. The planner
// names no transport: it plans every registered one (known_transports()) unless told which.
//
// One concept per file (harness/planner/):
//   presets        model, cluster and kernel presets; dtype sizes
//   documents      document mixes drawn from a distribution
//   plan_types     PlanRequest, PlanCase, Recommendation, Plan
//   kernel_model   attention time of a rank's blocks (shape, size, launches, merges)
//   cost_model     per-rank work of a layout, and one case priced by its transport
//   mixer_cost     the other mixer's part of a case under each of its strategies (FLOPs, time, bytes,
//                  memory), from the mixer's own layer_cost
//   recommendation ranking at each W and the prose of why
//   layer_kinds    a layout x transport per attention layer kind (sliding / full / MLA) and why
//   mla_wire_price MLA's expanded vs latent wire (bytes against up-projection FLOPs)
//   calibration    FLOP/s and bandwidth fitted from a measured report
//   output         JSON and table
//   plan (here)    make_plan (validation, then every case), predicted_rank_flops
//   format         text helpers (internal)
//
// Units: FLOPs, bytes, seconds, bytes per second; all per CP rank and per training step (all layers)
// unless a name says otherwise. Bad input throws cpbench::UsageError with one readable line.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/planner/calibration.hpp"
#include "harness/planner/cost_model.hpp"
#include "harness/planner/documents.hpp"
#include "harness/planner/output.hpp"
#include "harness/planner/plan_types.hpp"
#include "harness/planner/presets.hpp"
#include "harness/planner/recommendation.hpp"
#include "harness/planner/mixer_cost.hpp"

namespace cpbench::plan {

// Validates the request (UsageError) and predicts every case. O(P log P) per sharder and W, plus
// O(W * P) per sharder and W for Kernel::blocks under document / sliding_window masks.
[[nodiscard]] Plan make_plan(const PlanRequest& request);

// Per-rank forward attention FLOPs of one attention call (one layer, batch 1) of `sharder` at `cp`
// over a row of seq_len tokens with documents doc_lens (empty: one document), under `mask`: exactly
// attention_flops(visible pairs, q_heads, head_dim, forward), what the transports count into AttentionStats::flops. With
// Kernel::blocks, the FLOPs a block-granular kernel computes instead. The layout is computed with the
// runner's defaults (chunk_size 0).
[[nodiscard]] std::vector<double> predicted_rank_flops(const std::string& sharder, int64_t cp, int64_t seq_len,
                                                       const std::vector<int64_t>& doc_lens, const std::string& mask,
                                                       int64_t q_heads = 1, int64_t head_dim = 1,
                                                       Kernel kernel = Kernel::pairs);

}  // namespace cpbench::plan
