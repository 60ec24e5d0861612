#pragma once
// What a Mamba layer's context parallelism costs in communication and memory, per rank and layer, as its
// terms of linear_costs.hpp's two strategies (mamba.hpp runs them; the `ssm_cp` axis picks one).
// hidden_parallel is the seed's `mamba` module and Megatron's MambaContextParallel. state_passing's chunk
// summary is the final state [H, P, N] and the cumulative decay [H]; each rank then corrects its outputs with
// the state arriving at each of its chunks (Megatron-LM PR #6808, fms-hf-tuning PR #642).
#include <cstdint>

#include "kernels/mixers/linear/linear_costs.hpp"
#include "kernels/mixers/mamba/mamba_config.hpp"

namespace cpbench {

enum class SsmCpStrategy { hidden_parallel, state_passing };
// The `ssm_cp` axis's spellings, the default first (to_string, parse_cp_strategy, known_cp_strategies).
constexpr auto strategy_table(SsmCpStrategy) { return linear_strategy_names<SsmCpStrategy>("hidden_parallel"); }

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

// The strategy's terms; linear_cp_bytes / linear_cp_extra_memory_bytes of them (linear_costs.hpp) are the bytes
// one rank sends per layer and CP's extra bytes it holds for the backward:
//   hidden_parallel  channels_in = hidden_parallel_channels(), channels_out = H/W * P (the first all-to-all
//                    carries [R, S/W, W * channels], the second [R, S, H/W * P]): bytes grow with S
//   state_passing    summary_block = chunks_per_rank * R * H * (P*N + 1) * state_elem_bytes (final state + decay
//                    per chunk), the halo of conv_channels(), incoming_state_block = chunks_per_rank * R * H * P * N
//                    * state_elem_bytes: no S in the bytes
// (the scan's own intermediates are the same in both: S x H/W token-heads either way).
[[nodiscard]] LinearCpTerms ssm_cp_terms(SsmCpStrategy strategy, const SsmCpShape& s);

}  // namespace cpbench
