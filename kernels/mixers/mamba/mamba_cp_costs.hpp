#pragma once
// The single source of truth for what a Mamba layer's context parallelism costs in communication and
// memory, per rank and per layer, under each SSM CP strategy (mamba.hpp runs them):
//
//   hidden_parallel  one all-to-all [R, S/W, channels] -> [R, S, channels/W] before the scan, one back
//                    after it (the seed's `mamba` module, Megatron's MambaContextParallel): bytes grow
//                    with S.
//   state_passing    each rank scans its own tokens from a zero state; one all-gather of every chunk's
//                    summary (final state [H, P, N] and cumulative decay [H]) and one all-gather of
//                    the K-1 conv inputs at the end of every chunk (the conv halo); each rank then
//                    corrects its outputs with the state arriving at each of its chunks (Megatron-LM
//                    PR #6808, fms-hf-tuning PR #642): bytes do not grow with S.
//
// The layers count what they send and the runner checks the count against these formulas every step;
// the planner and admission call the same functions. Plain arithmetic on a typed shape, no tensors.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/mixers/linear/linear_costs.hpp"
#include "kernels/mixers/linear/scan_plan.hpp"  // contiguous_runs, max_runs_per_rank
#include "kernels/mixers/mamba/mamba_config.hpp"

namespace cpbench {

enum class SsmCpStrategy { hidden_parallel, state_passing };

// "hidden_parallel" | "state_passing".
[[nodiscard]] const char* to_string(SsmCpStrategy strategy);
// nullopt when `name` is none of known_ssm_cp_strategies().
[[nodiscard]] std::optional<SsmCpStrategy> parse_ssm_cp_strategy(const std::string& name);
[[nodiscard]] std::vector<std::string> known_ssm_cp_strategies();

// One Mamba layer under CP. Units: tokens, channels, bytes.
struct SsmCpShape : LinearCpShape {
  int64_t heads = 1;     // H, SSM heads
  int64_t head_dim = 1;  // P
  int64_t state = 1;     // N, state size per head
  int64_t groups = 1;    // G, B/C groups (divides H)

  [[nodiscard]] int64_t d_inner() const { return heads * head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return d_inner() + 2 * groups * state; }  // [x | B | C]
  // hidden_parallel: channels of proj one rank receives per token: its heads' x and dt, and its groups'
  // B and C (G >= W: G/W groups; G < W: one group, replicated on W/G ranks).
  [[nodiscard]] int64_t hidden_parallel_channels() const;
};

// A layer of `config` on the shared sizes.
[[nodiscard]] SsmCpShape ssm_cp_shape(const SsmConfig& config, const LinearCpShape& shared);

using SsmCpBytes = LinearCpBytes;

// hidden_parallel: each all-to-all sends (W-1)/W of what it exchanges; the backward runs both again
// in reverse:
//   forward = backward = (W-1) * R * S/W * (hidden_parallel_channels() + H/W * P) * elem_bytes
// (the first all-to-all carries [R, S/W, W * channels], the second [R, S, H/W * P]); 2 + 2 calls.
[[nodiscard]] SsmCpBytes hidden_parallel_bytes(const SsmCpShape& s);

// state_passing: an all-gather sends this rank's block to W-1 ranks; its backward (a reduce-scatter)
// returns W-1 gradient blocks of the same size:
//   summaries = chunks_per_rank * R * H * (P*N + 1) * state_elem_bytes   (final state + decay per chunk)
//   halo      = chunks_per_rank * R * (K-1) * conv_channels * elem_bytes  (0 and no call when K = 1)
//   forward = backward = (W-1) * (summaries + halo); 2 + 2 calls (1 + 1 when K = 1). No S in it.
[[nodiscard]] SsmCpBytes state_passing_bytes(const SsmCpShape& s);

// The strategy's formula; W = 1 sends nothing (all zeros).
[[nodiscard]] SsmCpBytes ssm_cp_bytes(SsmCpStrategy strategy, const SsmCpShape& s);

// Extra bytes one rank holds per layer for the backward because of CP (the scan's own intermediates
// are the same in both: S x H/W token-heads either way):
//   hidden_parallel  the full sequence for this rank's channels and its scan output before the return:
//                    R * S * (hidden_parallel_channels() + H/W * P) * elem_bytes
//   state_passing    every rank's summaries and halos (W x the blocks above) plus the incoming state of
//                    each own chunk: W * (summaries + halo) + chunks_per_rank * R * H * P * N * state_elem_bytes
[[nodiscard]] int64_t ssm_cp_extra_memory_bytes(SsmCpStrategy strategy, const SsmCpShape& s);

}  // namespace cpbench
