// resolve_device_times (kernels/transports/transport.hpp): device-timed spans become compute / wait /
// transfer seconds and host-clock spans. On CUDA the times are events; the logic is the same for any
// DeviceTime, so host times stand in for them here (the GPU tests run the CUDA events).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kernels/transports/transport.hpp"

using namespace cpbench;

TEST(DeviceSpans, ResolveAddsSecondsByKindAndMapsSpansOntoTheHostClock) {
  using comm::DeviceTime;
  const auto host0 = std::chrono::steady_clock::now();
  const DeviceTime anchor = DeviceTime::now(at::kCPU);
  auto later = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return DeviceTime::now(at::kCPU);
  };
  const DeviceTime t1 = later(), t2 = later(), t3 = later(), t4 = later();
  AttentionStats stats;
  stats.record_spans = true;
  stats.device_spans.push_back({AttentionSpan::Kind::compute, "ring_fwd:0", t1, t2});
  stats.device_spans.push_back({AttentionSpan::Kind::wait, "ring_fwd:0", t2, t3});
  stats.device_spans.push_back({AttentionSpan::Kind::transfer, "ring_fwd:0", t1, t3});
  stats.device_spans.push_back({AttentionSpan::Kind::transfer_grad, "ring_bwd:1", t3, t4});
  resolve_device_times(stats, anchor, host0);
  EXPECT_TRUE(stats.device_spans.empty());
  EXPECT_DOUBLE_EQ(stats.compute_seconds, DeviceTime::between(t1, t2));
  EXPECT_DOUBLE_EQ(stats.comm_seconds, DeviceTime::between(t2, t3));
  EXPECT_DOUBLE_EQ(stats.transfer_seconds, DeviceTime::between(t1, t3) + DeviceTime::between(t3, t4));
  ASSERT_EQ(stats.spans.size(), 4u);
  // Each span sits where its device times are relative to the anchor, on the anchor's host clock.
  const auto off = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t - host0).count();
  };
  EXPECT_NEAR(off(stats.spans[0].begin), DeviceTime::between(anchor, t1), 1e-6);
  EXPECT_NEAR(off(stats.spans[0].end), DeviceTime::between(anchor, t2), 1e-6);
  EXPECT_EQ(stats.spans[1].kind, AttentionSpan::Kind::wait);
  EXPECT_EQ(stats.spans[3].name, "ring_bwd:1");
  EXPECT_NEAR(off(stats.spans[3].end), DeviceTime::between(anchor, t4), 1e-6);
  // Without spans recorded, only the seconds.
  AttentionStats quiet;
  quiet.device_spans.push_back({AttentionSpan::Kind::compute, "x", t1, t2});
  resolve_device_times(quiet, anchor, host0);
  EXPECT_TRUE(quiet.spans.empty());
  EXPECT_GT(quiet.compute_seconds, 0.0);
}
