// Attention per layer kind in the whole step (harness/planner/step/attention.hpp): parameters, saved
// activations and model FLOPs by hand; the kinds' prices are the planner's own cases (make_plan) at
// heads / tp, and a step runs one layout with a transport per kind.
#include "harness/planner/step/attention.hpp"

#include "harness/planner/plan.hpp"
#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepAttention, ParamsActivationsAndFlopsByHand) {
  const ModelShape m = small_dense();
  EXPECT_DOUBLE_EQ(attention_layer_params(m), 64.0 * (4 + 2 * 2) * 16 + 4.0 * 16 * 64);
  EXPECT_DOUBLE_EQ(attention_activation_per_token(m, Recompute::none), 2.0 * (2 * 64 + 2 * 64 + 2 * 32) + 16);
  EXPECT_DOUBLE_EQ(attention_activation_per_token(m, Recompute::full), 2.0 * 64);
  // 2 hq (dqk + dv) FLOPs per visible key: causal (S + 1) / 2 keys, a window of 128 its mean.
  EXPECT_DOUBLE_EQ(attention_core_flops_per_token(m, 1024, "causal"), 2.0 * 4 * 32 * 1025 / 2);
  EXPECT_DOUBLE_EQ(attention_core_flops_per_token(m, 1024, "sliding_window:128"),
                   2.0 * 4 * 32 * (128 - 128.0 * 127 / 2048));
  // MLA (DeepSeek-V3's dims): q LoRA 1536, latent 512 + 64, 128 heads of 192 / 128.
  const ModelShape ds = model_preset("deepseek-v3");
  const double h = 7168, H = 128;
  EXPECT_DOUBLE_EQ(attention_layer_params(ds), h * 1536 + 1536 * H * 192 + h * 576 + 512 * H * 256 + H * 128 * h);
}

TEST(StepAttention, KindsArePricedByThePlannersCasesAtHeadsOverTp) {
  PlanRequest r;
  r.model = small_dense();
  r.seq_len = 4096;
  r.cluster = h100();
  AttentionPricer pricer(r);
  ASSERT_EQ(pricer.kinds().size(), 1u);
  const LayoutPrices& at = pricer.at(2, 4);
  ASSERT_TRUE(at.count("load_balanced"));
  const KindPrice& kp = at.at("load_balanced")[0];
  // The same case from the attention planner: one layer of 2 heads / 1 kv head, cp 4, its node 8 / tp.
  PlanRequest one = r;
  one.model.layers = 1, one.model.heads = 2, one.model.kv_heads = 1, one.model.mlp_layers = 0;
  one.cps = {4};
  one.sharders = {"load_balanced"};
  one.transports = {kp.transport};
  one.cluster.gpus_per_node = 4;
  const Plan p = make_plan(one);
  bool found = false;
  for (const auto& c : p.cases)
    if (c.transport == kp.label) {
      EXPECT_DOUBLE_EQ(kp.step_s, c.predicted_step_s);
      EXPECT_DOUBLE_EQ(kp.bytes, static_cast<double>(c.bytes_per_rank));
      found = true;
    }
  EXPECT_TRUE(found) << kp.label;
}

TEST(StepAttention, GptOssHasTwoKindsOnOneLayout) {
  PlanRequest r;
  r.model = model_preset("gpt-oss-120b");
  r.seq_len = 32768;
  r.cluster = h100();
  AttentionPricer pricer(r);
  ASSERT_EQ(pricer.kinds().size(), 2u);
  EXPECT_EQ(pricer.kinds()[0].kind, "sliding_attention");
  EXPECT_EQ(pricer.kinds()[0].mask, "sliding_window:128");
  EXPECT_EQ(pricer.kinds()[1].kind, "full_attention");
  EXPECT_EQ(pricer.kinds()[0].layers + pricer.kinds()[1].layers, 36);
  // Every layout prices both kinds, each on its own best transport: ring_window can serve the sliding
  // kind of a contiguous layout while the full kind runs another transport on the same layout.
  const LayoutPrices& at = pricer.at(1, 8);
  ASSERT_FALSE(at.empty());
  for (const auto& [sharder, prices] : at) EXPECT_EQ(prices.size(), 2u) << sharder;
}

}  // namespace cpbench::step_test
