// The shipped configs of the models the whole-step plan is checked on (issue 50: GLM-4.5-Air, Llama 3.1
// 405B, Llama 2 7B, Qwen3-4B; Llama 3.1 8B is the shipped llama3-8b): each file's dimensions against the
// published config.json, and the parameter counts those dimensions give, counted here by hand (weights
// of the linear layers and embeddings; norms and biases, < 0.01 %, left out) against the counts the
// model cards publish. glm4_moe is read by harness/model/hf_attention_families.cpp (read_glm4_moe).
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/model/hf_config.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;

namespace {

// Parameters of the model as the file describes it, counted from its fields. `active`: the experts one
// token runs (top-k routed + shared) instead of all of them; `embeddings`: with the input embedding and
// the LM head (one matrix when tied).
double params(const HfModel& m, bool active, bool embeddings = true) {
  const double h = static_cast<double>(m.hidden);
  const double q = static_cast<double>(m.heads * m.head_dim), kv = static_cast<double>(m.kv_heads * m.head_dim);
  const double attention = static_cast<double>(m.attention_layers()) * (h * q + 2 * h * kv + q * h);
  const double dense_mlp = static_cast<double>(m.mlp_layers - m.moe_layers) * 3 * h * static_cast<double>(m.dense_ffn);
  const double experts_run =
      static_cast<double>(active ? m.experts_per_token : m.experts) + static_cast<double>(m.shared_experts);
  const double moe = static_cast<double>(m.moe_layers) * (experts_run * 3 * h * static_cast<double>(m.ffn) +
                                                          static_cast<double>(m.experts) * h /* router */);
  const double embed = static_cast<double>(m.vocab) * h * (m.tied_embeddings ? 1 : 2);
  return attention + dense_mlp + moe + (embeddings ? embed : 0);
}

}  // namespace

// zai-org/GLM-4.5-Air config.json; model card: 106B total, 12B active parameters.
TEST(PublishedModels, Glm45AirDimensionsAndParameters) {
  const HfModel m = shipped_model("glm-4.5-air");
  EXPECT_EQ(m.model_type, "glm4_moe");
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.vocab, 151552);
  EXPECT_EQ(m.blocks, 46);
  EXPECT_EQ(m.mixers, std::string(46, 'A'));  // the MTP module is not a layer of the trained model
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_EQ(m.heads, 96);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);  // given: hidden / heads would be 42
  EXPECT_DOUBLE_EQ(m.partial_rotary_factor, 0.5);
  EXPECT_DOUBLE_EQ(m.rope_theta, 1000000);
  EXPECT_EQ(m.sliding_layers(), 0);
  EXPECT_EQ(m.mlp_layers, 46);
  EXPECT_EQ(m.moe_layers, 45);  // first_k_dense_replace = 1
  EXPECT_EQ(m.experts, 128);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.shared_experts, 1);
  EXPECT_EQ(m.ffn, 1408);
  EXPECT_EQ(m.dense_ffn, 10944);
  EXPECT_FALSE(m.tied_embeddings);
  // By hand: embeddings 2 x 151552 x 4096 = 1.2415e9; attention 46 x (2 x 4096 x 12288 + 2 x 4096 x 1024)
  // = 5.0164e9; layer 0's MLP 3 x 4096 x 10944 = 0.1345e9; 45 MoE layers x (129 experts x 3 x 4096 x
  // 1408 + router 128 x 4096) = 100.4588e9. Total 106.851e9; active (8 routed + 1 shared) without the
  // embeddings 12.182e9, with them 13.423e9.
  EXPECT_NEAR(params(m, false) / 1e9, 106.851, 0.001);
  EXPECT_NEAR(params(m, true, false) / 1e9, 12.182, 0.001);
  EXPECT_NEAR(params(m, true) / 1e9, 13.423, 0.001);
  EXPECT_NEAR(params(m, false) / 106e9, 1.0, 0.01);       // the card's 106B
  EXPECT_NEAR(params(m, true, false) / 12e9, 1.0, 0.02);  // the card's 12B active (no embeddings)
}

// meta-llama/Llama-3.1-405B config.json: 405B.
TEST(PublishedModels, Llama31405BDimensionsAndParameters) {
  const HfModel m = shipped_model("llama3-405b");
  EXPECT_EQ(m.model_type, "llama");
  EXPECT_EQ(m.hidden, 16384);
  EXPECT_EQ(m.blocks, 126);
  EXPECT_EQ(m.heads, 128);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.ffn, 53248);
  EXPECT_EQ(m.dense_ffn, 53248);
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_EQ(m.moe_layers, 0);
  EXPECT_FALSE(m.tied_embeddings);
  // 2 x 128256 x 16384 + 126 x (2 x 16384^2 + 2 x 16384 x 1024 + 3 x 16384 x 53248) = 405.849e9
  EXPECT_NEAR(params(m, false) / 1e9, 405.849, 0.001);
  EXPECT_NEAR(params(m, false) / 405e9, 1.0, 0.01);
}

// meta-llama/Llama-2-7b-hf config.json: 6.74B (the "7B").
TEST(PublishedModels, Llama27BDimensionsAndParameters) {
  const HfModel m = shipped_model("llama2-7b");
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.blocks, 32);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 32);  // multi-head attention: no GQA
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.ffn, 11008);
  EXPECT_EQ(m.vocab, 32000);
  EXPECT_DOUBLE_EQ(m.rope_theta, 10000);  // not in the file: transformers' default
  EXPECT_FALSE(m.tied_embeddings);
  // 2 x 32000 x 4096 + 32 x (4 x 4096^2 + 3 x 4096 x 11008) = 6.738e9 (6.476e9 without embeddings)
  EXPECT_NEAR(params(m, false) / 1e9, 6.738, 0.001);
  EXPECT_NEAR(params(m, false, false) / 1e9, 6.476, 0.001);
}

// Qwen/Qwen3-4B config.json; model card: 4.0B parameters, 3.6B without embeddings (tied LM head).
TEST(PublishedModels, Qwen34BDimensionsAndParameters) {
  const HfModel m = shipped_model("qwen3-4b");
  EXPECT_EQ(m.model_type, "qwen3");
  EXPECT_EQ(m.hidden, 2560);
  EXPECT_EQ(m.blocks, 36);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);  // given: q is 4096 wide on a 2560 hidden
  EXPECT_EQ(m.ffn, 9728);
  EXPECT_EQ(m.vocab, 151936);
  EXPECT_EQ(m.sliding_layers(), 0);
  EXPECT_TRUE(m.tied_embeddings);
  // 151936 x 2560 (once: tied) + 36 x (2 x 2560 x 4096 + 2 x 2560 x 1024 + 3 x 2560 x 9728) = 4.022e9
  EXPECT_NEAR(params(m, false) / 1e9, 4.022, 0.001);
  EXPECT_NEAR(params(m, false, false) / 1e9, 3.633, 0.001);
}

// The torchtitan rows' "Llama 3.1 8B" is the shipped llama3-8b (meta-llama/Llama-3.1-8B): the same
// dimensions as torchtitan's llama3 8B flavor (dim 4096, 32 layers, 32 / 8 heads, ffn 14336, vocab 128256).
TEST(PublishedModels, Llama318BIsTheShippedLlama3_8b) {
  const HfModel m = shipped_model("llama3-8b");
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.blocks, 32);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.ffn, 14336);
  EXPECT_EQ(m.vocab, 128256);
  // 8.030e9; torchtitan's FLOP count excludes only the input embedding: 7.505e9
  EXPECT_NEAR(params(m, false) / 1e9, 8.030, 0.001);
  EXPECT_NEAR((params(m, false) - static_cast<double>(m.vocab * m.hidden)) / 1e9, 7.505, 0.001);
}

// glm4_moe's defaults and its errors: one line naming the file and the field.
TEST(PublishedModels, Glm4MoeDefaultsAndErrors) {
  nlohmann::json j = nlohmann::json::parse(find_shipped_model("glm-4.5-air")->text);
  j.erase("partial_rotary_factor");
  j.erase("first_k_dense_replace");
  j.erase("n_shared_experts");
  HfModel m = parse_hf_config(j.dump(), "models/glm.json", "glm");
  EXPECT_DOUBLE_EQ(m.partial_rotary_factor, 0.5);  // transformers' Glm4MoeConfig default
  EXPECT_EQ(m.moe_layers, 45);                     // first_k_dense_replace defaults to 1
  EXPECT_EQ(m.shared_experts, 1);
  j["rope_parameters"] = {{"rope_theta", 500000}, {"partial_rotary_factor", 0.25}};
  j.erase("rope_theta");
  m = parse_hf_config(j.dump(), "models/glm.json", "glm");
  EXPECT_DOUBLE_EQ(m.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000);
  j["first_k_dense_replace"] = 46;
  EXPECT_EQ(parse_hf_config(j.dump(), "g.json", "g").moe_layers, 0);
  EXPECT_EQ(parse_hf_config(j.dump(), "g.json", "g").dense_ffn, 10944);
  const auto error_of = [](const nlohmann::json& bad) -> std::string {
    try {
      (void)parse_hf_config(bad.dump(), "models/glm.json", "glm");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  nlohmann::json bad = j;
  bad["first_k_dense_replace"] = 47;
  EXPECT_NE(error_of(bad).find("models/glm.json: first_k_dense_replace: 47 is more than num_hidden_layers 46"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["num_experts_per_tok"] = 129;
  bad["first_k_dense_replace"] = 1;
  EXPECT_NE(error_of(bad).find("num_experts_per_tok: 129 is more than n_routed_experts 128"), std::string::npos)
      << error_of(bad);
  bad = j;
  bad["partial_rotary_factor"] = 1.5;
  EXPECT_NE(error_of(bad).find("partial_rotary_factor: expected a fraction in (0, 1]"), std::string::npos)
      << error_of(bad);
  bad = j;
  bad.erase("moe_intermediate_size");
  bad["first_k_dense_replace"] = 1;
  EXPECT_NE(error_of(bad).find("moe_intermediate_size: missing"), std::string::npos) << error_of(bad);
}
