#pragma once
// What a report records about the machine and the job beyond the version stamp: GPU name and count,
// driver, CUDA runtime, NCCL and cuDNN versions, the torch build, and the job's shape (nodes, ranks per
// node). Keys are stable (the JSON report's environment.platform object); a value that cannot be
// known here is "n/a".
#include <map>
#include <string>

namespace cpbench {

// gpu_count, gpu_name, driver, cuda_runtime, cudnn, nccl, torch_build, nodes, local_world_size.
[[nodiscard]] std::map<std::string, std::string> platform_info(int world_size, int local_world_size);

}  // namespace cpbench
