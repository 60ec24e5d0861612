#pragma once
// What the GPU tests (tests/gpu/gpu_test.cpp) construct and expect, as plain functions a CPU unit test
// runs too (tests/unit/gpu_cases_test.cpp): a GPU test that skips on the CPU can no longer hide an
// error in its arguments or its expectations; only the device calls themselves wait for a GPU.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/attention/fused_attention.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/comm/process_group.hpp"
#include "sharders/mask.hpp"

namespace cpbench::gpu_cases {

// The process group of Gpu.NcclWorldOfOneCollectives: one NCCL rank bound to CUDA device
// `device_index` (NCCL refuses a group without its device: comm::group_spec_error).
[[nodiscard]] comm::GroupSpec nccl_world_of_one(int device_index);

// The scenario Gpu.RunnerPassesTheGradientCheckOnCuda runs through `cpbench run` (YAML text):
// W = 1 and 2 with share_gpu: true; a correctness sweep (one timed step a case, no collectives timed
// on the side), so the test fits gpu-check.sh's gpu-tests budget.
[[nodiscard]] std::string runner_scenario_yaml();

// The backend that test expects a case of `cp` ranks (one node) to report on a machine with
// `visible_gpus` GPUs: NCCL whenever every rank has its own GPU, Gloo when they share one. Written
// from the test's intent, not by calling choose_device: the CPU test holds the two against each other.
[[nodiscard]] comm::BackendKind expected_runner_backend(int64_t cp, int visible_gpus);

// Every rank's attention metadata for `layout` at W ranks over one row of S tokens (documents: their
// lengths; empty: one), through the real Sharder as the runner shards (make_global_data, shard,
// attention_meta); the last element is all ranks' metadata concatenated in rank order.
[[nodiscard]] std::vector<TokenMeta> rank_metas(const std::string& layout, int64_t W, int64_t S,
                                                const std::vector<int64_t>& documents, const MaskSpec& mask);

// The blocks of Gpu.FlashWindowAndVarlenRoutesMatchTheTiledKernel: a shifted-causal block (striped,
// W = 2), a sliding-window block whose window is longer than a chunk (contiguous, W = 2) and a
// document block (contiguous, W = 1, three documents), planned by the allgather transport's planner
// on the CPU with their flash arguments attached, and the route each takes for bf16 on CUDA with
// `head_dim`: cuda_flash_window, cuda_flash_window, cuda_flash_varlen.
struct FlashRouteBlock {
  std::string name;
  kernels::BlockPlan plan;
  kernels::KernelRoute route = kernels::KernelRoute::skipped;
  kernels::KernelRoute expected = kernels::KernelRoute::skipped;
  int64_t batch = 0, sq = 0, sk = 0;
};
[[nodiscard]] std::vector<FlashRouteBlock> flash_route_blocks(int64_t head_dim);
// The plan with every tensor the kernels read (trimming, masks, cells, band masks, varlen segments)
// on `device`.
[[nodiscard]] kernels::BlockPlan plan_on(const kernels::BlockPlan& plan, const at::Device& device);

// The kernel routes the forward blocks of case `c` of scenario `s` take on `device` (CPU, or CUDA
// predicted without one), per CP rank and for one attention call (a layer's forward): one count per
// block as AttentionStats::kernel_blocks counts them in a run (empty blocks as "skipped"; names from
// kernels::to_string). Planned as a step plans them (train_step.cpp: the real sharder's metadata, the
// transport's make_plans with the layout's global order, the flash arguments a CUDA PlanCache
// attaches), all on the CPU. A CPU run's report must show these counts times the attention layers
// (tests/multirank/measurement_run_test.cpp); the CUDA prediction is what scripts/gpu-check.sh's
// scenarios are chosen by (tests/unit/gpu_cases_test.cpp).
using RouteCounts = std::map<std::string, int64_t>;
[[nodiscard]] std::vector<RouteCounts> case_routes(const ScenarioSpec& s, const CaseSpec& c, const at::Device& device);
// The counts of every rank of case_routes summed.
[[nodiscard]] RouteCounts total_routes(const std::vector<RouteCounts>& per_rank);

}  // namespace cpbench::gpu_cases
