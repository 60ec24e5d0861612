#pragma once
// The byte and memory formulas both CP strategies of every linear-recurrence mixer share, and their
// strategy names; each mixer's cost room (mamba_cp_costs.hpp, gdn_cp_costs.hpp, kda_cp_costs.hpp) supplies
// its channel counts and its chunk summary as LinearCpTerms, so the two strategies' formulas are written
// once. Plain arithmetic, no tensors. The two strategies (each mixer names them in its strategy_table):
//
//   channel parallel  one all-to-all [R, S/W, channels] -> [R, S, channels/W] before the recurrence (this
//                     rank's heads for the whole row), one back after it: bytes grow with S.
//   state passing     each rank summarises its own chunks from a zero state; one all-gather of every chunk's
//                     summary and one of the K-1 conv inputs at the end of every chunk (the conv halo); each
//                     rank composes the state arriving at each of its chunks: bytes do not grow with S.
//
// The layers count what they send and the runner checks the count against these formulas every step; the
// planner and admission call the same functions.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
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

// What one CP strategy of a linear mixer moves and keeps per layer and rank, in the mixer's own channels
// and blocks: each mixer's cost room (mamba_cp_costs.cpp, gdn_cp_costs.cpp, kda_cp_costs.cpp) fills it
// from its shape, and the two functions below are the only place the terms become bytes.
struct LinearCpTerms {
  bool state_passing = false;
  // Channel-parallel (the default strategy: one all-to-all before the recurrence, one back after it).
  int64_t channels_in = 0;   // proj channels a rank receives per token
  int64_t channels_out = 0;  // output channels it returns per token
  // State passing (an all-gather of every chunk's summary, one of the conv halo).
  int64_t summary_block = 0;         // bytes of this rank's chunk summaries (chunks_per_rank of them)
  int64_t conv_channels = 0;         // channels of the conv halo (K-1 inputs per chunk and row)
  int64_t incoming_state_block = 0;  // bytes of the states arriving at this rank's chunks (kept for the backward)
};

// The memory-bound side of a linear mixer's core the planner prices beside its FLOPs (LayerCost's
// recurrence_hbm_bytes, copy_hbm_bytes, core_bytes): its passes' forward HBM bytes for one row, the copies
// around its collectives, and the bytes of those collectives alone (without the conv halo).
struct LinearCoreTraffic {
  double hbm_bytes = 0, copy_bytes = 0;
  LinearCpBytes core_bytes;
};

// Bytes one rank sends per layer (W = 1: all zeros).
//   channel-parallel  each all-to-all sends (W-1)/W of what it exchanges; the backward runs both again:
//                     forward = backward = (W-1) * R * S/W * (channels_in + channels_out) * elem_bytes; 2 + 2 calls
//   state passing     an all-gather sends this rank's block to W-1 ranks; its backward (a reduce-scatter)
//                     returns W-1 gradient blocks of the same size, with
//                     halo = chunks_per_rank * R * (K-1) * conv_channels * elem_bytes (no call when K = 1):
//                     forward = backward = (W-1) * (summary_block + halo); 2 + 2 calls (1 + 1 when K = 1)
[[nodiscard]] LinearCpBytes linear_cp_bytes(const LinearCpShape& s, const LinearCpTerms& t);
// Extra bytes one rank holds per layer for the backward because of CP (W = 1: 0).
//   channel-parallel  the whole sequence of its channels and its output before the return:
//                     R * S * (channels_in + channels_out) * elem_bytes
//   state passing     every rank's summaries and halos and the states arriving at its own chunks:
//                     W * (summary_block + halo) + incoming_state_block
[[nodiscard]] int64_t linear_cp_extra_memory_bytes(const LinearCpShape& s, const LinearCpTerms& t);

// A mixer's terms (its cost room's *_cp_terms: mamba_cp_costs.hpp, gdn_cp_costs.hpp, kda_cp_costs.hpp), the
// one thing it supplies for the two functions above; its strategy's bytes and extra memory are always those
// functions of its terms (LinearParts, the step contexts and the planner call these two).
template <class Strategy, class Shape>
using LinearCpTermsFn = LinearCpTerms (*)(Strategy, const Shape&);
template <class Strategy, class Shape>
[[nodiscard]] LinearCpBytes linear_cp_bytes(LinearCpTermsFn<Strategy, Shape> terms, Strategy strategy, const Shape& s) {
  return linear_cp_bytes(s, terms(strategy, s));
}
template <class Strategy, class Shape>
[[nodiscard]] int64_t linear_cp_extra_memory_bytes(LinearCpTermsFn<Strategy, Shape> terms, Strategy strategy,
                                                   const Shape& s) {
  return linear_cp_extra_memory_bytes(s, terms(strategy, s));
}

// A mixer's strategies: beside its enum the mixer defines, found by argument-dependent lookup,
//
//   constexpr StrategyNames<MyCpStrategy, 2> strategy_table(MyCpStrategy) { return {{...}}; }
//
// each value with its scenario spelling, the channel-parallel default first; the three functions
// below serve every mixer from it. A linear mixer's table is linear_strategy_names'.
template <class E, size_t N>
using StrategyNames = std::array<std::pair<E, const char*>, N>;

// State passing's spelling on every linear mixer's axis (ssm_cp, gdn_cp, kda_cp).
inline constexpr const char* kStatePassing = "state_passing";

// A linear mixer's two strategies (the enum { <channel-parallel>, state_passing } that LinearParts, the step
// contexts and linear_forward read): its first value, the channel-parallel default, spelled
// `channel_parallel` ("hidden_parallel", "head_parallel"), then state passing.
template <class E>
[[nodiscard]] constexpr StrategyNames<E, 2> linear_strategy_names(const char* channel_parallel) {
  static_assert(E{} != E::state_passing, "a linear mixer's first strategy is its channel-parallel default");
  return {{{E{}, channel_parallel}, {E::state_passing, kStatePassing}}};
}
template <class E>
concept NamedCpStrategy = std::is_enum_v<E> && requires(E e) { strategy_table(e); };

// The scenario spelling of `value` ("?" for a value outside the table).
template <NamedCpStrategy E>
[[nodiscard]] const char* to_string(E value) {
  for (const auto& [v, n] : strategy_table(value))
    if (v == value) return n;
  return "?";
}
// nullopt when `name` is none of known_cp_strategies<E>().
template <NamedCpStrategy E>
[[nodiscard]] std::optional<E> parse_cp_strategy(const std::string& name) {
  for (const auto& [v, n] : strategy_table(E{}))
    if (name == n) return v;
  return std::nullopt;
}
// The scenario spellings, the default first.
template <NamedCpStrategy E>
[[nodiscard]] std::vector<std::string> known_cp_strategies() {
  std::vector<std::string> out;
  for (const auto& entry : strategy_table(E{})) out.emplace_back(entry.second);
  return out;
}

}  // namespace cpbench
