#include "harness/runner/device_memory.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <cstdio>
#include <sstream>

#include "sharders/core/check.hpp"

namespace cpbench {

std::vector<GpuMemory> query_gpu_memory() {
  std::vector<GpuMemory> out;
  if (!torch::cuda::is_available()) return out;
  for (c10::DeviceIndex i = 0; i < c10::cuda::device_count(); ++i) {
    const c10::cuda::CUDAGuard guard(i);
    size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    cudaDeviceProp prop{};
    C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    out.push_back({prop.name, static_cast<double>(free), static_cast<double>(total)});
  }
  return out;
}

std::string format_gpu_memory(const std::vector<GpuMemory>& gpus) {
  std::ostringstream os;
  os.precision(17);
  for (const auto& g : gpus) os << g.free_bytes << " " << g.total_bytes << " " << g.name << "\n";
  return os.str();
}

std::vector<GpuMemory> parse_gpu_memory(const std::string& text) {
  std::vector<GpuMemory> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    GpuMemory g;
    CP_CHECK(static_cast<bool>(ls >> g.free_bytes >> g.total_bytes) && g.free_bytes >= 0 && g.total_bytes > 0,
             "device memory: cannot read the line \"", line, "\" (expected: FREE_BYTES TOTAL_BYTES NAME)");
    std::getline(ls >> std::ws, g.name);
    out.push_back(g);
  }
  return out;
}

std::vector<GpuMemory> gpu_memory_from_child(const std::string& executable) {
  // A child process: its CUDA contexts end with it, before any rank starts.
  const std::string cmd = "'" + executable + "' _device_memory";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  CP_CHECK(pipe != nullptr, "device memory: cannot run ", cmd);
  std::string text;
  char buf[512];
  while (const size_t n = std::fread(buf, 1, sizeof buf, pipe)) text.append(buf, n);
  const int status = ::pclose(pipe);
  CP_CHECK(status == 0, "device memory: ", cmd, " failed (status ", status, "): ", text);
  return parse_gpu_memory(text);
}

}  // namespace cpbench
