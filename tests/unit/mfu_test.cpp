// MFU and the peak it divides by, recomputed from their definitions with numbers written down by hand:
// MFU = the CP group's model FLOPs / step time / (ranks x the peak FLOP/s of ONE rank), and that peak
// is the case's dtype's (a float64 run against a float32 GEMM probe, or a group's FLOP/s against one
// rank's peak, are the bugs this pins: both leave MFU inside (0, 1)).
#include <gtest/gtest.h>

#include "harness/runner/case_metrics.hpp"
#include "harness/runner/device_peaks.hpp"

using namespace cpbench;

TEST(Mfu, IsTheGroupsRateOverRanksTimesOneRanksPeak) {
  // 6e12 FLOPs in 2 s by 4 ranks of 1e12 FLOP/s each: 3e12 FLOP/s of a possible 4e12.
  EXPECT_DOUBLE_EQ(flops_utilization(6e12, 2.0, 4, 1e12), 0.75);
  // One rank: the same work in the same time is 3x its peak (an impossible rate, reported as such).
  EXPECT_DOUBLE_EQ(flops_utilization(6e12, 2.0, 1, 1e12), 3.0);
  // 7 ranks, 3.5e9 FLOPs in 0.5 s, 2e9 FLOP/s each: 7e9 / 14e9.
  EXPECT_DOUBLE_EQ(flops_utilization(3.5e9, 0.5, 7, 2e9), 0.5);
  EXPECT_EQ(flops_utilization(1e12, 0.0, 4, 1e12), 0.0) << "no time measured";
  EXPECT_EQ(flops_utilization(1e12, 1.0, 4, 0.0), 0.0) << "no peak known";
}

TEST(Mfu, ThePeakIsOneRanksInTheCasesDtype) {
  // GPU table (dense datasheet figures), divided among the ranks that share the GPU: B200 float64
  // 37 TFLOP/s, float32 75 TFLOP/s; A100 bfloat16 312 TFLOP/s.
  EXPECT_DOUBLE_EQ(rank_peaks(at::kDouble, true, "NVIDIA B200", 1, true, 0).flops, 37e12);
  EXPECT_DOUBLE_EQ(rank_peaks(at::kFloat, true, "NVIDIA B200", 1, true, 0).flops, 75e12);
  EXPECT_DOUBLE_EQ(rank_peaks(at::kDouble, true, "NVIDIA B200", 2, false, 0).flops, 18.5e12) << "2 ranks share it";
  EXPECT_DOUBLE_EQ(rank_peaks(at::kBFloat16, true, "NVIDIA A100-SXM4-80GB", 1, true, 0).flops, 312e12);
  // CPU: the GEMM probe in the case's dtype, measured in this process (cached: the same readings).
  const PeakRecord f64 = rank_peaks(at::kDouble, false, "", 1, false, 0);
  EXPECT_EQ(f64.flops, cpu_gemm_probe(at::kDouble));
  EXPECT_NE(f64.flops_source.find("Double GEMM"), std::string::npos) << f64.flops_source;
  const PeakRecord f32 = rank_peaks(at::kFloat, false, "", 1, false, 0);
  EXPECT_EQ(f32.flops, cpu_gemm_probe(at::kFloat));
  EXPECT_NE(f32.flops_source.find("Float GEMM"), std::string::npos) << f32.flops_source;
  // 16-bit dtypes accumulate in float32: the larger of the two probes.
  EXPECT_EQ(rank_peaks(at::kBFloat16, false, "", 1, false, 0).flops,
            std::max(cpu_gemm_probe(at::kBFloat16), cpu_gemm_probe(at::kFloat)));
  // measure.peak_flops wins.
  EXPECT_EQ(rank_peaks(at::kDouble, false, "", 1, false, 5e9).flops, 5e9);
}
