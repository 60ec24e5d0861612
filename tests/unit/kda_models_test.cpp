// Kimi Delta Attention in models and scenarios: Kimi Linear's shipped config.json (KDA : MLA at 20 : 7,
// linear_attn_config's sizes, MLA read as plain attention, MoE folded into the dense MLP); the
// scenario's model.kda keys, mixer letter K and kda_cp axis, and the refusal of heads that do not split;
// the planner's two KDA strategies (state passing's bytes flat in S, head parallel's linear) and
// admission's KDA terms.
#include <gtest/gtest.h>

#include <tuple>

#include "harness/model/hf_config.hpp"
#include "harness/planner/plan.hpp"
#include "harness/runner/admission.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/mixers/mixer.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/plan_test_util.hpp"

using namespace cpbench;

TEST(KdaModels, KimiLinearFromItsShippedConfig) {
  const HfModel m = shipped_model("kimi-linear-48b-a3b");
  EXPECT_EQ(m.model_type, "kimi_linear");
  EXPECT_EQ(m.mixers, "KKKAKKKAKKKAKKKAKKKAKKKAKKA") << "full_attn_layers 4, 8, ..., 24, 27 (1-based)";
  EXPECT_EQ(count_layers(m.mixers, 27, 'K'), 20);
  EXPECT_EQ(m.attention_layers(), 7);
  // heads, key and value head dims, gate rank, conv
  EXPECT_EQ(std::tuple(m.kda.heads, m.kda.key_head_dim, m.kda.value_head_dim, m.kda.gate_rank, m.kda.conv),
            std::tuple(32, 128, 128, 128, 4));
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 32);
  EXPECT_EQ(m.head_dim, 192) << "MLA as plain attention: qk_nope_head_dim 128 + qk_rope_head_dim 64";
  EXPECT_EQ(m.hidden, 2304);
  EXPECT_EQ(m.experts, 256);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.moe_layers, 26) << "first_k_dense_replace 1";
  EXPECT_EQ(m.ffn, 1024);
}

TEST(KdaModels, ScenarioKeysAxisAndRefusals) {
  const ScenarioSpec s = parse_scenario(
      "model: {preset: tiny, layers: 3, mixers: KAK, kda: {heads: 4, key_head_dim: 8, chunk: 16, gate_rank: 4}}\n"
      "batch: {seq_len: 4096}\nsweep: {cp: 2, kda_cp: [head_parallel, state_passing]}\n",
      "x.yaml");
  ASSERT_EQ(s.cases.size(), 2u);
  EXPECT_EQ(s.model.kda.heads, 4);
  EXPECT_EQ(s.model.kda.gate_rank, 4);
  EXPECT_EQ(s.cases[1].name().find("/kda_state_passing") != std::string::npos, true) << s.cases[1].name();
  for (const auto& c : s.cases) {
    bool found = false;
    for (const auto& t : estimate_rank_memory(s, c, 0, true).terms)
      if (t.what == std::string("KDA layers (") + c.mixer_strategy(mixer_for('K')) + ")") found = t.bytes > 0;
    EXPECT_TRUE(found) << c.name();
  }
  try {
    (void)parse_scenario("model: {preset: tiny, layers: 3, mixers: KAK, kda: {heads: 3}}\nsweep: {cp: 2}\n", "x.yaml");
    ADD_FAILURE() << "3 heads over 2 ranks head-parallel were accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model.kda.heads 3 is not divisible by cp 2"), std::string::npos) << e.what();
  }
}

TEST(KdaModels, PlannerPricesBothStrategiesForKimiLinear) {
  plan::PlanRequest r = plan_test::request("kimi-linear-48b-a3b", 65536, {4, 8});
  r.sharders = {"contiguous", "load_balanced"};
  r.transports = {"allgather"};
  const plan::Plan p = plan::make_plan(r);
  plan::PlanRequest longer = r;
  longer.seq_len = 4 * 65536;
  const plan::Plan q = plan::make_plan(longer);
  int passing = 0;
  for (const auto& c : p.cases) {
    EXPECT_EQ(c.ssm.mixer, "KDA");
    EXPECT_GT(c.ssm.bytes_per_rank, 0);
    passing += c.ssm.strategy == "state_passing";
    for (const auto& d : q.cases)
      if (c.cp == d.cp && c.sharder == d.sharder && c.ssm.strategy == d.ssm.strategy) {
        EXPECT_EQ(d.ssm.bytes_per_rank, (c.ssm.strategy == "state_passing" ? 1 : 4) * c.ssm.bytes_per_rank) << c.sharder;
      }
  }
  EXPECT_EQ(passing, 4);
}

TEST(KdaModels, DeltaRuleFlopsReachTheModelFlops) {
  // The case's model_flops count each delta-rule layer's chunked form on one rank (forward + 2 x
  // backward), GDN's per-head gate and KDA's per-channel one.
  MixerConfigs c;
  c.kda.heads = 4;
  c.kda.key_head_dim = c.kda.value_head_dim = 128;
  c.gdn.key_heads = 2;
  c.gdn.value_heads = 4;
  c.gdn.key_head_dim = c.gdn.value_head_dim = 128;
  // gdn_scan_flops(4096, 64, 128, 128) = 64 (5*128 + 3*128) + 6*128*128 = 163840; KDA adds 1.5*128*6.
  EXPECT_DOUBLE_EQ(mixer_for('G').train_flops_per_token(c, 4096), 3.0 * 163840 * 4);
  EXPECT_DOUBLE_EQ(mixer_for('K').train_flops_per_token(c, 4096), 3.0 * (163840 + 1152) * 4);
}
