// The ceilings a GPU run's rates meet (issue 28, item 4), proven on the CPU from given device names,
// memory sizes and measured figures: the peak table tells the H100 / H200 parts apart by name and
// memory size, float32 attention on the memory-efficient route is held to the tensor cores' TF32 peak
// (not the CUDA cores' fp32 one), and an all-reduce above the link's per-direction rate (NCCL NVLS)
// warns instead of failing.
#include <gtest/gtest.h>

#include "harness/runner/case_metrics.hpp"
#include "harness/runner/device_peaks.hpp"

using namespace cpbench;

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
// totalGlobalMem as the parts report it (nvidia-smi's MiB figures).
constexpr double kH100Sxm = 81559 * kMiB, kH100Pcie = 81559 * kMiB, kH100Nvl = 95830 * kMiB;
constexpr double kH200 = 143771 * kMiB, kGh200_96 = 97871 * kMiB, kGh200_144 = 146944 * kMiB;

std::string entry(const std::string& name, double memory) {
  const auto d = find_device_peak(name, memory);
  return d ? d->name : "none";
}

// A result whose one rank ran `blocks` on `route` at an attention rate of `tflops`.
RunResult attention_result(const PeakRecord& peak, const std::string& route, double tflops) {
  RunResult r;
  r.peak = peak;
  r.metrics = {{"attention_computed_tflops_per_s_max", tflops, "TFLOP/s", 0},
               {"model_tflops_per_s_per_rank", tflops / 2, "TFLOP/s", 0}};
  RankStats rank;
  rank.kernel_blocks = {{route, 12}, {"skipped", 4}};
  r.ranks = {rank};
  return r;
}
}  // namespace

TEST(GpuCeilings, PeakTableTellsThePartsByNameAndMemory) {
  EXPECT_EQ(entry("NVIDIA H200 NVL", kH200), "H200 NVL");
  EXPECT_EQ(entry("NVIDIA H200", kH200), "H200 SXM");
  EXPECT_EQ(entry("NVIDIA H100 PCIe", kH100Pcie), "H100 PCIe");
  EXPECT_EQ(entry("NVIDIA H100 NVL", kH100Nvl), "H100 NVL");
  EXPECT_EQ(entry("NVIDIA H100", kH100Nvl), "H100 NVL") << "a bare name with the NVL's 94 GB";
  EXPECT_EQ(entry("NVIDIA H100 80GB HBM3", kH100Sxm), "H100 SXM");
  EXPECT_EQ(entry("NVIDIA H100 80GB HBM3", 0), "H100 SXM") << "memory unknown: the name decides";
  EXPECT_EQ(entry("NVIDIA GH200 480GB", kGh200_96), "GH200") << "not the H200 its name contains";
  EXPECT_EQ(entry("NVIDIA GH200 144G HBM3e", kGh200_144), "GH200 144GB");
  EXPECT_EQ(entry("Tesla T4", 16e9), "none");
  // The published dense figures (sparse / 2): NVL parts 835 TFLOP/s bf16, 60 fp32; PCIe 756.
  EXPECT_DOUBLE_EQ(find_device_peak("NVIDIA H200 NVL", kH200)->bf16, 835e12);
  EXPECT_DOUBLE_EQ(find_device_peak("NVIDIA H200", kH200)->bf16, 989.4e12);
  EXPECT_DOUBLE_EQ(find_device_peak("NVIDIA H100 PCIe", kH100Pcie)->bf16, 756e12);
  EXPECT_DOUBLE_EQ(find_device_peak("NVIDIA H100 PCIe", kH100Pcie)->fp32, 51e12);
  // What a run on an H200 NVL is checked against, and that it says so.
  const PeakRecord nvl = rank_peaks(at::kBFloat16, true, "NVIDIA H200 NVL", 1, true, 0, false, kH200);
  EXPECT_DOUBLE_EQ(nvl.flops, 835e12);
  EXPECT_NE(nvl.flops_source.find("H200 NVL"), std::string::npos) << nvl.flops_source;
  EXPECT_DOUBLE_EQ(rank_peaks(at::kBFloat16, true, "NVIDIA H100 PCIe", 1, true, 0, false, kH100Pcie).flops, 756e12);
}

TEST(GpuCeilings, Float32AttentionIsHeldToItsRoutesCeiling) {
  // float32 on an H100 SXM: the CUDA cores' 66.9 TFLOP/s for the model's GEMMs and the tiled route,
  // the tensor cores' TF32 494.7 for the memory-efficient route (3xTF32 math).
  const PeakRecord peak = rank_peaks(at::kFloat, true, "NVIDIA H100 80GB HBM3", 1, true, 0, false, kH100Sxm);
  EXPECT_DOUBLE_EQ(peak.flops, 66.9e12);
  EXPECT_DOUBLE_EQ(peak.route_flops.at("cuda_efficient"), 494.7e12);
  EXPECT_DOUBLE_EQ(peak.route_flops.at("tiled"), 66.9e12);
  // A correct large float32 case at 150 TFLOP/s of attention on the memory-efficient route passes ...
  EXPECT_EQ(impossible_rates(attention_result(peak, "cuda_efficient", 150)), "");
  // ... the same rate on the tiled route (CUDA cores) is impossible, and so is one above TF32's peak.
  const std::string tiled = impossible_rates(attention_result(peak, "tiled", 150));
  EXPECT_NE(tiled.find("above the peak 6.69e+13 FLOP/s"), std::string::npos) << tiled;
  const std::string above = impossible_rates(attention_result(peak, "cuda_efficient", 600));
  EXPECT_NE(above.find("above the peak 4.95e+14 FLOP/s"), std::string::npos) << above;
  // bf16: the flash routes at the bf16 peak; a rank that ran no fused route keeps `flops`.
  const PeakRecord bf16 = rank_peaks(at::kBFloat16, true, "NVIDIA H200", 2, true, 0, false, kH200);
  EXPECT_DOUBLE_EQ(bf16.route_flops.at("cuda_flash_varlen"), 989.4e12 / 2);
  EXPECT_DOUBLE_EQ(bf16.route_flops.at("tiled"), 66.9e12 / 2) << "16-bit on the tiled kernel computes in float32";
  RunResult none = attention_result(bf16, "cuda_flash", 1);
  none.ranks.clear();
  EXPECT_DOUBLE_EQ(attention_ceiling(none), bf16.flops);
}

TEST(GpuCeilings, InSwitchReductionAboveTheLinkWarnsInsteadOfFailing) {
  RunResult r;
  r.peak = {989.4e12, "table: H200 SXM bfloat16 dense", 450e9, "table: H200 SXM NVLink per direction", {}};
  // nccl-tests' NVLS all-reduce on 8 H200s: ~480 GB/s busbw, above 450 GB/s per direction.
  r.collectives = {{"all_reduce", 1 << 30, 1, 4e-3, 268e9, 480e9, 1.75},
                   {"reduce_scatter", 1 << 30, 1, 4e-3, 520e9, 460e9, 0.875}};
  EXPECT_EQ(impossible_rates(r), "");
  const auto warnings = rate_warnings(r);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("all_reduce of 1073741824 B at busbw 4.8e+11 B/s, above the link's per-direction 4.5e+11"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("NVLS"), std::string::npos) << warnings[0];
  // Twice the link is beyond any in-switch reduction; an all-gather has none.
  r.collectives = {{"all_reduce", 1 << 30, 1, 1e-3, 1.1e12, 1.0e12, 1.75}};
  EXPECT_NE(impossible_rates(r).find("above twice the link's nominal 4.5e+11"), std::string::npos) << impossible_rates(r);
  r.collectives = {{"all_gather", 1 << 30, 1, 4e-3, 548e9, 480e9, 0.875}};
  EXPECT_NE(impossible_rates(r).find("impossible bandwidth: all_gather"), std::string::npos);
  EXPECT_TRUE(rate_warnings(r).empty());
}
