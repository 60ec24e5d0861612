#include "tests/gpu/gpu_cases.hpp"

#include <chrono>

namespace cpbench::gpu_cases {

comm::GroupSpec nccl_world_of_one(int device_index) {
  comm::GroupSpec s;
  s.name = "nccl-test";
  s.ranks = {0};
  s.global_rank = 0;
  s.kind = comm::BackendKind::nccl;
  s.timeout = std::chrono::seconds(60);
  s.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  return s;
}

std::string runner_scenario_yaml() {
  return R"(name: gpu-check
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 512, documents: [300, 212]}
dtype: float32
device: cuda
share_gpu: true
sweep: {sharder: [load_balanced, thd], transport: [allgather, ring], cp: [1, 2], mask: [causal, document]}
)";
}

comm::BackendKind expected_runner_backend(int64_t cp, int visible_gpus) {
  return cp <= visible_gpus ? comm::BackendKind::nccl : comm::BackendKind::gloo;
}

}  // namespace cpbench::gpu_cases
