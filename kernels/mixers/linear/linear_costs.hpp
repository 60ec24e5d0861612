#pragma once
// The byte formulas both CP strategies of a linear-recurrence mixer share; each mixer's cost room
// (mamba_cp_costs.hpp, gdn_cp_costs.hpp) supplies its channel counts and its chunk summary and calls
// these, so the two strategies' shapes are written once. Plain arithmetic, no tensors.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cpbench {

// The sizes both CP strategies' formulas of every linear mixer share (each mixer's shape adds its heads).
// Units: tokens, bytes.
struct LinearCpShape {
  int64_t batch = 1;             // R: rows the recurrence runs over (the batch size; 1 for a packed thd stream)
  int64_t seq_len = 0;           // S: tokens per row of the padded global stream (a multiple of cp)
  int64_t cp = 1;                // W
  int64_t conv = 1;              // K, conv1d width (K-1 earlier inputs per token)
  int64_t elem_bytes = 8;        // the activations' dtype (proj, the conv inputs, the output)
  int64_t state_elem_bytes = 8;  // the recurrence's compute dtype (4 for bfloat16 / float16 activations)
  // state_passing: the most maximal runs of consecutive stream positions one rank owns per row
  // (max_runs_per_rank, scan_plan.hpp: 1 contiguous, 2 load_balanced / sdpa_wrap, <= 2 x documents for thd).
  int64_t chunks_per_rank = 1;
};
// The shared part from a run's or a plan's sizes; states are float32 for 16-bit activations.
[[nodiscard]] LinearCpShape linear_cp_shape(int64_t rows, int64_t seq_len, int64_t cp, int64_t conv,
                                            int64_t elem_bytes, int64_t chunks_per_rank = 1);

// Bytes one rank sends to the other ranks per layer. `calls_*`: collectives issued per layer.
struct LinearCpBytes {
  int64_t forward = 0;
  int64_t backward = 0;
  int64_t calls_forward = 0;
  int64_t calls_backward = 0;
  [[nodiscard]] int64_t total() const { return forward + backward; }
};

// Channel-parallel: each all-to-all sends (W-1)/W of what it exchanges; the backward runs both again:
//   forward = backward = (W-1) * R * S/W * (channels_in + channels_out) * elem_bytes; 2 + 2 calls
// (channels_in: proj channels a rank receives per token; channels_out: its output channels). W = 1: 0.
[[nodiscard]] LinearCpBytes channel_parallel_bytes(int64_t rows, int64_t seq_len, int64_t cp, int64_t channels_in,
                                                   int64_t channels_out, int64_t elem_bytes);
// What channel-parallel keeps per rank for the backward because of CP: the whole sequence of its
// channels and its output before the return, R * S * (channels_in + channels_out) * elem_bytes.
[[nodiscard]] int64_t channel_parallel_memory(int64_t rows, int64_t seq_len, int64_t channels_in,
                                              int64_t channels_out, int64_t elem_bytes);

// State passing: an all-gather sends this rank's block to W-1 ranks; its backward (a reduce-scatter)
// returns W-1 gradient blocks of the same size:
//   forward = backward = (W-1) * (summary_block + halo_block); 2 + 2 calls (1 + 1 without a halo). W = 1: 0.
[[nodiscard]] LinearCpBytes state_passing_exchange_bytes(int64_t cp, int64_t summary_block, int64_t halo_block);
// The conv halo one rank contributes: chunks * R * (K-1) * conv_channels * elem_bytes (0 when K = 1).
[[nodiscard]] int64_t halo_block_bytes(int64_t chunks_per_rank, int64_t rows, int64_t conv, int64_t conv_channels,
                                       int64_t elem_bytes);

// A mixer's strategy names: the enum's values with their scenario spellings, first the default.
template <class E, size_t N>
using StrategyNames = std::array<std::pair<E, const char*>, N>;

template <class E, size_t N>
[[nodiscard]] const char* strategy_name(const StrategyNames<E, N>& names, E value) {
  for (const auto& [v, n] : names)
    if (v == value) return n;
  return "?";
}
template <class E, size_t N>
[[nodiscard]] std::optional<E> parse_strategy(const StrategyNames<E, N>& names, const std::string& name) {
  for (const auto& [v, n] : names)
    if (name == n) return v;
  return std::nullopt;
}
template <class E, size_t N>
[[nodiscard]] std::vector<std::string> strategy_names(const StrategyNames<E, N>& names) {
  std::vector<std::string> out;
  for (const auto& entry : names) out.emplace_back(entry.second);
  return out;
}

}  // namespace cpbench
