// Gated DeltaNet hybrids from their config.json and in scenarios: Qwen3-Next's and Qwen3.5's fields
// (layer_types or full_attention_interval, the linear_* sizes, head_dim, partial rotary factor, MoE
// folded into the dense MLP), the shipped models' published numbers, a refused unknown layer type
// naming the field; the scenario's model.gdn keys, mixer letter G and gdn_cp axis, parsed once into the
// case, and the refusals before any rank starts; GDN CP's bytes and memory formulas against numbers
// worked out by hand and their S dependence; the planner's GDN strategies and admission's GDN terms.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kernels/mixers/gdn/gdn_cp_costs.hpp"
#include "harness/model/hf_config.hpp"
#include "harness/planner/plan.hpp"
#include "harness/runner/admission.hpp"
#include "harness/runner/scenario.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/plan_test_util.hpp"
#include "tests/unit/scenario_test_util.hpp"
#include "tests/unit/linear_costs_test_util.hpp"

using namespace cpbench;
using nlohmann::json;

namespace {

std::string error_of(const json& j) {
  try {
    (void)parse_hf_config(j.dump(), "models/x.json", "x");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

using scenario_test::refusal;

// 2 rows of 64 tokens over 4 ranks, 2 key heads x 8, 4 value heads x 16, conv 4, float64, 2 chunks a rank.
GdnCpShape hand_shape() {
  return gdn_cp_shape(GdnConfig{2, 4, 8, 16, 4}, linear_cp_shape(/*rows=*/2, /*seq_len=*/64, /*cp=*/4, /*conv=*/4,
                                                                 /*elem_bytes=*/8, /*chunks_per_rank=*/2));
}

}  // namespace

TEST(GdnModels, Qwen3NextFromItsShippedConfig) {
  const HfModel m = shipped_model("qwen3-next-80b-a3b");
  EXPECT_EQ(m.model_type, "qwen3_next");
  ASSERT_EQ(m.mixers.size(), 48u);
  EXPECT_EQ(m.mixers.substr(0, 8), "GGGAGGGA") << "full_attention_interval 4: every fourth layer attention";
  EXPECT_EQ(m.attention_layers(), 12);
  EXPECT_EQ(m.layers_of('G'), 36);
  EXPECT_EQ(m.gdn.key_heads, 16);
  EXPECT_EQ(m.gdn.value_heads, 32);
  EXPECT_EQ(m.gdn.key_head_dim, 128);
  EXPECT_EQ(m.gdn.value_head_dim, 128);
  EXPECT_EQ(m.gdn.conv, 4);
  EXPECT_EQ(m.heads, 16);
  EXPECT_EQ(m.kv_heads, 2);
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_DOUBLE_EQ(m.partial_rotary_factor, 0.25);
  EXPECT_EQ(m.hidden, 2048);
  EXPECT_EQ(m.experts, 512);
  EXPECT_EQ(m.experts_per_token, 10);
  EXPECT_EQ(m.moe_layers, 48);
  EXPECT_EQ(m.ffn, 512) << "an MoE layer's per-token MLP work is its routed experts' (moe_intermediate_size)";
}

TEST(GdnModels, Qwen35TextConfigInsideItsWrapper) {
  const HfModel m = shipped_model("qwen3.5-9b");
  EXPECT_EQ(m.model_type, "qwen3_5_text");
  ASSERT_EQ(m.mixers.size(), 32u);
  EXPECT_EQ(m.mixers.substr(0, 4), "GGGA");
  EXPECT_EQ(m.gdn.key_heads, 16);
  EXPECT_EQ(m.gdn.value_heads, 32);
  EXPECT_EQ(m.heads, 16);
  EXPECT_EQ(m.kv_heads, 4);
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_EQ(m.ffn, 12288) << "dense MLP";
  EXPECT_EQ(m.moe_layers, 0);
  EXPECT_DOUBLE_EQ(m.partial_rotary_factor, 0.25) << "from rope_parameters";
}

TEST(GdnModels, UnknownLayerTypesAndMissingFieldsAreRefusedNamingTheField) {
  json j = json::parse(find_shipped_model("qwen3-next-80b-a3b")->text);
  j["layer_types"] = json::array();
  for (int i = 0; i < 48; ++i) j["layer_types"].push_back(i == 5 ? "kimi_delta_attention" : "linear_attention");
  const std::string e = error_of(j);
  EXPECT_NE(e.find("models/x.json: layer_types[5]: 'kimi_delta_attention' is not a layer type cpbench models"),
            std::string::npos)
      << e;
  json k = json::parse(find_shipped_model("qwen3-next-80b-a3b")->text);
  k.erase("linear_num_key_heads");
  EXPECT_NE(error_of(k).find("linear_num_key_heads: missing"), std::string::npos) << error_of(k);
  k = json::parse(find_shipped_model("qwen3-next-80b-a3b")->text);
  k["linear_num_value_heads"] = 24;
  EXPECT_NE(error_of(k).find("linear_num_value_heads: 24 is not a multiple of linear_num_key_heads 16"),
            std::string::npos);
  json w = json::parse(find_shipped_model("qwen3.5-9b")->text);
  w.erase("text_config");
  EXPECT_NE(error_of(w).find("text_config: missing"), std::string::npos) << error_of(w);
}

TEST(GdnModels, ScenarioKeysAndTheAxisParseOnceIntoTheCase) {
  const std::string model = "model: {preset: tiny-gdn, gdn: {key_heads: 2, value_heads: 4, chunk: 16}}\n";
  const ScenarioSpec s =
      parse_scenario(model + "sweep: {sharder: [load_balanced, thd], cp: [2, 3], gdn_cp: [state_passing]}\n", "x.yaml");
  ASSERT_EQ(s.cases.size(), 4u) << "cp 3 runs under state passing (no head split)";
  EXPECT_EQ(s.model.mixers, "GAG");
  EXPECT_EQ(s.model.gdn.chunk, 16);
  for (const auto& c : s.cases) {
    EXPECT_EQ(c.mixer_strategy(mixer_for('G')), "state_passing");
    EXPECT_NE(c.name().find("/gdn_state_passing"), std::string::npos) << c.name();
  }
  const ScenarioSpec dflt = parse_scenario(model + "sweep: {cp: 2}\n", "x.yaml");
  EXPECT_EQ(dflt.cases[0].mixer_strategy(mixer_for('G')), "head_parallel");
  EXPECT_EQ(dflt.cases[0].name().find("gdn"), std::string::npos);
  const ScenarioSpec qn = parse_scenario(
      "model: {config: qwen3-next-80b-a3b, layers: 4, hidden: 64, heads: 4, kv_heads: 2, vocab: 128, ffn: 64,\n"
      "        gdn: {key_heads: 2, value_heads: 4, key_head_dim: 8, value_head_dim: 8}}\nsweep: {cp: 2}\n",
      "x.yaml");
  EXPECT_EQ(qn.model.mixers, "GGAG") << "48 layers resampled to 4, keeping the G letter";
  EXPECT_EQ(qn.model.gdn.value_heads, 4);
  EXPECT_EQ(qn.model.gdn.conv, 4) << "the file's linear_conv_kernel_dim";

  EXPECT_NE(refusal(model + "sweep: {sharder: striped, cp: 2, gdn_cp: state_passing}\n")
                .find("striped/allgather/cp2/causal/float64/gdn_state_passing: gdn_cp state_passing: layout striped"),
            std::string::npos)
      << refusal(model + "sweep: {sharder: striped, cp: 2, gdn_cp: state_passing}\n");
  EXPECT_NE(refusal(model + "sweep: {cp: 2, gdn_cp: ring}\n").find("sweep.gdn_cp: unknown GDN CP strategy"),
            std::string::npos);
  EXPECT_NE(refusal("sweep: {cp: 2, gdn_cp: state_passing}\n").find("needs a model with Gated DeltaNet layers"),
            std::string::npos);
  EXPECT_NE(refusal(model + "sweep: {cp: 3}\n").find("model.gdn.value_heads 4 is not divisible by cp 3"),
            std::string::npos);
  EXPECT_NE(refusal("model: {preset: tiny-gdn, gdn: {key_heads: 3}}\nsweep: {cp: 1}\n").find("model.gdn.value_heads"),
            std::string::npos);
  EXPECT_NE(refusal("model: {preset: tiny-gdn, gdn: {heads: 3}}\n").find("model.gdn"), std::string::npos);
}

TEST(GdnModels, CpBytesAndMemoryMatchHandWorkedNumbers) {
  const GdnCpShape s = hand_shape();
  // head_parallel: 1 value head per rank (16 v + 1 b + 1 a), key heads 2 < W 4: one key head per rank
  // (8 q + 8 k): 34 channels in, 16 back, 16 tokens per rank, 3 peers, 2 rows, 8 bytes.
  EXPECT_EQ(s.head_parallel_channels(), 34);
  const LinearCpBytes hp = linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::head_parallel, s);
  linear_test::expect_each_way(hp, 3 * 2 * 16 * (34 + 16) * 8, 2);
  // state_passing: per chunk and row 4 value heads x 8 x (8 + 16) pair numbers, 3 x 96 halo inputs.
  EXPECT_EQ(s.conv_channels(), 96);
  const LinearCpBytes sp = linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::state_passing, s);
  linear_test::expect_each_way(sp, 3 * (2 * 2 * 4 * 8 * 24 * 8 + 2 * 2 * 3 * 96 * 8), 2);
  EXPECT_EQ(linear_cp_extra_memory_bytes(gdn_cp_terms, GdnCpStrategy::head_parallel, s), 2 * 64 * 50 * 8);
  EXPECT_EQ(linear_cp_extra_memory_bytes(gdn_cp_terms, GdnCpStrategy::state_passing, s),
            4 * (2 * 2 * 4 * 8 * 24 * 8 + 2 * 2 * 3 * 96 * 8) + 2 * 2 * 4 * 8 * 16 * 8)
      << "the pairs and halos of every rank and one incoming state per own chunk (no readout columns)";

  // S = 2048 and 8192 (the check): state passing's bytes equal, head parallel's x 4.
  GdnCpShape a = s, b = s;
  a.seq_len = 2048;
  b.seq_len = 8192;
  EXPECT_EQ(linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::state_passing, a).total(),
            linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::state_passing, b).total());
  EXPECT_EQ(linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::head_parallel, b).total(),
            4 * linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::head_parallel, a).total());
  GdnCpShape bf16 = s;
  bf16.elem_bytes = 2;
  bf16.state_elem_bytes = 4;
  EXPECT_EQ(linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::state_passing, bf16).forward,
            3 * (2 * 2 * 4 * 8 * 24 * 4 + 2 * 2 * 3 * 96 * 2));
  linear_test::expect_shared_byte_rules(s, gdn_cp_terms, GdnCpStrategy::head_parallel);
  linear_test::expect_names_round_trip(known_cp_strategies<GdnCpStrategy>(), parse_cp_strategy<GdnCpStrategy>, "hidden_parallel");
}

TEST(GdnModels, PlannerPricesBothStrategiesAndAdmissionCountsTheLayers) {
  plan::PlanRequest r = plan_test::request("qwen3-next-80b-a3b", 65536, {4, 8});
  r.sharders = {"contiguous", "load_balanced", "striped"};
  r.transports = {"allgather"};
  const plan::Plan p = plan::make_plan(r);
  int head = 0, passing = 0;
  for (const auto& c : p.cases) {
    EXPECT_EQ(c.ssm.mixer, "GDN");
    head += c.ssm.strategy == "head_parallel";
    passing += c.ssm.strategy == "state_passing";
    if (c.sharder == "striped") {
      EXPECT_EQ(c.ssm.strategy, "head_parallel") << "striped cannot pass states";
    }
    EXPECT_GT(c.ssm.bytes_per_rank, 0);
  }
  EXPECT_EQ(head, 6);
  EXPECT_EQ(passing, 4);
  EXPECT_FALSE(p.recommendation.ssm_strategy.empty());
  // State passing's bytes do not grow with S, head parallel's do (x 4 from 64K to 256K).
  plan::PlanRequest longer = r;
  longer.seq_len = 4 * 65536;
  const plan::Plan q = plan::make_plan(longer);
  for (const auto& c : p.cases)
    for (const auto& d : q.cases)
      if (c.cp == d.cp && c.sharder == d.sharder && c.ssm.strategy == d.ssm.strategy) {
        if (c.ssm.strategy == "state_passing") EXPECT_EQ(d.ssm.bytes_per_rank, c.ssm.bytes_per_rank) << c.sharder;
        else EXPECT_EQ(d.ssm.bytes_per_rank, 4 * c.ssm.bytes_per_rank) << c.sharder;
      }
  plan::PlanRequest bad = r;
  bad.mixer_strategies["gdn_cp"] = {"hidden_parallel"};
  try {
    (void)plan::make_plan(bad);
    ADD_FAILURE() << "an unknown GDN strategy was planned";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--gdn-cp: unknown GDN CP strategy 'hidden_parallel'"), std::string::npos)
        << e.what();
  }

  const ScenarioSpec s = parse_scenario(
      "model: {preset: tiny-gdn, gdn: {key_heads: 2, value_heads: 4, chunk: 16}}\n"
      "batch: {seq_len: 4096}\nsweep: {cp: 2, gdn_cp: [head_parallel, state_passing]}\n",
      "x.yaml");
  for (const auto& c : s.cases) {
    const RankMemory m = estimate_rank_memory(s, c, 0, true);
    bool found = false;
    for (const auto& t : m.terms)
      if (t.what == std::string("GDN layers (") + c.mixer_strategy(mixer_for('G')) + ")") {
        found = true;
        EXPECT_GT(t.bytes, 0);
      }
    EXPECT_TRUE(found) << c.name();
  }
}
