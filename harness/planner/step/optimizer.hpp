#pragma once
// The optimizer step (docs/planner.md, "The whole step"): Adam over the parameters whose states this GPU
// holds, P_opt = the GPU's parameters / n under ZeRO >= 1 (dense over n = dp x cp, experts over n / ep),
// else all of them:
//   on the GPU   memory-bound: P_opt x adam_hbm_bytes_per_param / HBM bandwidth
//   offloaded    (ZeRO-Offload / DeepSpeed's CPU Adam) the host's CPU passes over what all of its GPUs
//                hold once per micro-batch (accumulating the gradients) and once for Adam:
//                gpus_per_host x P_opt x (m + 1) / host_params_per_s, plus the PCIe traffic P_opt x
//                (m x 2 B of gradients down + 2 B of weights up) at the host link. time_s is that host
//                time; step.cpp hides offload_overlap x min(host, GPU work) of it (the gradient copies run
//                under the backward)
#include "harness/planner/step/case_shape.hpp"
#include "harness/planner/step/params.hpp"

namespace cpbench::plan::step {

// Parameters whose optimizer states this GPU holds.
[[nodiscard]] double optimizer_params(const CaseShape& s, const GpuParams& p);
// GPUs that share one host's CPU (8 per HGX node; 4 per Grace-Blackwell tray).
[[nodiscard]] int64_t gpus_per_host(const CaseShape& s);
[[nodiscard]] Component optimizer_component(const CaseShape& s, const GpuParams& p);

}  // namespace cpbench::plan::step
