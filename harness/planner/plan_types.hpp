#pragma once
// What a plan is: the request the planner takes and the cases and recommendation it returns (plain
// structs; harness/planner/plan.hpp computes them). Units: FLOPs, bytes, seconds; all per CP rank and
// per training step (all layers) unless a name says otherwise.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/planner/dsa_stages.hpp"
#include "harness/planner/presets.hpp"

namespace cpbench::plan {

struct PlanRequest {
  ModelShape model;
  int64_t seq_len = 0;            // tokens of the row (>= sum of doc_lens)
  std::vector<int64_t> doc_lens;  // documents packed from position 0; empty = one document
  std::string mask = "causal";    // causal | full | document | sliding_window:N
  std::string dtype = "bf16";
  Cluster cluster;
  std::vector<int64_t> cps;             // W values, each >= 1
  std::vector<std::string> sharders;    // empty = every registered layout except local_only and sdpa_wrap
  std::vector<std::string> transports;  // empty = every registered transport but the negative controls
                                        // (planned_transports()); hybrid is planned for every Ulysses
                                        // degree 1 < U < W that divides W
  Kernel kernel = Kernel::fitted;
  Pass pass = Pass::train;  // what predicted_step_s, ideal_s and efficiency cover
  // The strategies to plan per mixer strategy axis ("ssm_cp" -> {"state_passing"}; absent or empty =
  // every one of the mixer's).
  std::map<std::string, std::vector<std::string>> mixer_strategies;
  // Resolved by make_plan: the strategies planned for the model's non-attention mixer (empty without
  // one): the case's linear-mixer slot (PlanCase::ssm) holds any kind.
  std::vector<std::string> ssm_strategies;
};

// The non-attention mixer's part of a case (the `ssm` slot, for history): all its layers, per rank and
// step (zero for a model without them). Bytes and memory are the strategy's own formulas
// (Mixer::layer_cost, kernels/mixers/; harness/planner/mixer_cost.hpp).
struct SsmCase {
  std::string mixer = "SSM";     // which layers: the mixer's label (Mixer::label)
  std::string strategy;          // hidden_parallel | state_passing; "" when the model has no SSM layer
  double flops_per_rank = 0;     // forward FLOPs: the chunked scan (ssm_scan_flops) + in/out projections + conv
  int64_t bytes_per_rank = 0;    // sent per rank per step (forward + backward, or forward with Pass::forward)
  double compute_s = 0;          // the core (core_compute_s) + projections and conv at its attention_flops
  // (the core: the delta rule at the dense rate + its HBM passes; a scan without HBM terms at ssm_flops)
  double comm_s = 0;             // the strategy's collectives and their copies (they block the layer: all exposed)
  double step_s = 0;             // compute_s + comm_s
  int64_t activation_bytes = 0;  // what the strategy keeps per rank (all SSM layers)
  // The core alone (the scan / delta rule and its own collectives and their copies; no projections, conv or
  // conv halo): what flash-linear-attention #691 timed. core_step_s = core_compute_s + core_comm_s.
  double core_compute_s = 0, core_comm_s = 0, core_step_s = 0;
  bool hbm_modelled = false;  // the core priced by its FLOPs at the dense rate + its HBM passes (else ssm_flops)
};

struct PlanCase {
  std::string sharder, transport;  // transport: the registry name; hybrid: "hybrid-u<ulysses>"; "none"
                                   // for a model without attention layers
  int64_t ulysses = 0;             // hybrid's Ulysses degree, 0 for the other transports
  int64_t cp = 1;
  int64_t padded_seq_len = 0, local_tokens = 0;
  std::vector<double> attention_flops_per_rank;  // forward, all layers, per step (what the runner reports)
  double imbalance = 1;                          // max / mean of attention_flops_per_rank
  double compute_imbalance = 1;  // max / mean of the time-relevant work (differs from imbalance for blocks)
  int64_t bytes_per_rank = 0;    // attention: sent per rank per step (forward + backward, all attention layers)
  double compute_s = 0;          // slowest rank's compute per step (attention + SSM; fwd + bwd, or fwd with Pass::forward)
  double transfer_s = 0;         // time the attention bytes take on the link, overlapped or not
  double exposed_comm_s = 0;     // communication not hidden behind compute (attention + SSM)
  double attention_step_s = 0;   // the attention layers' part of predicted_step_s
  int64_t max_segments = 0;      // most contiguous one-document segments on a rank (fragmentation)
  int64_t peak_activation_bytes = 0;
  bool fits_memory = true;
  double predicted_step_s = 0;  // the mixers' part of a training step: attention + SSM layers (fwd + bwd; fwd
                                // with Pass::forward)
  double ideal_s = 0;           // one device's time for the unsharded row (same kernel model) / W
  double efficiency = 0;        // ideal_s / predicted_step_s
  int rank = 0;                 // 1 = best at its cp
  SsmCase ssm;                  // the SSM layers' part (strategy "" without SSM layers)
  DsaCase dsa;                  // a DSA model's two stages and wire (dsa_stages.hpp); enabled false otherwise
};

struct CpRecommendation {
  int64_t cp = 1;
  std::string sharder, transport, ssm_strategy, reason;  // ssm_strategy "" without SSM layers
  double predicted_step_s = 0, efficiency = 0;
  std::vector<std::string> ranking;  // "sharder/transport" (+ "/ssm_strategy" with SSM layers), best first
};

struct Recommendation {
  std::string sharder, transport, ssm_strategy, reason;
  int64_t cp = 0;
  double predicted_step_s = 0, efficiency = 0;
  std::vector<CpRecommendation> per_cp;
};

// The best layout x transport for one kind of attention layer at one W (harness/planner/layer_kinds.hpp).
struct KindChoice {
  std::string kind;   // sliding_attention | full_attention | mla
  int64_t layers = 0;  // attention layers of this kind
  std::string mask;   // the mask they run
  int64_t cp = 1;
  std::string sharder, transport, wire;  // wire: MLA's expanded | latent ("" for the other kinds)
  double step_s = 0;                     // these layers' part of a step (fwd + bwd, or fwd with Pass::forward)
  int64_t bytes_per_rank = 0;            // they send per rank per step
  std::string why;                       // one line: what decided it
};

struct Plan {
  PlanRequest request;               // as resolved (default sharders and transports filled in)
  int64_t real_tokens = 0;           // tokens in documents (== seq_len without documents)
  double total_attention_flops = 0;  // unsharded forward attention FLOPs per step
  std::vector<PlanCase> cases;       // for each cp, each sharder, each transport (request order)
  Recommendation recommendation;
  std::vector<std::string> notes;
  std::vector<KindChoice> per_kind;  // per attention layer kind (empty: the layers are all plain full attention)
};

}  // namespace cpbench::plan
