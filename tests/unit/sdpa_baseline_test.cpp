// The attention benchmark's SDPA baselines (tests/bench/sdpa_baseline.hpp): x_sdpa's is pinned to the
// kernels cpbench's fused routes call, with cuDNN's attention off (torch 2.11 prefers it on Hopper).
#include <gtest/gtest.h>

#include "tests/bench/sdpa_baseline.hpp"

using namespace cpbench::bench;

TEST(SdpaBaseline, XSdpaIsFlashAttention2WithCudnnOff) {
  const SdpaBackends b = flash_baseline();
  EXPECT_FALSE(b.cudnn) << "x_sdpa left to cuDNN's attention compares cuDNN with FA2, not cpbench's overhead";
  EXPECT_FALSE(b.fa3);
  EXPECT_TRUE(b.flash);
  EXPECT_TRUE(b.efficient) << "the masked (document) points run on the memory-efficient kernel";
}

// The pin reaches ATen's context for the baseline's run and is undone after it, so x_cudnn's run (and
// everything else in the process) gets SDPA's own choice.
TEST(SdpaBaseline, ThePinHoldsForItsScopeOnly) {
  set_sdpa_backends(SdpaBackends{});  // torch's defaults: cuDNN allowed
  {
    const ScopedSdpaBackends pin(flash_baseline());
    EXPECT_FALSE(at::globalContext().userEnabledCuDNNSDP());
    EXPECT_FALSE(at::globalContext().userEnabledFA3SDP());
    EXPECT_TRUE(at::globalContext().userEnabledFlashSDP());
    EXPECT_TRUE(at::globalContext().userEnabledMemEfficientSDP());
  }
  EXPECT_TRUE(at::globalContext().userEnabledCuDNNSDP());
}
