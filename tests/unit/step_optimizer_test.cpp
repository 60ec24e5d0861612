// The optimizer step, on the GPU and offloaded, against a hand count (harness/planner/step/optimizer.hpp).
#include "harness/planner/step/optimizer.hpp"

#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepOptimizer, AdamOnGpuAndOnCpuByHand) {
  const ModelShape m = small_moe();
  const Cluster c = h100();
  Parallel p;
  p.tp = 2, p.cp = 2, p.dp = 2, p.ep = 4, p.zero = 3;
  const CaseShape s = shape(m, c, p);
  const GpuParams g = gpu_params(s);
  // Dense: 4 attention layers 12288 + 2 dense MLPs 73728 + 2 x (shared 24576 + router 512) + embedding and
  // head 64000 each, / tp 2; experts 2 x 8 x 24576 / ep 4.
  EXPECT_DOUBLE_EQ(g.dense, (4 * 12288.0 + 2 * 73728 + 2 * (24576 + 512) + 128000) / 2);
  EXPECT_DOUBLE_EQ(g.expert, 2 * 8 * 24576.0 / 4);
  // ZeRO >= 1: dense states over dp x cp = 4, experts over 4 / ep = 1.
  const double P = g.dense / 4 + g.expert;
  EXPECT_DOUBLE_EQ(optimizer_params(s, g), P);
  const Component gpu = optimizer_component(s, g);
  EXPECT_DOUBLE_EQ(gpu.bytes, P * 32);
  EXPECT_DOUBLE_EQ(gpu.time_s, P * 32 / c.kernel.hbm_bandwidth);
  // Offloaded, 3 micro-batches: the host's CPU passes over its 8 GPUs' parameters 3 + 1 times, and each
  // GPU sends 3 x 2 B of gradients down and takes 2 B of weights up per parameter.
  CaseShape off = shape(m, c, p, Recompute::none, 1024, 3);
  off.train.offload = Offload::optimizer;
  const Component cpu = optimizer_component(off, g);
  EXPECT_EQ(gpus_per_host(off), 8);
  EXPECT_DOUBLE_EQ(cpu.bytes, P * (3 * 2 + 2));
  EXPECT_DOUBLE_EQ(cpu.time_s, 8 * P * 4 / constants().host_params_per_s + P * 8 / c.host_bandwidth);
  // ZeRO 0: every GPU updates its whole copy.
  p.zero = 0;
  EXPECT_DOUBLE_EQ(optimizer_params(shape(m, c, p), g), g.dense + g.expert);
}

}  // namespace cpbench::step_test
