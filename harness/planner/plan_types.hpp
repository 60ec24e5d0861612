#pragma once
// What a plan is: the request the planner takes and the cases and recommendation it returns (plain
// structs; harness/planner/plan.hpp computes them). Units: FLOPs, bytes, seconds; all per CP rank and
// per training step (all layers) unless a name says otherwise.
#include <cstdint>
#include <string>
#include <vector>

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
};

struct PlanCase {
  std::string sharder, transport;  // transport: the registry name; hybrid: "hybrid-u<ulysses>"
  int64_t ulysses = 0;             // hybrid's Ulysses degree, 0 for the other transports
  int64_t cp = 1;
  int64_t padded_seq_len = 0, local_tokens = 0;
  std::vector<double> attention_flops_per_rank;  // forward, all layers, per step (what the runner reports)
  double imbalance = 1;                          // max / mean of attention_flops_per_rank
  double compute_imbalance = 1;  // max / mean of the time-relevant work (differs from imbalance for blocks)
  int64_t bytes_per_rank = 0;    // sent per rank per step (forward + backward, all layers)
  double compute_s = 0;          // slowest rank's attention compute per step (fwd + bwd, or fwd with Pass::forward)
  double transfer_s = 0;         // time the bytes take on the link, overlapped or not
  double exposed_comm_s = 0;     // communication not hidden behind compute
  int64_t max_segments = 0;      // most contiguous one-document segments on a rank (fragmentation)
  int64_t peak_activation_bytes = 0;
  bool fits_memory = true;
  double predicted_step_s = 0;  // attention part of a training step (fwd + bwd, all layers; fwd with Pass::forward)
  double ideal_s = 0;           // one device's time for the unsharded row (same kernel model) / W
  double efficiency = 0;        // ideal_s / predicted_step_s
  int rank = 0;                 // 1 = best at its cp
};

struct CpRecommendation {
  int64_t cp = 1;
  std::string sharder, transport, reason;
  double predicted_step_s = 0, efficiency = 0;
  std::vector<std::string> ranking;  // "sharder/transport", best first
};

struct Recommendation {
  std::string sharder, transport, reason;
  int64_t cp = 0;
  double predicted_step_s = 0, efficiency = 0;
  std::vector<CpRecommendation> per_cp;
};

struct Plan {
  PlanRequest request;               // as resolved (default sharders and transports filled in)
  int64_t real_tokens = 0;           // tokens in documents (== seq_len without documents)
  double total_attention_flops = 0;  // unsharded forward attention FLOPs per step
  std::vector<PlanCase> cases;       // for each cp, each sharder, each transport (request order)
  Recommendation recommendation;
  std::vector<std::string> notes;
};

}  // namespace cpbench::plan
