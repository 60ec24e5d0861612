#pragma once
// One case of the whole step priced (docs/planner.md, "The whole step"): per GPU, every micro-batch of
// the step through the GPU's pipeline stage, then the optimizer:
//
//   compute     attention kinds (core: the transport's compute, x b; + the forward again under full
//               recompute; projections at the GEMM rate) + linear mixers + MLP + MoE + embedding/head/loss
//   comm:cp     the transports' exposed time (each kind's step - compute)
//   comm:tp, comm:ep, comm:fsdp | comm:dp, comm:pp
//               each dimension's transfer time, exposed = max((1 - overlap) t, t - window) with the
//               dimension's overlap (constants.hpp); window: the whole compute (TP, PP, FSDP), the MoE
//               layers' compute (EP), one micro-batch's backward (DP / ZeRO 1-2's once-per-step reductions)
//   bubble      1F1B: (pp - 1) / (vp m) x (compute + exposed cp, tp and ep): the idle start and drain
//   optimizer   optimizer.hpp
//   step_s      the sum; tokens_per_s_per_gpu = global_batch x S / (GPUs x step_s)
//   model FLOPs per token: 6 N_active (embedding lookup excluded) + 3 x each attention kind's forward core
//               FLOPs per token (causal mean (S + 1) / 2 keys, the window's mean when sliding) + 3 x the
//               linear mixers' recurrence FLOPs per token; model_tflops_per_gpu = that x tokens/s/GPU;
//               mfu = model FLOP/s / the GPU's dense bf16 peak (also under --precision fp8)
#include <string>
#include <vector>

#include "harness/planner/step/attention.hpp"
#include "harness/planner/step/case_shape.hpp"

namespace cpbench::plan::step {

struct CaseInputs {
  Parallel parallel;
  Training training;
  int64_t global_batch = 0;
  std::string sharder;
  const std::vector<LayerKind>* kinds = nullptr;
  const std::vector<KindPrice>* prices = nullptr;  // the sharder's price of each kind at (tp, cp)
  double model_flops_per_token = 0;
  double memory_budget = 0;  // bytes a case may use (the GPU's memory less the reserve)
};

[[nodiscard]] StepCase price_case(const ModelShape& model, const Cluster& cluster, int64_t seq_len,
                                  const CaseInputs& in);

// 6 N_active + attention per kind + linear mixers' recurrences (above), per token.
[[nodiscard]] double model_flops_per_token(const PlanRequest& request, const std::vector<LayerKind>& kinds);

}  // namespace cpbench::plan::step
