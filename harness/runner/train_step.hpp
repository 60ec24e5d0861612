#pragma once
// One CP training step, the thing cpbench times: shard -> forward through the case's attention ->
// loss over the global valid-token count -> backward -> parameter-gradient all-reduce over CP. Nothing
// else: what the reference check needs (logit and gradient gathers, the summed loss, copies) is taken
// by gather_outputs() after the step, on the checked steps only.
#include <map>
#include <memory>
#include <optional>

#include "harness/model/model.hpp"
#include "harness/runner/case_context.hpp"
#include "harness/runner/reference_run.hpp"
#include "reports/result.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

// Seconds of one step on this rank, by phase; `total` spans them all. The phases nest in `total` and
// together cover it (up to the clock reads between them).
struct StepTimes {
  double shard = 0, forward = 0, backward = 0, total = 0;
  double mixer_s = 0;  // the non-attention mixers' sections (recurrence + collectives), forward + backward
  // Bytes each non-attention mixer's collectives sent from this rank, by mixer letter (checked every
  // step against the mixer's formula).
  std::map<char, int64_t> mixer_bytes;
  AttentionStats attn;    // the transport's seconds, bytes, FLOPs of the step
};

// What a step leaves for gather_outputs (kept only when asked: the timed steps drop it).
struct StepState {
  std::optional<Sharder> sharder;
  ModelOutput out;
  at::Tensor loss;  // this rank's partial loss (its tokens' loss sum / the global count)
  at::Tensor aux;   // the part of `loss` the mixers added (DSA's indexer loss; MixerStepContext::aux_loss), or undefined
  at::Tensor picks; // the keys the mixers picked per local token (MixerStepContext::key_picks), or undefined
  // This rank's parameter gradients before the CP all-reduce, flat in CaseContext::params order, in the
  // parameters' dtype (each rounded once by this rank's backward): the precision rule's allowance for
  // 16-bit parameters (Outputs::grad_rounding).
  at::Tensor partial_grads;
};

// DSA's picks [.., n] (each layer's `per_layer` picks side by side) with every layer's picks sorted: the
// layer's SET of keys, whatever order its top-k returned them in.
[[nodiscard]] at::Tensor sorted_picks(const at::Tensor& picks, int64_t per_layer);

// One step. `stats` is reset and filled (it must outlive the step's backward). With `trace`, records
// the step's phases and the transport's spans relative to the moment this rank left the step's
// opening barrier (the common start of the CP group). With `keep`, leaves what gather_outputs needs.
StepTimes run_step(CaseContext& x, AttentionStats& stats, RankTimeline* trace = nullptr, StepState* keep = nullptr);

// After a kept step: the CP step's outputs in the caller's coordinates on every CP rank (all-gathers,
// the sharder's gather verb, the summed loss, the all-reduced gradients). NVTX range "gather".
[[nodiscard]] Outputs gather_outputs(CaseContext& x, const StepState& kept);

}  // namespace cpbench
