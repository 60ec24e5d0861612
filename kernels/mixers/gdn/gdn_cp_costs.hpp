#pragma once
// The single source of truth for a Gated DeltaNet layer's CP communication and memory per rank and layer, as
// its terms of linear_costs.hpp's two strategies (gdn.hpp runs them; the `gdn_cp` axis picks one), and for
// the delta rule's FLOPs and memory passes, which KDA shares. head_parallel moves this rank's value heads and
// their key heads, replicated when the key heads do not split (PyTorch's _context_parallel/_gated_delta.py).
// state_passing's chunk summary is a pair in the accumulator dtype, the transition [Hv, dk, dk] and the state
// contribution [Hv, dk, dv], from the chunk's own delta-rule factors (flash-linear-attention PR #691, #1221,
// Megatron-LM #3282).
#include <cstdint>

#include "kernels/mixers/gdn/gdn_config.hpp"
#include "kernels/mixers/linear/linear_costs.hpp"

namespace cpbench {

enum class GdnCpStrategy { head_parallel, state_passing };
// The `gdn_cp` axis's spellings, the default first (to_string, parse_cp_strategy, known_cp_strategies).
constexpr auto strategy_table(GdnCpStrategy) { return linear_strategy_names<GdnCpStrategy>("head_parallel"); }

// One GDN layer under CP. Units: tokens, channels, bytes.
struct GdnCpShape : LinearCpShape {
  int64_t key_heads = 1;       // Hk (divides Hv: value head h reads key head h / (Hv / Hk))
  int64_t value_heads = 1;     // Hv
  int64_t key_head_dim = 1;    // dk
  int64_t value_head_dim = 1;  // dv

  [[nodiscard]] int64_t key_dim() const { return key_heads * key_head_dim; }
  [[nodiscard]] int64_t value_dim() const { return value_heads * value_head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q | k | v]
  // head_parallel: key heads one rank holds (Hk/W, or 1 replicated key head when Hk < W).
  [[nodiscard]] int64_t local_key_heads() const;
  // head_parallel: proj channels one rank receives per token: q and k of its key heads, v, b and a of
  // its value heads (z stays where it is).
  [[nodiscard]] int64_t head_parallel_channels() const;
};

// A layer of `config` on the shared sizes.
[[nodiscard]] GdnCpShape gdn_cp_shape(const GdnConfig& config, const LinearCpShape& shared);

// The strategy's terms; linear_cp_bytes / linear_cp_extra_memory_bytes of them (linear_costs.hpp) are the bytes
// one rank sends per layer and CP's extra bytes it holds for the backward:
//   head_parallel  channels_in = head_parallel_channels(), channels_out = Hv/W * dv: bytes grow with S
//   state_passing  summary_block = chunks_per_rank * R * Hv * dk * (dk + dv) * state_elem_bytes (each chunk's
//                  transition and contribution), the halo of conv_channels(), incoming_state_block =
//                  chunks_per_rank * R * Hv * dk * dv * state_elem_bytes: no S in the bytes (the chunks'
//                  factors are the single-rank form's, which the layer's memory term counts)
[[nodiscard]] LinearCpTerms gdn_cp_terms(GdnCpStrategy strategy, const GdnCpShape& s);

// THE delta rule's forward FLOPs on one rank per layer and row (the GDN and KDA registry entries'
// layer_cost returns it; the planner, admission and the case metrics read it from there). Q = `chunk`,
// s = S/W, H = Hv value heads, gdn_scan_flops with `channel_gate` (KDA) or not (GDN):
//   head_parallel  gdn_scan_flops(S, Q, dk, dv) * S * H / W   (the whole row for H/W heads)
//   state_passing  (gdn_scan_flops(s, Q, dk, dv) + delta_rule_summary_flops(dk, dv)) * s * H
//                  (each own chunk's factors, its summary [T | C] from them, its outputs from the state that
//                  arrives) + W * chunks_per_rank * 2 dk^2 dv * H (every rank composes the stream's pairs)
//   W = 1          gdn_scan_flops(s, Q, dk, dv) * s * H
[[nodiscard]] double delta_rule_cp_flops(GdnCpStrategy strategy, const GdnCpShape& s, int64_t chunk, bool channel_gate);

// THE delta rule's forward HBM traffic on one rank per layer and row: what the chunked kernels' memory-bound
// passes read and write (the planner prices them at the cluster's HBM bandwidth beside the FLOPs at its dense
// rate; docs/planner.md, "Gated DeltaNet layers"). Counted per token and value head from flash-linear-
// attention's chunked forward (fla/ops/gated_delta_rule/chunk.py, kda/chunk.py), activations in elem_bytes e:
//   intra  (k k^T, the UT solve, w and u): reads k, v; writes w, u and the Q-wide A      e (2 dk + 2 dv + Q)
//   fwd_h  (the state pass):  reads k, w, u; writes v_new and one dk x dv state per chunk  e (2 dk + 2 dv + dk dv / Q)
//   fwd_o  (the outputs):     reads q, k, v_new, that state; writes o                      e (2 dk + 2 dv + dk dv / Q)
//   -> delta_rule_pass_bytes = e (6 dk + 6 dv + Q + 2 dk dv / Q) per token and head; a per-channel gate
//      (KDA) adds its fp32 [dk] decays read by the three passes and written and read by the cumulative sum:
//      5 * 4 dk. (The per-head scalar gate and beta are ~10 bytes: not counted.)
//   state_passing adds the summary pass over the rank's tokens (FLA's chunk_cp_fwd_h: reads k, w, u, and the
//      per-channel decays; writes one [dk, dk + dv] block per rank): e (2 dk + dv) (+ 4 dk).
//   head_parallel  delta_rule_pass_bytes * S * Hv / W;   state_passing  (pass + summary) * s * Hv.
[[nodiscard]] double delta_rule_pass_bytes(const GdnCpShape& s, int64_t chunk, bool channel_gate);
[[nodiscard]] double delta_rule_cp_hbm_bytes(GdnCpStrategy strategy, const GdnCpShape& s, int64_t chunk,
                                             bool channel_gate);

// The layout copies around head_parallel's all-to-alls, forward HBM bytes per layer and row (exposed: the
// delta rule waits for them). all_to_all_single exchanges destination-major blocks, so each all-to-all needs
// one transposing copy of what it exchanges, read and written once: on the way in, [s, W x channels] ->
// [W, s, channels] before sending (the received [W, s, channels] is already the sequence in order); on the way
// out, the received [W, s, channels] -> [s, W x channels]. What one all-to-all exchanges per rank (its own part
// included) is W / (W-1) x what it sends, so copies = 2 * forward_bytes * W / (W-1). state_passing: 0 (its
// all-gather lands rank-major, the order the composition reads). `forward_bytes`: the strategy's forward
// all-to-all bytes (linear_cp_bytes of gdn_cp_terms, or of KDA's).
[[nodiscard]] double head_parallel_copy_bytes(int64_t forward_bytes, int64_t cp);

// A delta-rule layer's core traffic (LinearCoreTraffic) under `strategy`: delta_rule_cp_hbm_bytes; under
// head_parallel its copies (head_parallel_copy_bytes of `bytes`, the strategy's bytes: linear_cp_bytes of
// gdn_cp_terms or kda_cp_terms) and all of `bytes`; under state_passing no copies and the pairs' all-gather alone (the
// terms' summary block without the conv halo).
[[nodiscard]] LinearCoreTraffic delta_rule_core_traffic(GdnCpStrategy strategy, const GdnCpShape& s, int64_t chunk,
                                                        bool channel_gate, const LinearCpBytes& bytes);

}  // namespace cpbench
