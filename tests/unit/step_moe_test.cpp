// MoE layers and EP's all-to-alls against a hand count (harness/planner/step/moe.hpp).
#include "harness/planner/step/moe.hpp"

#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepMoe, ParamsFlopsAndAllToAllsByHand) {
  const ModelShape m = small_moe();
  const MoeParams p = moe_layer_params(m);
  const double expert = 3.0 * 64 * 128;  // 24576
  EXPECT_DOUBLE_EQ(p.routed, 8 * expert);
  EXPECT_DOUBLE_EQ(p.shared, expert);
  EXPECT_DOUBLE_EQ(p.router, 64 * 8);
  EXPECT_DOUBLE_EQ(p.active, 3 * expert + 64 * 8);  // top-2 + 1 shared + router
  const Cluster c = h100();
  Parallel par;
  par.tp = 2, par.cp = 2, par.dp = 2, par.ep = 4;
  const Component moe = moe_component(shape(m, c, par));
  EXPECT_DOUBLE_EQ(moe.flops, 2 * 512 * (2 * p.active / 2) * 3);  // 2 MoE layers, 512 tokens, / tp, fwd + bwd
  // EP: each GPU's 256 sequence-parallel tokens go to 2 experts, 3 / 4 of them on other ranks, 64 x 2 B
  // each: 49152 B dispatched and as many combined, forward and backward, 2 layers.
  const double one_way = 256.0 * 2 * 64 * 2 * 3 / 4;
  const Component ep = ep_component(shape(m, c, par));
  EXPECT_DOUBLE_EQ(ep.bytes, 2 * (1 + 1) * 2 * one_way);
  EXPECT_GT(ep.time_s, ep.bytes / c.intra_bandwidth);  // + latency; tp x ep = 8 ranks: NVLink
  // Full recompute dispatches and combines again in the recomputed forward.
  EXPECT_DOUBLE_EQ(ep_component(shape(m, c, par, Recompute::full)).bytes, 2 * (2 + 1) * 2 * one_way);
  par.ep = 1;
  EXPECT_DOUBLE_EQ(ep_component(shape(m, c, par)).bytes, 0);
  // Saved per token: norm + router input 2h, per routed and shared expert its input h, gate + up 2f and
  // the activation output f, and the fp32 router logits.
  EXPECT_DOUBLE_EQ(moe_activation_per_token(m, Recompute::none), 2.0 * (2 * 64 + 3 * (64 + 3 * 128)) + 4 * 8);
  EXPECT_DOUBLE_EQ(moe_activation_per_token(m, Recompute::selective), 2.0 * (64 + 3 * (64 + 2 * 128)) + 4 * 8);
  EXPECT_DOUBLE_EQ(moe_activation_per_token(m, Recompute::full), 0);
}

}  // namespace cpbench::step_test
