#include "harness/runner/platform.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/torch.h>

#include <fstream>

#include "kernels/comm/process_group.hpp"

namespace cpbench {

namespace {
// "major.minor" from CUDA's 1000 * major + 10 * minor encoding.
std::string cuda_version(long v) {
  if (v <= 0) return "n/a";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");  // "NVRM version: NVIDIA UNIX ... 570.86.15 ..."
  std::string line;
  if (!std::getline(in, line)) return "n/a";
  const auto k = line.find("Kernel Module");
  if (k != std::string::npos) {
    const auto start = line.find_first_of("0123456789", k);
    if (start != std::string::npos) return line.substr(start, line.find(' ', start) - start);
  }
  return line;
}
}  // namespace

std::map<std::string, std::string> platform_info(int world_size, int local_world_size) {
  std::map<std::string, std::string> p;
  const auto& hooks = at::detail::getCUDAHooks();
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  p["gpu_count"] = std::to_string(gpus);
  p["gpu_name"] = gpus > 0 ? at::cuda::getDeviceProperties(0)->name : "n/a";
  p["driver"] = gpus > 0 ? driver_version() : "n/a";
  // The build's versions, known without a GPU when LibTorch is a CUDA build (the hooks throw otherwise).
  const auto ask = [](auto f) {
    try {
      return static_cast<long>(f());
    } catch (const std::exception&) {
      return 0L;
    }
  };
  const long cudart = ask([&] { return hooks.versionCUDART(); });
  p["cuda_runtime"] = cuda_version(cudart);
  const long cudnn = ask([&] { return hooks.versionCuDNN(); });
  p["cudnn"] = cudnn > 0 ? std::to_string(cudnn / 10000) + "." + std::to_string((cudnn % 10000) / 100) + "." +
                               std::to_string(cudnn % 100)
                         : "n/a";
  p["nccl"] = comm::nccl_version();
  p["torch_build"] = std::string(TORCH_VERSION) + (cudart > 0 ? " (CUDA " + cuda_version(cudart) + " build)" : " (CPU only)");
  const int local = std::max(1, local_world_size);
  p["local_world_size"] = std::to_string(local);
  p["nodes"] = std::to_string((world_size + local - 1) / local);
  return p;
}

}  // namespace cpbench
