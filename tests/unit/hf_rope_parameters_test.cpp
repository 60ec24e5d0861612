// rope_theta where transformers 5 writes it (harness/model/hf_attention_families.hpp, the DeepSeek-V3 / Kimi K2
// reader): transformers 5 moves rope_theta and rope_scaling into one `rope_parameters` object, so a config saved
// by it has no top-level rope_theta. Kimi K2's published theta is 50 000 (moonshotai/Kimi-K2-Instruct's
// config.json); transformers' default, which a reader of the top level alone falls back to, is 10 000.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "harness/model/hf_config.hpp"

using namespace cpbench;
using nlohmann::json;

namespace {

// The shipped config as transformers 5 saves it: rope_scaling's fields and rope_theta under rope_parameters.
json transformers5(const std::string& name) {
  const ShippedModel* m = find_shipped_model(name);
  EXPECT_NE(m, nullptr) << name;
  json j = m ? json::parse(m->text) : json::object();
  json rp = j.value("rope_scaling", json::object());
  rp["rope_type"] = rp.value("type", "default");
  rp.erase("type");
  rp["rope_theta"] = j.at("rope_theta");
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = rp;
  return j;
}

TEST(HfRopeParameters, KimiK2sThetaIsReadFromRopeParameters) {
  const json j = transformers5("kimi-k2");
  ASSERT_FALSE(j.contains("rope_theta"));
  EXPECT_EQ(parse_hf_config(j.dump(), "models/kimi-k2.json", "kimi-k2").rope_theta, 50000);
}

TEST(HfRopeParameters, DeepSeekV3ReadsAThetaThatIsNotTheDefault) {
  // DeepSeek-V3's own theta is the default, 10 000: a fine-tune's 25 000 in rope_parameters tells the two apart.
  json j = transformers5("deepseek-v3");
  j["rope_parameters"]["rope_theta"] = 25000;
  EXPECT_EQ(parse_hf_config(j.dump(), "models/x.json", "x").rope_theta, 25000);
  // The top level (transformers 4) still reads.
  json old = json::parse(find_shipped_model("deepseek-v3")->text);
  old["rope_theta"] = 30000;
  EXPECT_EQ(parse_hf_config(old.dump(), "models/x.json", "x").rope_theta, 30000);
}

}  // namespace
