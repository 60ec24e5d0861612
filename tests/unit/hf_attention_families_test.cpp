// gpt-oss, DeepSeek-V3 and Kimi K2 read from their config.json (harness/model/hf_attention_families.hpp):
// the shipped configs' published numbers, hand-worked (per-layer kinds, the window, sinks, MLA's dims and
// its wire sizes, MoE with the first dense layers kept), transformers' defaults, and the errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "harness/model/hf_config.hpp"
#include "kernels/attention/mla_dims.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;
using nlohmann::json;

namespace {

json shipped_json(const std::string& name) {
  const ShippedModel* m = find_shipped_model(name);
  EXPECT_NE(m, nullptr) << name;
  return m ? json::parse(m->text) : json::object();
}

std::string error_of(const json& j) {
  try {
    (void)parse_hf_config(j.dump(), "models/x.json", "x");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(HfAttentionFamilies, GptOssLayerKindsWindowSinksAndExperts) {
  for (const auto& [name, layers, experts] : {std::tuple{"gpt-oss-120b", 36, 128}, std::tuple{"gpt-oss-20b", 24, 32}}) {
    SCOPED_TRACE(name);
    const HfModel m = shipped_model(name);
    EXPECT_EQ(m.model_type, "gpt_oss");
    EXPECT_EQ(m.mixers, std::string(static_cast<size_t>(layers), 'A'));
    EXPECT_EQ(m.hidden, 2880);
    EXPECT_EQ(m.heads, 64);
    EXPECT_EQ(m.kv_heads, 8);
    EXPECT_EQ(m.head_dim, 64);  // not hidden / heads (45)
    EXPECT_EQ(m.sliding_window, 128);
    ASSERT_EQ(static_cast<int>(m.sliding.size()), layers);
    for (int i = 0; i < layers; ++i) EXPECT_EQ(m.sliding[static_cast<size_t>(i)], i % 2 == 0) << "layer " << i;
    EXPECT_EQ(m.sliding_layers(), layers / 2);
    EXPECT_EQ(m.attention.sinks, 1);
    EXPECT_FALSE(m.attention.is_mla());
    EXPECT_EQ(m.experts, experts);
    EXPECT_EQ(m.experts_per_token, 4);
    EXPECT_EQ(m.moe_layers, layers);
    EXPECT_EQ(m.ffn, 2880);
    EXPECT_EQ(m.rope_theta, 150000);
  }
  // transformers' defaults: no layer_types -> even layers sliding; no sliding_window -> 128.
  json j = shipped_json("gpt-oss-20b");
  j.erase("layer_types");
  j.erase("sliding_window");
  j["num_hidden_layers"] = 5;
  const HfModel d = parse_hf_config(j.dump(), "x.json", "x");
  EXPECT_EQ(d.sliding, (std::vector<bool>{true, false, true, false, true}));
  EXPECT_EQ(d.sliding_window, 128);
  j.erase("num_local_experts");
  EXPECT_NE(error_of(j).find("models/x.json: num_local_experts: missing"), std::string::npos) << error_of(j);
}

TEST(HfAttentionFamilies, DeepSeekV3MlaDimsWireSizesAndDenseLayers) {
  const HfModel m = shipped_model("deepseek-v3");
  EXPECT_EQ(m.model_type, "deepseek_v3");
  EXPECT_EQ(m.mixers, std::string(61, 'A'));
  EXPECT_EQ(m.heads, 128);
  EXPECT_EQ(m.kv_heads, 128);
  ASSERT_TRUE(m.attention.is_mla());
  EXPECT_EQ(m.attention.mla, (MlaDims{512, 64, 128, 128}));
  EXPECT_EQ(m.head_dim, 192);  // 128 + 64, q and k
  EXPECT_EQ(m.q_lora_rank, 1536);
  // Hand-worked: 128 heads x (192 for K + 128 for V) = 40 960 values per token expanded, 512 + 64 = 576 latent.
  EXPECT_EQ(mla_expanded_elements_per_token(m.attention.mla, m.heads), 40960);
  EXPECT_EQ(mla_latent_elements_per_token(m.attention.mla), 576);
  EXPECT_EQ(m.sliding_layers(), 0);
  EXPECT_EQ(m.attention.sinks, 0);
  EXPECT_EQ(m.moe_layers, 58);  // 61 - first_k_dense_replace 3
  EXPECT_EQ(m.mlp_layers, 61);
  EXPECT_EQ(m.experts, 256);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.shared_experts, 1);
  EXPECT_EQ(m.ffn, 2048);
  EXPECT_EQ(m.rope_theta, 10000);
  // A head_dim field is not MLA's q/k dim (transformers sets it to qk_rope_head_dim): not read.
  json j = shipped_json("deepseek-v3");
  j["head_dim"] = 64;
  EXPECT_EQ(parse_hf_config(j.dump(), "x.json", "x").head_dim, 192);
  j["moe_layer_freq"] = 2;  // MoE on layers 4, 6, ..., 60 (>= 3 and even): 29
  EXPECT_EQ(parse_hf_config(j.dump(), "x.json", "x").moe_layers, 29);
}

TEST(HfAttentionFamilies, KimiK2IsDeepSeekV3WithItsOwnNumbers) {
  const HfModel m = shipped_model("kimi-k2");
  EXPECT_EQ(m.model_type, "kimi_k2");
  EXPECT_EQ(m.heads, 64);
  EXPECT_EQ(m.attention.mla, (MlaDims{512, 64, 128, 128}));
  // 64 x 320 = 20 480 expanded vs 576 latent: 35.6x (DeepSeek-V3 71.1x).
  EXPECT_EQ(mla_expanded_elements_per_token(m.attention.mla, m.heads), 20480);
  EXPECT_NEAR(20480.0 / mla_latent_elements_per_token(m.attention.mla), 35.56, 0.01);
  EXPECT_EQ(m.moe_layers, 60);  // first_k_dense_replace 1
  EXPECT_EQ(m.experts, 384);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.shared_experts, 1);
  EXPECT_EQ(m.vocab, 163840);
  EXPECT_EQ(m.rope_theta, 50000);
}

TEST(HfAttentionFamilies, MlaErrorsNameTheFileAndTheField) {
  json j = shipped_json("kimi-k2");
  j.erase("kv_lora_rank");
  EXPECT_NE(error_of(j).find("models/x.json: kv_lora_rank: missing (model_type kimi_k2 needs it)"), std::string::npos)
      << error_of(j);
  j = shipped_json("deepseek-v3");
  j["num_key_value_heads"] = 8;
  EXPECT_NE(error_of(j).find("models/x.json: num_key_value_heads: 8 is not num_attention_heads 128"), std::string::npos)
      << error_of(j);
  j = shipped_json("deepseek-v3");
  j["qk_rope_head_dim"] = 63;
  EXPECT_NE(error_of(j).find("qk_rope_head_dim: expected an even number"), std::string::npos) << error_of(j);
  j["model_type"] = "deepseek_v4";
  for (const char* known : {"gpt_oss", "deepseek_v3", "kimi_k2"})
    EXPECT_NE(error_of(j).find(known), std::string::npos) << error_of(j);
}

}  // namespace
