#pragma once
// Attention per layer kind and the linear mixers, priced per GPU (docs/planner.md, "The whole step"):
//
//   kinds      full_attention (the request's mask), sliding_attention (sliding_window:N on its layers),
//              mla (every attention layer of an MLA model), dsa (an MLA model with DeepSeek Sparse Attention:
//              the planner's DSA cases, its indexer and sparse core per rank and its key-side wire;
//              dsa_stages.hpp), and the model's linear mixer (GDN, KDA, SSM)
//   core       one layer of the kind, one row, at (tp, cp): make_plan (harness/planner/plan.hpp) on a
//              one-layer model of heads / tp and kv heads / tp, cp = W, the node's GPUs / tp as its node
//              (a CP group spans tp x cp ranks): every layout x transport with the transports' own bytes,
//              time and buffer formulas; MLA's two wires by price_mla_wires (mla_wire_price.hpp); a linear
//              mixer's strategies by mixer_case (its registry terms), divided by tp (TP splits its heads)
//   stack      --stack pytorch-cp: the full-attention kind at cp > 1 by pytorch_cp_layer (PyTorch's
//              context_parallel priced term by term) instead of the transports' formulas
//   layout     ONE sharder for the whole model: per sharder, each kind's best transport (or strategy, or
//              wire); a sharder that cannot run some kind is not a layout of the step
//   projections (attention kinds) 2 x params / tp FLOPs per token forward at the GEMM rate
//   params     GQA: h (hq + 2 hkv) d + hq d h; MLA: q (h q_lora + q_lora hq dqk, or h hq dqk) +
//              h (r + dr) + r hq (dn + dv) + hq dv h
//   activations per token and layer, bytes (e = 2), before / tp (sequence parallel):
//              none       GQA e (2h + 2 hq d + 2 hkv d) + 4 hq (the planner's layer_activation_bytes);
//                         MLA e (2h + hq (2 dqk + 2 dv) + r + dr + q_lora) + 4 hq
//              selective  the same less the normed input (e h): norms are recomputed
//              full       e h, the layer input (the layer's own activations come back in the recompute)
//              linear mixers: their layer_cost's activation_bytes (CP buffers included); full: e h
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "harness/planner/step/step_types.hpp"

namespace cpbench::plan::step {

struct LayerKind {
  std::string kind;  // full_attention | sliding_attention | mla | a mixer's label
  int64_t layers = 0;
  std::string mask;  // attention kinds
  int64_t window = 0;
  char mixer = 'A';  // the mixer letter
};
// The model's kinds, attention first (the request's mask for full layers; a sliding mask of the request
// applies to the sliding kind only).
[[nodiscard]] std::vector<LayerKind> layer_kinds(const PlanRequest& request);

// One kind on one layout at (tp, cp): one layer, one row (batch 1), one GPU, fwd + bwd.
struct KindPrice {
  std::string transport;    // the registry name ("hybrid" for hybrid) or the mixer's strategy
  int64_t ulysses = 0;      // hybrid's degree
  std::string label;        // as printed: ring, hybrid-u4, state_passing
  std::string wire;         // MLA: expanded | latent
  double step_s = 0;        // compute + exposed CP communication
  double compute_s = 0;     // fwd + bwd compute
  double fwd_compute_s = 0; // forward compute (what full recompute runs again)
  double bytes = 0;         // CP bytes sent (fwd + bwd)
  double fwd_flops = 0;     // forward FLOPs of the core on this GPU
  double saved_bytes = 0;   // linear mixers: what the layer keeps (CP buffers included); attention: 0
};

// A layout's price of each kind (index = layer_kinds' index); only layouts that run every kind.
using LayoutPrices = std::map<std::string, std::vector<KindPrice>>;

// Prices kinds at (tp, cp) once (make_plan is the expensive part of a search) and keeps them.
class AttentionPricer {
 public:
  // stack pytorch_cp: the full-attention kind at cp > 1 priced as PyTorch's context_parallel
  // (pytorch_cp.hpp) on load_balanced (its round-robin) with the allgather (or ring) rotate; a model with
  // any other kind, a mask other than causal, or another sharder / transport is a UsageError naming the flag.
  explicit AttentionPricer(const PlanRequest& request, Stack stack = Stack::cpbench);
  [[nodiscard]] const LayoutPrices& at(int64_t tp, int64_t cp);
  [[nodiscard]] const std::vector<LayerKind>& kinds() const { return kinds_; }

 private:
  PlanRequest request_;
  Stack stack_ = Stack::cpbench;
  std::vector<LayerKind> kinds_;
  std::map<std::pair<int64_t, int64_t>, LayoutPrices> cache_;
};

// Parameters of one attention layer's projections (whole model, not divided by tp).
[[nodiscard]] double attention_layer_params(const ModelShape& m);
// Parameters of one linear-mixer layer (its projections and conv: dense_flops / 2 per token).
[[nodiscard]] double mixer_layer_params(const ModelShape& m, char letter);
// Saved bytes per token of one attention layer (whole heads; the caller divides by tp).
[[nodiscard]] double attention_activation_per_token(const ModelShape& m, Recompute recompute);
// Forward FLOPs per token of one attention layer's core at full sequence S under `mask` (model FLOPs:
// 2 hq (dqk + dv) x the mean visible keys per query: (S + 1) / 2 causal; the window's mean when sliding;
// DSA, causal: dsa_costs' indexer per token x the share of layers with their own indexer + its sparse core
// per token).
[[nodiscard]] double attention_core_flops_per_token(const ModelShape& m, int64_t seq_len, const std::string& mask);

}  // namespace cpbench::plan::step
