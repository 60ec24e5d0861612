#include "harness/runner/device_peaks.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "harness/runner/measurement.hpp"

namespace cpbench {

const std::vector<DevicePeak>& device_peak_table() {
  // Dense figures (the datasheets print the tensor-core ones with 2:4 sparsity, twice these): NVIDIA's
  // A100 datasheet (SXM 80 GB); the H100 datasheet's SXM, PCIe and NVL columns (nvidia.com/en-us/
  // data-center/h100, "Technical Specifications": e.g. PCIe BF16 1,513 sparse -> 756, NVL 1,671 ->
  // 835); the H200 page's SXM and NVL columns (nvidia.com/en-us/data-center/h200: NVL BF16 1,671 ->
  // 835, FP32 60, TF32 835 -> 417); GH200 = the H100 SXM's compute with its own HBM; the HGX B200
  // spec's per-GPU figures. NVLink per direction is half the printed bidirectional figure (PCIe and
  // NVL parts: their NVLink bridge, 600 GB/s on H100, 900 GB/s on H200 NVL).
  // Order matters: the first entry whose `match` and memory range fit wins ("GH200" before "H200",
  // "H200 NVL" before "H200", the H100 variants before the bare "H100").
  static const std::vector<DevicePeak> table = {
      //  name        match       GiB range  bf16     fp16     fp32     fp64     tf32      HBM B/s  NVLink B/s
      {"A100", "A100", 0, 0, 312e12, 312e12, 19.5e12, 19.5e12, 156e12, 2.039e12, 300e9},
      {"H100 PCIe", "H100 PCIe", 0, 0, 756e12, 756e12, 51e12, 51e12, 378e12, 2.0e12, 300e9},
      {"H100 NVL", "H100 NVL", 0, 0, 835e12, 835e12, 60e12, 60e12, 417.5e12, 3.9e12, 300e9},
      // A bare "NVIDIA H100" with the NVL's 94 GB (the SXM and PCIe parts have 80 GB).
      {"H100 NVL", "H100", 90, 100, 835e12, 835e12, 60e12, 60e12, 417.5e12, 3.9e12, 300e9},
      {"GH200 144GB", "GH200", 120, 0, 989.4e12, 989.4e12, 66.9e12, 66.9e12, 494.7e12, 4.9e12, 450e9},
      {"GH200", "GH200", 0, 0, 989.4e12, 989.4e12, 66.9e12, 66.9e12, 494.7e12, 4.0e12, 450e9},
      {"H100 SXM", "H100", 0, 0, 989.4e12, 989.4e12, 66.9e12, 66.9e12, 494.7e12, 3.35e12, 450e9},
      {"H200 NVL", "H200 NVL", 0, 0, 835e12, 835e12, 60e12, 60e12, 417.5e12, 4.8e12, 450e9},
      {"H200 SXM", "H200", 0, 0, 989.4e12, 989.4e12, 66.9e12, 66.9e12, 494.7e12, 4.8e12, 450e9},
      {"B200", "B200", 0, 0, 2.25e15, 2.25e15, 75e12, 37e12, 1.1e15, 8e12, 900e9},
  };
  return table;
}

std::optional<DevicePeak> find_device_peak(const std::string& device_name, double memory_bytes) {
  const double gib = memory_bytes / (1024.0 * 1024.0 * 1024.0);
  for (const auto& d : device_peak_table()) {
    if (device_name.find(d.match) == std::string::npos) continue;
    // An unknown memory size fits no bounded entry: the name alone decides then.
    if ((d.min_memory_gib > 0 || d.max_memory_gib > 0) && memory_bytes <= 0) continue;
    if (d.min_memory_gib > 0 && gib < d.min_memory_gib) continue;
    if (d.max_memory_gib > 0 && gib >= d.max_memory_gib) continue;
    return d;
  }
  return std::nullopt;
}

double peak_flops(const DevicePeak& d, at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return d.bf16;
    case at::kHalf:
      return d.fp16;
    case at::kFloat:
      return d.fp32;
    default:
      return d.fp64;
  }
}

double route_peak_flops(const DevicePeak& d, kernels::KernelRoute route, at::ScalarType dtype) {
  using kernels::KernelRoute;
  const bool low = dtype == at::kBFloat16 || dtype == at::kHalf;
  switch (route) {
    case KernelRoute::cuda_flash:
    case KernelRoute::cuda_flash_window:
    case KernelRoute::cuda_flash_varlen:
      return peak_flops(d, low ? dtype : at::kBFloat16);  // flash reads 16-bit inputs only
    case KernelRoute::cuda_efficient:
      if (low) return peak_flops(d, dtype);
      return dtype == at::kFloat ? d.tf32 : peak_flops(d, dtype);
    default:
      // The tiled kernel computes in float32 (16-bit inputs) or float64 on CUDA cores.
      return peak_flops(d, low ? at::kFloat : dtype);
  }
}

namespace {
// The best of `runs` calls of f, each timed as the smaller of its wall time and its CPU time spread
// over the intra-op threads (this process's CPU clock / at::get_num_threads()). A probe is a ceiling:
// it must read what the hardware does, not what the neighbours left of it. On a busy machine a 10 ms
// call is preempted in every run and its wall time reads the share of a core it got (measured: a
// ceiling that read low failed 6 of 18 correct runs at load 13-16 as "impossible rate"); its CPU time
// counts only the cycles it ran. A BLAS that leaves some of the threads idle makes the CPU reading too
// short, so the ceiling too high: a looser check, never a false failure.
template <class F>
double best_seconds(int runs, F&& f) {
  const double threads = std::max(1, at::get_num_threads());
  double best = 1e300;
  for (int i = 0; i < runs; ++i) {
    const double cpu0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = (process_cpu_seconds() - cpu0) / threads;
    best = std::min(best, cpu > 0 ? std::min(wall, cpu) : wall);
  }
  return best;
}
}  // namespace

double cpu_gemm_reading(at::ScalarType dtype, int64_t n) {
  // 512^3 multiply-adds (the default): ~10 ms per run at 30 GFLOP/s, ~1.5 ms at 200, large enough for
  // the BLAS's blocked kernel.
  const at::Tensor a = at::randn({n, n}, at::kFloat).to(dtype), b = at::randn({n, n}, at::kFloat).to(dtype);
  at::Tensor c = at::empty({n, n}, a.options());
  at::mm_out(c, a, b);  // first call: the BLAS's own set-up
  const double s = best_seconds(5, [&] { at::mm_out(c, a, b); });
  return 2.0 * static_cast<double>(n * n * n) / s;
}

double cpu_gemm_probe(at::ScalarType dtype, bool again) {
  static std::map<at::ScalarType, double> cache;
  if (auto it = cache.find(dtype); it != cache.end() && !again) return it->second;
  return cache[dtype] = std::max(cache[dtype], cpu_gemm_reading(dtype));
}

double cpu_copy_probe(bool again) {
  static double cached = 0;
  if (cached > 0 && !again) return cached;
  constexpr int64_t bytes = 64LL << 20;  // beyond any last-level cache
  const at::Tensor src = at::ones({bytes}, at::kByte);
  at::Tensor dst = at::empty({bytes}, at::kByte);
  dst.copy_(src);
  const double s = best_seconds(3, [&] { dst.copy_(src); });
  return cached = std::max(cached, static_cast<double>(bytes) / s);
}

PeakRecord rank_peaks(at::ScalarType dtype, bool cuda, const std::string& gpu_name, int64_t ranks_per_gpu, bool nccl,
                      double measure_peak_flops, bool again, double gpu_memory_bytes) {
  PeakRecord p;
  const std::string dt = c10::toString(dtype);
  const int64_t sharing = std::max<int64_t>(1, ranks_per_gpu);
  const std::string shared = sharing > 1 ? " / " + std::to_string(sharing) + " ranks sharing it" : "";
  if (cuda) {
    if (const auto d = find_device_peak(gpu_name, gpu_memory_bytes)) {
      p.flops = peak_flops(*d, dtype) / static_cast<double>(sharing);
      for (const kernels::KernelRoute route : kernels::kKernelRoutes)
        p.route_flops[kernels::to_string(route)] = route_peak_flops(*d, route, dtype) / static_cast<double>(sharing);
      p.flops_source = "table: " + d->name + " " + dt + " dense" + shared;
      if (nccl && sharing == 1) {
        p.link_bandwidth = d->link_bandwidth;
        p.link_source = "table: " + d->name + " NVLink per direction";
      }
    } else {
      p.flops_source = "unknown GPU '" + gpu_name + "' (not in the peak table; set measure.peak_flops)";
    }
  } else {
    const bool low = dtype == at::kBFloat16 || dtype == at::kHalf;
    p.flops = low ? std::max(cpu_gemm_probe(dtype, again), cpu_gemm_probe(at::kFloat, again)) : cpu_gemm_probe(dtype, again);
    p.flops_source = "probe: CPU " + std::string(low ? dt + " / Float" : dt) + " GEMM, " +
                     std::to_string(at::get_num_threads()) + " thread(s)";
  }
  if (p.link_bandwidth == 0) {
    p.link_bandwidth = cpu_copy_probe(again);
    p.link_source = "probe: host memory copy";
  }
  if (measure_peak_flops > 0) {
    p.flops = measure_peak_flops;
    p.flops_source = "measure.peak_flops";
  }
  return p;
}

}  // namespace cpbench
