#pragma once
// The attention kernel model of the planner (docs/planner.md, "The kernel model"): how long a CP rank's
// attention kernels take, block by block, given the visible structure of each block (sharders/mask_area.hpp,
// BlockAreas: pairs, active rows and keys, and the shape they make). Per block of rank r's queries
// against one rank's keys, sliced to its active rows and keys, with u = attention_flops(1, Hq, d, forward)
// FLOPs per pair (kernels/attention/flops.hpp):
//
//   forward   launch_s + u * (k * pairs + row_overhead_keys * rows) / F
//   backward  launch_s + kBackwardFactor * u * (k * pairs + row_overhead_keys * rows) / F
//   k         1 for a dense block, causal_penalty for a triangle (causal diagonal, shifted or not) or a
//             masked block: the FLOP/s of a tile-skipping causal kernel is lower than a dense one's
//   merge     forward: rows * Hq * d * merge_bytes / hbm_bandwidth (the fp32 merge of the block's
//             partial output into the running output, by log-sum-exp); backward: (rows * Hq * d *
//             dq_bytes + 2 * keys * Hkv * d * dkv_bytes) / hbm_bandwidth (the kernel's own dQ passes
//             and the fp32 accumulation of dQ, dK, dV)
//
// The row term is the size-dependent FLOP/s: a block whose rows see k keys on average runs at
// F * k / (k + row_overhead_keys / causal-or-1), below the peak F when small. `contention` is the
// compute time lost per second of link transfer that overlaps compute (copy engines and SMs share HBM
// with the kernels); the transports apply it (CallCostInputs::contention). Seconds, bytes, FLOP/s.
#include <cstdint>
#include <string>
#include <vector>

#include "sharders/mask_area.hpp"

namespace cpbench::plan {

struct KernelModel {
  double causal_penalty = 1;     // k >= 1 for triangle and masked blocks (fitted)
  double row_overhead_keys = 0;  // keys' worth of work each active query row costs per call (prior)
  double launch_s = 0;           // seconds per kernel call, forward and backward each (prior)
  double hbm_bandwidth = 0;      // B/s achieved by memory-bound passes; 0: merges cost nothing
  double merge_bytes = 0;        // bytes moved per output element per block, forward merge
  double dq_bytes = 0;           // bytes moved per dQ element per block, backward
  double dkv_bytes = 0;          // bytes moved per dK (and per dV) element per block, backward
  double contention = 0;         // s of compute lost per s of overlapped link transfer (fitted)
  std::string source;            // where the constants come from (shown in the plan's JSON)
};

// The model that prices visible pairs only (every constant neutral): time = u * pairs / F.
[[nodiscard]] KernelModel neutral_kernel_model();

// Attention dimensions the kernel model needs.
struct HeadShape {
  int64_t heads = 1, kv_heads = 1, head_dim = 1;
};

// One rank's attention time for one call (one layer), split as the transports need it (seconds).
struct RankKernelTime {
  double fwd = 0, bwd = 0;              // kernel calls of every non-empty block
  double merge_fwd = 0, merge_bwd = 0;  // memory-bound merge / accumulation passes
  double local_fwd = 0;                 // the forward kernel call of the rank's own (local) block
  int64_t calls = 0;                    // non-empty blocks
};

// Forward kernel time of one block (no merge), per the formula above; 0 for an empty block.
[[nodiscard]] double block_forward_s(const KernelModel& k, double flops, const HeadShape& h,
                                     const mask_area::BlockArea& b);
// Rank r's time over its blocks `blocks` ([W], from BlockAreas::of_rank(r)).
[[nodiscard]] RankKernelTime rank_kernel_time(const KernelModel& k, double flops, const HeadShape& h,
                                              const std::vector<mask_area::BlockArea>& blocks, int64_t r);

}  // namespace cpbench::plan
