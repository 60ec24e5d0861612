// `cpbench plan` on every shipped model (scenarios/models/*.json, listed from the source tree so a new
// model is planned here the day it lands), through the real CLI, its JSON read back (issue 39, item 2: a
// planner path no test reaches is a path a bug can hide in). For each model, a training step and a
// forward pass at W = 2 and 8: the model's layer counts are its config's, every case is priced, a step
// is its attention and linear-mixer parts, and the linear mixers' (Mamba or GDN) bytes of a training step
// are twice the forward's (the backward sends what the forward sent) while their FLOPs are the forward's
// in both and their compute three times the forward's; models with sliding or MLA layers are planned per
// layer kind too.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR

using nlohmann::json;

namespace {

json plan_json(const std::string& model, const std::string& pass, int* status) {
  const std::string cmd = std::string(CPBENCH_EXE) + " plan --model " + model +
                          " --seq-len 16384 --cp 2,8 --format json --pass " + pass + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  if (pipe) {
    char buf[65536];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
    const int st = pclose(pipe);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  return json::parse(out, nullptr, false);
}

using Key = std::tuple<std::string, std::string, int64_t, std::string>;  // sharder, transport, cp, ssm strategy

Key key_of(const json& c) {
  return {c.at("sharder").get<std::string>(),
          c.at("transport").get<std::string>() + (c.contains("ulysses") ? std::to_string(c["ulysses"].get<int64_t>()) : ""),
          c.at("cp").get<int64_t>(), c.contains("ssm") ? c["ssm"]["strategy"].get<std::string>() : ""};
}

}  // namespace

TEST(PlanShippedModels, EveryShippedModelIsPlannedThroughTheCliAndItsJsonHolds) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(CPBENCH_SOURCE_DIR) / "scenarios/models"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 10u);
  for (const auto& f : files) {
    const std::string name = f.stem().string();
    SCOPED_TRACE(name);
    std::ifstream in(f);
    const json config = json::parse(in);
    int st_train = -1, st_fwd = -1;
    const json train = plan_json(name, "train", &st_train);
    const json fwd = plan_json(name, "forward", &st_fwd);
    ASSERT_EQ(st_train, 0);
    ASSERT_EQ(st_fwd, 0);
    ASSERT_FALSE(train.is_discarded());
    ASSERT_FALSE(fwd.is_discarded());
    // The model as its config says (Qwen3.5 wraps its sizes in text_config).
    const json& text = config.contains("text_config") ? config["text_config"] : config;
    // Nemotron-H's pattern lists its MLP layers too ('-'): the planner counts the mixer layers.
    int64_t layers = text.at("num_hidden_layers").get<int64_t>();
    if (text.contains("hybrid_override_pattern")) {
      const std::string pattern = text["hybrid_override_pattern"].get<std::string>();
      layers = static_cast<int64_t>(std::count_if(pattern.begin(), pattern.end(), [](char ch) { return ch != '-'; }));
    }
    EXPECT_EQ(train["model"]["layers"].get<int64_t>(), layers);
    EXPECT_EQ(train["model"]["hidden"].get<int64_t>(), text.at("hidden_size").get<int64_t>());
    const std::string mixers = train["model"].value("mixers", std::string());
    const bool gdn = mixers.find('G') != std::string::npos, mamba = mixers.find('M') != std::string::npos;
    const bool kda = mixers.find('K') != std::string::npos;
    ASSERT_FALSE(train["cases"].empty());
    EXPECT_EQ(train["cases"].size(), fwd["cases"].size());
    EXPECT_FALSE(train["recommendation"]["sharder"].get<std::string>().empty());
    std::map<Key, json> forward_cases;
    for (const auto& c : fwd["cases"]) forward_cases[key_of(c)] = c;
    std::map<int64_t, int> per_cp;
    for (const auto& c : train["cases"]) {
      const int64_t W = c["cp"].get<int64_t>();
      ++per_cp[W];
      SCOPED_TRACE(c["sharder"].get<std::string>() + "/" + c["transport"].get<std::string>() + " cp " + std::to_string(W));
      const double step = c["predicted_step_s"].get<double>();
      EXPECT_GT(step, 0);
      EXPECT_GT(c["efficiency"].get<double>(), 0);
      ASSERT_EQ(c.contains("ssm"), gdn || mamba || kda);
      const double linear_step = c.contains("ssm") ? c["ssm"]["step_s"].get<double>() : 0.0;
      EXPECT_NEAR(step, c["attention_step_s"].get<double>() + linear_step, 1e-9 * step);
      const auto it = forward_cases.find(key_of(c));
      ASSERT_NE(it, forward_cases.end()) << "no forward case";
      if (!c.contains("ssm")) continue;
      const json& s = c["ssm"];
      const json& f = it->second["ssm"];
      EXPECT_EQ(s["mixer"].get<std::string>(), gdn ? "GDN" : kda ? "KDA" : "SSM");
      EXPECT_GT(s["flops_per_rank"].get<double>(), 0);
      EXPECT_EQ(s["bytes_per_rank"].get<int64_t>(), 2 * f["bytes_per_rank"].get<int64_t>()) << s["strategy"];
      if (W > 1) {
        EXPECT_GT(f["bytes_per_rank"].get<int64_t>(), 0) << s["strategy"];
      }
      EXPECT_NEAR(s["flops_per_rank"].get<double>(), f["flops_per_rank"].get<double>(), 1e-12 * s["flops_per_rank"].get<double>());
      EXPECT_NEAR(s["compute_s"].get<double>(), 3 * f["compute_s"].get<double>(), 1e-9 * s["compute_s"].get<double>());
    }
    EXPECT_GT(per_cp[2], 0) << "no case at cp 2";
    EXPECT_GT(per_cp[8], 0) << "no case at cp 8";
    // Per attention layer kind (harness/planner/layer_kinds.hpp): an MLA model (DeepSeek-V3, Kimi K2; Kimi
    // Linear's MLA is read as plain attention) gets a wire, a model with sliding layers its sliding and
    // full kinds, at each W; the others have no per-kind section.
    // A DSA model (index_n_heads: DeepSeek-V3.2, GLM-5) plans as DSA, its stages in every case
    // (harness/planner/dsa_stages.hpp), not as MLA on a wire.
    const bool dsa = text.contains("index_n_heads");
    const bool mla = text.contains("kv_lora_rank") && text.at("model_type") != "kimi_linear" && !dsa;
    if (dsa)
      for (const auto& c : train["cases"]) EXPECT_TRUE(c.contains("dsa")) << c.dump().substr(0, 200);
    bool sliding = false;
    if (text.contains("layer_types"))
      for (const auto& t : text["layer_types"]) sliding = sliding || t == "sliding_attention";
    ASSERT_EQ(train.contains("per_kind"), mla || sliding);
    if (!train.contains("per_kind")) continue;
    std::map<int64_t, std::set<std::string>> kinds;
    for (const auto& k : train["per_kind"]) {
      kinds[k["cp"].get<int64_t>()].insert(k["kind"].get<std::string>());
      EXPECT_GT(k["predicted_step_s"].get<double>(), 0);
      EXPECT_FALSE(k["why"].get<std::string>().empty());
      if (mla) {
        const std::string wire = k["wire"].get<std::string>();
        EXPECT_TRUE(wire == "expanded" || wire == "latent") << wire;
      }
    }
    const std::set<std::string> want = mla ? std::set<std::string>{"mla"}
                                           : std::set<std::string>{"sliding_attention", "full_attention"};
    EXPECT_EQ(kinds[2], want);
    EXPECT_EQ(kinds[8], want);
  }
}
