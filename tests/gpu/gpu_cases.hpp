#pragma once
// What the GPU tests (tests/gpu/gpu_test.cpp) construct and expect, as plain functions a CPU unit test
// runs too (tests/unit/gpu_cases_test.cpp): a GPU test that skips on the CPU can no longer hide an
// error in its arguments or its expectations; only the device calls themselves wait for a GPU.
#include <cstdint>
#include <string>

#include "kernels/comm/process_group.hpp"

namespace cpbench::gpu_cases {

// The process group of Gpu.NcclWorldOfOneCollectives: one NCCL rank bound to CUDA device
// `device_index` (NCCL refuses a group without its device: comm::group_spec_error).
[[nodiscard]] comm::GroupSpec nccl_world_of_one(int device_index);

// The scenario Gpu.RunnerPassesTheGradientCheckOnCuda runs through `cpbench run` (YAML text):
// W = 1 and 2 with share_gpu: true.
[[nodiscard]] std::string runner_scenario_yaml();

// The backend that test expects a case of `cp` ranks (one node) to report on a machine with
// `visible_gpus` GPUs: NCCL whenever every rank has its own GPU, Gloo when they share one. Written
// from the test's intent, not by calling choose_device: the CPU test holds the two against each other.
[[nodiscard]] comm::BackendKind expected_runner_backend(int64_t cp, int visible_gpus);

}  // namespace cpbench::gpu_cases
