#pragma once
// The planner (`cpbench plan`): predicts, without running a model, what each layout x transport x W
// costs for a model's attention, a sequence (or a mix of packed documents), a mask and a cluster, and
// recommends one. Pure functions over the layout code (sharders/): per-rank work comes from the same
// Layout::compute the runner shards with and is counted with sharders/mask_area.hpp, the transports'
// mask semantics. No tensors. The cost model is described in docs/planner.md; in short, per layer:
//
//   pairs_r        visible (q, k) pairs of rank r's queries under the mask
//   fwd FLOPs_r    4 * Hq * d * pairs_r                       (reported per step: x layers)
//   c_r            fwd FLOPs_r / F       (kernel "pairs"; "blocks": non-empty rank blocks x s^2)
//   compute        fwd + bwd = 3.5 * c_r                      (backward ~ 2.5x forward)
//   bytes          the transport's bytes_per_call(W, 1, Hkv, s, d, e); forward = (W-1) K/V blocks
//   ring           step = 3.5 c_max + (W-1) [max(0, a + fwd_hop/B - c_max/W)
//                                          + max(0, a + bwd_hop/B - 2.5 c_max/W)]
//   allgather      step = max_r [max(T_ag, local_r) + c_r - local_r + 2.5 c_r] + T_rs
//   ideal          3.5 * 4 Hq d * pairs(unsharded sequence) / F / W;   efficiency = ideal / step
// with B the intra-node bandwidth when W <= GPUs per node, else the inter-node bandwidth.
//
// Units: FLOPs, bytes, seconds, bytes per second; all per CP rank and per training step (all layers)
// unless a name says otherwise. Bad input throws cpbench::UsageError with one readable line.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/result.hpp"

namespace cpbench::plan {

// Attention dimensions of a model.
struct ModelShape {
  std::string name = "custom";
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
};

// One GPU type and its links. attention_flops is the achieved forward attention FLOP/s of the kernel
// (fwd + bwd take 3.5x the forward time); bandwidths are per GPU and direction.
struct Cluster {
  std::string name = "custom";
  double attention_flops = 0;  // FLOP/s
  double intra_bandwidth = 0;  // B/s, inside a node (NVLink)
  double inter_bandwidth = 0;  // B/s, between nodes
  double latency_s = 0;        // per message
  int64_t gpus_per_node = 8;
  double memory_bytes = 0;  // device memory (0 = unknown, not checked)
  std::string description;
};

[[nodiscard]] const std::vector<ModelShape>& model_presets();
[[nodiscard]] const std::vector<Cluster>& cluster_presets();
// Also accepts cpbench's own test models ("tiny", "small"). Unknown names: UsageError listing them.
[[nodiscard]] ModelShape model_preset(const std::string& name);
[[nodiscard]] Cluster cluster_preset(const std::string& name);

// How attention time follows the mask. pairs: time ~ visible pairs (FlashAttention-style kernels that
// skip masked tiles). blocks: every (local queries x one rank's keys) block with any visible pair is
// computed in full (cpbench's own CPU transports).
enum class Kernel { pairs, blocks };
[[nodiscard]] Kernel parse_kernel(const std::string& text);
[[nodiscard]] std::string to_string(Kernel kernel);

// Element size of a dtype name: bf16/bfloat16, fp16/float16 -> 2, fp32/float32 -> 4, fp64/float64 -> 8.
[[nodiscard]] int64_t dtype_size(const std::string& dtype);

// Document lengths drawn from `spec` until `seq_len` tokens are filled (the last one cut to fit):
//   lognormal:mean=M[,sigma=S][,seed=N]   (M = the distribution's mean, sigma of the log; default 1, 0)
//   uniform:min=A,max=B[,seed=N]           (integers in [A, B])
// Deterministic for a spec on every platform (own generator, not <random>'s distributions).
[[nodiscard]] std::vector<int64_t> draw_documents(const std::string& spec, int64_t seq_len);

struct PlanRequest {
  ModelShape model;
  int64_t seq_len = 0;            // tokens of the row (>= sum of doc_lens)
  std::vector<int64_t> doc_lens;  // documents packed from position 0; empty = one document
  std::string mask = "causal";    // causal | full | document | sliding_window:N
  std::string dtype = "bf16";
  Cluster cluster;
  std::vector<int64_t> cps;           // W values, each >= 1
  std::vector<std::string> sharders;  // empty = every registered layout except local_only and sdpa_wrap
  std::vector<std::string> transports = {"allgather", "ring"};
  Kernel kernel = Kernel::pairs;
};

struct PlanCase {
  std::string sharder, transport;
  int64_t cp = 1;
  int64_t padded_seq_len = 0, local_tokens = 0;
  std::vector<double> attention_flops_per_rank;  // forward, all layers, per step (what the runner reports)
  double imbalance = 1;                          // max / mean of attention_flops_per_rank
  double compute_imbalance = 1;  // max / mean of the time-relevant work (differs from imbalance for blocks)
  int64_t bytes_per_rank = 0;    // sent per rank per step (forward + backward, all layers)
  double compute_s = 0;          // slowest rank's attention fwd + bwd compute per step
  double transfer_s = 0;         // time the bytes take on the link, overlapped or not
  double exposed_comm_s = 0;     // communication not hidden behind compute
  int64_t max_segments = 0;      // most contiguous one-document segments on a rank (fragmentation)
  int64_t peak_activation_bytes = 0;
  bool fits_memory = true;
  double predicted_step_s = 0;  // attention part of a training step (fwd + bwd, all layers)
  double ideal_s = 0;           // unsharded attention work / W / F
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
  PlanRequest request;               // as resolved (default sharders filled in)
  int64_t real_tokens = 0;           // tokens in documents (== seq_len without documents)
  double total_attention_flops = 0;  // unsharded forward attention FLOPs per step
  std::vector<PlanCase> cases;       // for each cp, each sharder, each transport (request order)
  Recommendation recommendation;
  std::vector<std::string> notes;
};

// Validates the request (UsageError) and predicts every case. O(P log P) per sharder and W, plus
// O(W * P) per sharder and W for Kernel::blocks under document / sliding_window masks.
[[nodiscard]] Plan make_plan(const PlanRequest& request);
[[nodiscard]] nlohmann::json plan_to_json(const Plan& plan);
[[nodiscard]] std::string plan_to_table(const Plan& plan);

// Per-rank forward attention FLOPs of one attention call (one layer, batch 1) of `sharder` at `cp`
// over a row of seq_len tokens with documents doc_lens (empty: one document), under `mask`: exactly
// 4 * q_heads * head_dim * (visible pairs), what the transports count into AttentionStats::flops. With
// Kernel::blocks, the FLOPs a block-granular kernel computes instead. The layout is computed with the
// runner's defaults (chunk_size 0).
[[nodiscard]] std::vector<double> predicted_rank_flops(const std::string& sharder, int64_t cp, int64_t seq_len,
                                                       const std::vector<int64_t>& doc_lens, const std::string& mask,
                                                       int64_t q_heads = 1, int64_t head_dim = 1,
                                                       Kernel kernel = Kernel::pairs);

// Effective FLOP/s and bandwidth fitted from a measured report (ok results only):
//   FLOP/s   = 3.5 * sum(attention_flops) / sum(attention_s) over every rank of every result
//              (attention_s: attention maths only, fwd + bwd; comm_s: time blocked in communication)
//   bandwidth: the value for which the planner's exposed-communication model, fed with each result's
//              measured bytes and slowest-rank compute, best reproduces that rank's measured comm_s
//              (least squares over results with cp > 1).
struct Calibration {
  double attention_flops = 0;      // FLOP/s (0: could not be fitted)
  double bandwidth = 0;            // B/s (0: could not be fitted)
  double flops_spread = 0;         // coefficient of variation of the per-rank FLOP/s samples
  double bandwidth_rms_error = 0;  // relative RMS error of the fitted exposed communication
  int64_t results = 0, rank_samples = 0, comm_samples = 0;
  std::vector<std::string> notes;
};
[[nodiscard]] Calibration calibrate(const Report& report);
// `cluster` with the fitted values applied (FLOP/s; both bandwidths when fitted).
[[nodiscard]] Cluster calibrated(const Cluster& cluster, const Calibration& calibration);
[[nodiscard]] nlohmann::json calibration_to_json(const Calibration& calibration);
[[nodiscard]] std::string calibration_to_text(const Calibration& calibration);

// Peak attention-path activation bytes of one rank for one sequence row (batch 1) of `local_tokens`
// tokens at CP size `cp`, element size `element_size`: the formula behind
// PlanCase::peak_activation_bytes (docs/planner.md, item 9). Admission control (harness/runner/
// admission.hpp) reuses it, so the planner and the refusal to start a run agree.
[[nodiscard]] int64_t attention_activation_bytes(const ModelShape& model, int64_t local_tokens, int64_t cp,
                                                 int64_t element_size, const std::string& transport);

// The planner's exposed-communication estimate for one attention call, from per-call quantities:
// slowest rank's forward compute `c_fwd_max` (s), forward / backward bytes sent per rank, each rank's
// forward compute and local-block forward compute (allgather; may be empty: then c_fwd_max and
// c_fwd_max / W). Returns {step_s, exposed_s}; step_s includes the 3.5 * compute.
struct CallTime {
  double step_s = 0, exposed_s = 0, transfer_s = 0;
};
[[nodiscard]] CallTime call_time(const std::string& transport, int64_t cp, double c_fwd_max, double fwd_bytes,
                                 double bwd_bytes, double bandwidth, double latency_s,
                                 const std::vector<double>& c_fwd = {}, const std::vector<double>& c_local = {});

}  // namespace cpbench::plan
