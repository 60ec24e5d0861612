#pragma once
// The hardware ceilings a measured rate is checked against: a table of data-centre GPUs' dense peaks
// (vendor datasheets, no sparsity), and for CPU ranks short probes run in the rank itself with its own
// thread count (a GEMM for FLOP/s, a large copy for memory bandwidth). A rate above its ceiling is
// impossible: the run measured something else, and the case fails (case_metrics.hpp).
#include <optional>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "kernels/attention/fused_attention.hpp"
#include "reports/result.hpp"

namespace cpbench {

struct DevicePeak {
  std::string name;   // the entry, e.g. "H200 NVL"
  std::string match;  // a substring of the CUDA device name, e.g. "H200 NVL"
  // The device's total memory (GiB) this entry holds for, [min, max); 0: unbounded. Tells parts whose
  // name alone does not (a bare "NVIDIA H100" of 94 GB is the NVL part).
  double min_memory_gib = 0, max_memory_gib = 0;
  double bf16 = 0, fp16 = 0, fp32 = 0, fp64 = 0;  // FLOP/s, dense (fp32: CUDA cores, no TF32;
                                                  // fp64: the tensor-core figure where higher)
  double tf32 = 0;              // FLOP/s, dense, tensor cores on float32 inputs (TF32)
  double memory_bandwidth = 0;  // B/s, HBM
  double link_bandwidth = 0;    // B/s per GPU and direction, NVLink (half the bidirectional figure)
};

// A100, H100 SXM / PCIe / NVL, GH200, H200 SXM / NVL, B200, most specific first.
[[nodiscard]] const std::vector<DevicePeak>& device_peak_table();
// The first entry whose `match` is in the CUDA device name and whose memory range holds
// `memory_bytes` (0: unknown, every range holds it): "NVIDIA H200 NVL" -> H200 NVL, "NVIDIA H200" ->
// H200 SXM, "NVIDIA H100 PCIe" -> H100 PCIe, "NVIDIA H100 80GB HBM3" -> H100 SXM; nullopt if none.
[[nodiscard]] std::optional<DevicePeak> find_device_peak(const std::string& device_name, double memory_bytes = 0);
// The entry's FLOP/s for a dtype (float64, float32, bfloat16, float16).
[[nodiscard]] double peak_flops(const DevicePeak& d, at::ScalarType dtype);
// The ceiling of attention blocks on `route` for a case in `dtype` (the one source of each route's
// ceiling): the flash routes and 16-bit memory-efficient blocks run on tensor cores at the 16-bit peak;
// float32 memory-efficient blocks on tensor cores too (its float32 GEMMs are 3xTF32, below the TF32
// peak), so the TF32 peak; the tiled and skipped routes at the compute dtype's peak (at::matmul in
// float32 / float64, TF32 off as torch defaults it).
[[nodiscard]] double route_peak_flops(const DevicePeak& d, kernels::KernelRoute route, at::ScalarType dtype);

// The ceilings of one rank. `measure_peak_flops` > 0 overrides the FLOP/s (scenario key
// measure.peak_flops). CUDA: the table's entry for `gpu_name` divided among the `ranks_per_gpu` ranks
// sharing the GPU, with NVLink as the link when each rank has its own GPU under NCCL (`nccl`), else the
// host copy probe (Gloo stages through host memory); an unlisted GPU has no FLOP/s ceiling (0, the
// source says so). `gpu_memory_bytes`: the device's total memory (find_device_peak). A listed GPU also
// gets each route's ceiling (route_peak_flops) in PeakRecord::route_flops, shared the same way. CPU: the GEMM probe in the case's dtype (16-bit dtypes: the larger of it and the
// float32 probe, since the kernels accumulate in float32) and the host copy probe as the link.
// `again`: CPU probes measured anew (see cpu_gemm_probe).
[[nodiscard]] PeakRecord rank_peaks(at::ScalarType dtype, bool cuda, const std::string& gpu_name, int64_t ranks_per_gpu,
                                    bool nccl, double measure_peak_flops, bool again = false,
                                    double gpu_memory_bytes = 0);

// FLOP/s of a square GEMM in `dtype` on this process's CPU with its current intra-op thread count: the
// best of a few runs, each timed as the smaller of its wall time and this process's CPU seconds over
// the thread count, so that neighbours taking the cores do not lower it (a reading taken on a busy
// machine by the wall clock alone read what was left of a core, and failed correct runs as impossible
// rates). One reading of an n x n x n product, uncached.
[[nodiscard]] double cpu_gemm_reading(at::ScalarType dtype, int64_t n = 512);
// cpu_gemm_reading, once per process and dtype, then cached (a practical peak). `again`: read anew and
// keep the larger.
[[nodiscard]] double cpu_gemm_probe(at::ScalarType dtype, bool again = false);
// B/s of a large host copy (bytes copied / time), best of a few; once per process, then cached.
[[nodiscard]] double cpu_copy_probe(bool again = false);

}  // namespace cpbench
