// Models from their Hugging Face config.json (harness/model/hf_config.hpp): every family's fields, the
// shipped configs' published dimensions, overrides that shrink a real model keeping its ratios and its
// layer pattern, a scenario's model.config, the planner's --model PATH, and one line naming the file
// and the field for every error (exit 2 from the CLI).
#include "harness/model/hf_config.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/cli/plan_command.hpp"
#include "harness/runner/scenario.hpp"
#include "sharders/core/check.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR

using namespace cpbench;
using nlohmann::json;

namespace {

std::string source_path(const std::string& relative) { return std::string(CPBENCH_SOURCE_DIR) + "/" + relative; }

json shipped_json(const std::string& name) {
  const ShippedModel* m = find_shipped_model(name);
  EXPECT_NE(m, nullptr) << name;
  return m ? json::parse(m->text) : json::object();
}

// What parsing `j` throws ("" when it parses).
std::string error_of(const json& j, const std::string& file = "models/x.json") {
  try {
    (void)parse_hf_config(j.dump(), file, "x");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string temp_file(const std::string& stem, const std::string& text) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / (stem + "_" + std::to_string(getpid()) + ".json"))
          .lexically_normal()
          .string();
  std::ofstream(path) << text;
  return path;
}

struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_cpbench(const std::string& args, const std::string& redirect = " 2>&1") {
  CommandResult res;
  FILE* pipe = popen((std::string(CPBENCH_EXE) + " " + args + redirect).c_str(), "r");
  if (!pipe) return res;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) res.output.append(buf, n);
  const int st = pclose(pipe);
  res.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return res;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The families and the shipped configs (the published dimensions)
// ---------------------------------------------------------------------------------------------------

TEST(HfConfig, ShippedConfigsAreTheFilesInScenariosModels) {
  const std::vector<std::string> names = shipped_model_names();
  for (const char* n : {"llama3-8b", "llama3-70b", "qwen2.5-7b", "qwen3-8b", "mistral-7b", "nemotron-h-8b",
                        "jamba-1.5-mini", "mamba2-2.7b"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  for (const auto& m : shipped_models()) {
    // Compiled in from the file: the same text, and it parses.
    std::ifstream in(source_path(m.path));
    ASSERT_TRUE(in.good()) << m.path;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, m.text) << m.path;
    EXPECT_NO_THROW((void)shipped_model(m.name)) << m.path;
    EXPECT_EQ(read_hf_config(source_path(m.path)).mixers, shipped_model(m.name).mixers) << m.path;
  }
}

TEST(HfConfig, LlamaQwenMistralAttentionFields) {
  const HfModel l = shipped_model("llama3-8b");
  EXPECT_EQ(l.model_type, "llama");
  EXPECT_EQ(std::vector<int64_t>({l.blocks, l.hidden, l.heads, l.kv_heads, l.head_dim, l.ffn, l.vocab}),
            std::vector<int64_t>({32, 4096, 32, 8, 128, 14336, 128256}));
  EXPECT_EQ(l.rope_theta, 500000.0);
  EXPECT_EQ(l.mixers, std::string(32, 'A'));
  EXPECT_EQ(l.layers_of('M'), 0);
  EXPECT_EQ(l.sliding_window, 0);
  EXPECT_EQ(l.mlp_layers, 32);

  const HfModel q = shipped_model("qwen2.5-7b");  // sliding_window 131072 but use_sliding_window false
  EXPECT_EQ(std::vector<int64_t>({q.blocks, q.hidden, q.heads, q.kv_heads, q.head_dim, q.ffn, q.vocab}),
            std::vector<int64_t>({28, 3584, 28, 4, 128, 18944, 152064}));
  EXPECT_EQ(q.sliding_window, 0);
  EXPECT_EQ(q.sliding_layers(), 0);

  const HfModel q3 = shipped_model("qwen3-8b");  // explicit head_dim, sliding_window null
  EXPECT_EQ(std::vector<int64_t>({q3.blocks, q3.heads, q3.kv_heads, q3.head_dim, q3.ffn}),
            std::vector<int64_t>({36, 32, 8, 128, 12288}));

  const HfModel mi = shipped_model("mistral-7b");  // every layer slides over 4096 tokens
  EXPECT_EQ(mi.sliding_window, 4096);
  EXPECT_EQ(mi.sliding_layers(), 32);

  // Qwen2 with use_sliding_window: the layers from max_window_layers on.
  json j = shipped_json("qwen2.5-7b");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 20;
  const HfModel qs = parse_hf_config(j.dump(), "q.json", "q");
  EXPECT_EQ(qs.sliding_window, 4096);
  EXPECT_EQ(qs.sliding_layers(), 8);
  EXPECT_FALSE(qs.sliding[19]);
  EXPECT_TRUE(qs.sliding[20]);
  // layer_types, when given, says it per layer.
  json t = shipped_json("qwen3-8b");
  t["sliding_window"] = 1024;
  t["layer_types"] = json::array();
  for (int i = 0; i < 36; ++i) t["layer_types"].push_back(i % 4 == 3 ? "full_attention" : "sliding_attention");
  const HfModel ts = parse_hf_config(t.dump(), "t.json", "t");
  EXPECT_EQ(ts.sliding_layers(), 27);
  EXPECT_TRUE(ts.sliding[0]);
  EXPECT_FALSE(ts.sliding[3]);
  // A head_dim that is not hidden / heads is kept as given (Qwen3's smaller models).
  t["head_dim"] = 256;
  EXPECT_EQ(parse_hf_config(t.dump(), "t.json", "t").head_dim, 256);
  // No num_key_value_heads: as many as the query heads (transformers' default).
  json mh = shipped_json("llama3-8b");
  mh.erase("num_key_value_heads");
  EXPECT_EQ(parse_hf_config(mh.dump(), "m.json", "m").kv_heads, 32);
}

TEST(HfConfig, NemotronHPatternAndMamba2Fields) {
  const HfModel n = shipped_model("nemotron-h-8b");
  EXPECT_EQ(n.model_type, "nemotron_h");
  EXPECT_EQ(n.blocks, 52);
  // M-M-M-M*-M-M-M-M-M*-...: 24 Mamba, 4 attention, 24 MLP blocks; mixers in order.
  EXPECT_EQ(n.mixers, "MMMMAMMMMMAMMMMMAMMMMMAMMMMM");
  EXPECT_EQ(n.attention_layers(), 4);
  EXPECT_EQ(n.layers_of('M'), 24);
  EXPECT_EQ(n.mlp_layers, 24);
  EXPECT_EQ(std::vector<int64_t>({n.hidden, n.heads, n.kv_heads, n.head_dim, n.ffn, n.vocab}),
            std::vector<int64_t>({4096, 32, 8, 128, 21504, 131072}));  // head_dim from attention_head_dim
  EXPECT_EQ(std::vector<int64_t>({n.ssm.heads, n.ssm.head_dim, n.ssm.state, n.ssm.groups, n.ssm.conv, n.ssm.chunk}),
            std::vector<int64_t>({128, 64, 128, 8, 4, 128}));
  EXPECT_EQ(n.ssm.d_inner(), 2 * n.hidden);  // expand 2
  EXPECT_EQ(n.ssm.kind, "mamba2");

  const HfModel m = shipped_model("mamba2-2.7b");
  EXPECT_EQ(m.mixers, std::string(64, 'M'));
  EXPECT_EQ(m.attention_layers(), 0);
  EXPECT_EQ(m.mlp_layers, 0);
  EXPECT_EQ(std::vector<int64_t>({m.hidden, m.ssm.heads, m.ssm.head_dim, m.ssm.state, m.ssm.groups, m.ssm.conv,
                                  m.ssm.chunk, m.vocab}),
            std::vector<int64_t>({2560, 80, 64, 128, 1, 4, 256, 50288}));

  // An MoE entry (Nemotron-3 style E) counts as an MLP block and needs the expert fields.
  json e = shipped_json("nemotron-h-8b");
  std::string pattern = e["hybrid_override_pattern"];
  pattern[1] = 'E';
  e["hybrid_override_pattern"] = pattern;
  EXPECT_NE(error_of(e).find("n_routed_experts: missing"), std::string::npos) << error_of(e);
  e["n_routed_experts"] = 64;
  e["num_experts_per_tok"] = 6;
  const HfModel me = parse_hf_config(e.dump(), "e.json", "e");
  EXPECT_EQ(me.moe_layers, 1);
  EXPECT_EQ(me.mlp_layers, 24);
}

TEST(HfConfig, JambaPeriodicAttentionAndMambaOneChannels) {
  const HfModel j = shipped_model("jamba-1.5-mini");
  EXPECT_EQ(j.model_type, "jamba");
  std::string expect;
  for (int i = 0; i < 32; ++i) expect += i % 8 == 4 ? 'A' : 'M';
  EXPECT_EQ(j.mixers, expect);
  EXPECT_EQ(j.attention_layers(), 4);
  EXPECT_EQ(j.moe_layers, 16);  // expert_layer_period 2, offset 1
  EXPECT_EQ(j.experts, 16);
  EXPECT_EQ(j.experts_per_token, 2);
  // Mamba-1: d_inner = expand x hidden channels, each its own head of dimension 1, one B/C group.
  EXPECT_EQ(std::vector<int64_t>({j.ssm.heads, j.ssm.head_dim, j.ssm.state, j.ssm.groups, j.ssm.conv}),
            std::vector<int64_t>({8192, 1, 16, 1, 4}));
  EXPECT_EQ(j.ssm.kind, "mamba1");
}

// ---------------------------------------------------------------------------------------------------
// Errors: one line naming the file and the field
// ---------------------------------------------------------------------------------------------------

TEST(HfConfig, EveryErrorNamesTheFileAndTheField) {
  struct Case {
    std::string what;
    json j;
    std::vector<std::string> says;
  };
  auto without = [](json j, const char* field) {
    j.erase(field);
    return j;
  };
  auto with = [](json j, const char* field, json v) {
    j[field] = std::move(v);
    return j;
  };
  const json llama = shipped_json("llama3-8b"), nemo = shipped_json("nemotron-h-8b");
  const json jamba = shipped_json("jamba-1.5-mini"), mamba = shipped_json("mamba2-2.7b");
  const std::vector<Case> cases = {
      {"unknown model_type", with(llama, "model_type", "gpt2"),
       {"models/x.json: model_type: 'gpt2' is not a model_type cpbench reads", "nemotron_h", "jamba", "mamba2"}},
      {"no model_type", without(llama, "model_type"), {"models/x.json: model_type: missing"}},
      {"llama heads", without(llama, "num_attention_heads"),
       {"models/x.json: num_attention_heads: missing (model_type llama needs it)"}},
      {"llama ffn", without(llama, "intermediate_size"), {"models/x.json: intermediate_size: missing"}},
      {"hidden as a string", with(llama, "hidden_size", "4096"),
       {"models/x.json: hidden_size: expected an integer >= 1, got \"4096\""}},
      {"kv heads", with(llama, "num_key_value_heads", 5), {"num_key_value_heads: 5 does not divide"}},
      {"vocab", without(llama, "vocab_size"), {"models/x.json: vocab_size: missing"}},
      {"nemotron pattern", without(nemo, "hybrid_override_pattern"),
       {"models/x.json: hybrid_override_pattern: missing (model_type nemotron_h needs it)"}},
      {"nemotron pattern length", with(nemo, "num_hidden_layers", 40),
       {"hybrid_override_pattern: has 52 entries, num_hidden_layers is 40"}},
      {"nemotron pattern letter", with(nemo, "hybrid_override_pattern", std::string(51, 'M') + "X"),
       {"hybrid_override_pattern: entry 51 is 'X'"}},
      {"nemotron mamba heads", without(nemo, "mamba_num_heads"), {"models/x.json: mamba_num_heads: missing"}},
      {"nemotron state", without(nemo, "ssm_state_size"), {"models/x.json: ssm_state_size: missing"}},
      {"nemotron groups", without(nemo, "n_groups"), {"models/x.json: n_groups: missing"}},
      {"nemotron conv", without(nemo, "conv_kernel"), {"models/x.json: conv_kernel: missing"}},
      {"nemotron head dim", without(nemo, "mamba_head_dim"), {"models/x.json: mamba_head_dim: missing"}},
      {"jamba period", without(jamba, "attn_layer_period"), {"models/x.json: attn_layer_period: missing"}},
      {"jamba offset", with(jamba, "attn_layer_offset", 9), {"attn_layer_offset: 9 is not below attn_layer_period 8"}},
      {"jamba state", without(jamba, "mamba_d_state"), {"models/x.json: mamba_d_state: missing"}},
      {"mamba2 state", without(mamba, "state_size"), {"models/x.json: state_size: missing (model_type mamba2"}},
      {"mamba2 groups", with(mamba, "n_groups", 3), {"n_groups: 3 does not divide the 80 SSM heads"}},
      {"sliding layers", with(with(shipped_json("qwen3-8b"), "layer_types", json::array({"full_attention"})),
                              "sliding_window", 10),
       {"layer_types: expected a list of 36 entries"}},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.j);
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << c.what << ": " << e;
    for (const auto& s : c.says) EXPECT_NE(e.find(s), std::string::npos) << c.what << " lacks '" << s << "': " << e;
  }
  // Not JSON, not an object, not readable.
  std::string e;
  try {
    (void)parse_hf_config("{\"model_type\": ", "bad.json", "bad");
  } catch (const UsageError& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("bad.json: not valid JSON"), std::string::npos) << e;
  EXPECT_NE(error_of(json::array()).find("expected a JSON object"), std::string::npos);
  EXPECT_THROW((void)read_hf_config("/nonexistent/config.json"), UsageError);
  EXPECT_THROW((void)shipped_model("llama9"), UsageError);
}

TEST(HfConfig, PlanCommandRefusesABadConfigWithExitTwo) {
  json j = shipped_json("llama3-8b");
  j["model_type"] = "gpt2";
  const std::string unknown = temp_file("cpbench_gpt2", j.dump());
  const CommandResult a = run_cpbench("plan --model " + unknown + " --seq-len 4096 --cp 8", " 2>&1 >/dev/null");
  EXPECT_EQ(a.status, 2) << a.output;
  EXPECT_EQ(std::count(a.output.begin(), a.output.end(), '\n'), 1) << a.output;
  EXPECT_NE(a.output.find(unknown + ": model_type: 'gpt2'"), std::string::npos) << a.output;
  json n = shipped_json("nemotron-h-8b");
  n.erase("ssm_state_size");
  const std::string missing = temp_file("cpbench_nemotron", n.dump());
  const CommandResult b = run_cpbench("plan --model " + missing + " --seq-len 4096 --cp 8", " 2>&1 >/dev/null");
  EXPECT_EQ(b.status, 2) << b.output;
  EXPECT_NE(b.output.find(missing + ": ssm_state_size: missing"), std::string::npos) << b.output;
  const CommandResult c = run_cpbench("plan --model /nonexistent/config.json --seq-len 4096 --cp 8", " 2>&1 >/dev/null");
  EXPECT_EQ(c.status, 2) << c.output;
  EXPECT_NE(c.output.find("/nonexistent/config.json: cannot read"), std::string::npos) << c.output;
  std::remove(unknown.c_str());
  std::remove(missing.c_str());
}

// ---------------------------------------------------------------------------------------------------
// Overrides: a real model shrunk, keeping its ratios and its layer pattern
// ---------------------------------------------------------------------------------------------------

// Patterns worked out by hand from the rule (hf_config.hpp resample_layer_pattern): kind i of c_i gets
// the largest-remainder rounding of n c_i / L (at least one), its k-th layer is its file layer
// floor((2k + 1) c_i / (2 a_i)), and the picks keep the file's order.
TEST(HfConfig, ResampledPatternsKeepTheShareOfAttentionLayers) {
  // Nemotron-H-8B's 28 mixers, A at 4, 10, 16, 22 (c = 4 of 28, M c = 24).
  // n = 4: A 1 (remainder 16 beats M's 12), its file layer floor(4 / 2) = 2 -> 16; M 3: M numbers 4, 12,
  // 20 -> layers 5, 14, 24 -> M M A M.
  EXPECT_EQ(resample_mixers("MMMMAMMMMMAMMMMMAMMMMMAMMMMM", 4), "MMAM");
  // n = 7: A 1 -> 16; M 6: numbers 2, 6, 10, 14, 18, 22 -> layers 2, 7, 12, 18, 23, 26.
  EXPECT_EQ(resample_mixers("MMMMAMMMMMAMMMMMAMMMMMAMMMMM", 7), "MMMAMMM");
  // n = 14: A 2: numbers 1, 3 -> layers 10, 22; M 12: numbers 1, 3, ..., 23 -> layers 1, 3, 6, 8, 11, 13,
  // 15, 18, 20, 23, 25, 27: the picks in file order put the A's 4th and 10th. (The previous rule placed
  // the a A's at floor((2k + 1) n / (2a)) = 3, 10 whatever the file; this one takes the file's own layers,
  // which keeps the file's phase: what gpt-oss's alternation needs, below.)
  EXPECT_EQ(resample_mixers("MMMMAMMMMMAMMMMMAMMMMMAMMMMM", 14), "MMMMAMMMMMAMMM");
  EXPECT_EQ(resample_mixers("MMMMAMMMMMAMMMMMAMMMMMAMMMMM", 28), "MMMMAMMMMMAMMMMMAMMMMMAMMMMM");
  std::string jamba;
  for (int i = 0; i < 32; ++i) jamba += i % 8 == 4 ? 'A' : 'M';
  // n = 8: A 1: number 2 -> layer 20; M 7: numbers 2, 6, 10, 14, 18, 22, 26 -> layers 2, 7, 11, 16, 21,
  // 25, 30 -> A 5th: Jamba's own period.
  EXPECT_EQ(resample_mixers(jamba, 8), "MMMMAMMM");
  // n = 2: A 0.25, M 1.75 -> M 2, A 0, then one A taken from M: A 20, M number 14 -> 16.
  EXPECT_EQ(resample_mixers(jamba, 2), "MA");
  EXPECT_EQ(resample_mixers(std::string(64, 'M'), 3), "MMM");
  EXPECT_EQ(resample_mixers(std::string(32, 'A'), 2), "AA");
  // Three mixer kinds, "MGMA" x 3 (M 6, G 3, A 3). n = 4: M 2 (numbers 1, 4 -> layers 2, 8), G 1 (number
  // 1 -> 5), A 1 (number 1 -> 7).
  EXPECT_EQ(resample_mixers("MGMAMGMAMGMA", 4), "MGAM");
  // n = 3: M 1.5, G 0.75, A 0.75: floors 1, 0, 0; the remainders 9, 9 of G and A beat M's 6 -> one each:
  // M number 3 -> 6, G 1 -> 5, A 1 -> 7.
  EXPECT_EQ(resample_mixers("MGMAMGMAMGMA", 3), "GMA");
  // Fewer layers than kinds: refused, naming the key, the counts and the least that keeps them.
  const auto refusal = [](const std::string& mixers, int64_t n) {
    try {
      (void)resample_mixers(mixers, n, "model.layers", "x's mixer layers");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal("MGMAMGMAMGMA", 2).find("model.layers: x's mixer layers resampled to 2 cannot keep each kind "
                                            "(6 mamba, 3 gdn, 3 attention); give at least 3"),
            std::string::npos)
      << refusal("MGMAMGMAMGMA", 2);
  // One layer of a hybrid: the previous rule kept the attention layer alone (an all-attention model that
  // passes for a hybrid); refused now.
  EXPECT_NE(refusal("MAM", 1).find("(2 mamba, 1 attention); give at least 2"), std::string::npos) << refusal("MAM", 1);
}

// gpt-oss-20b: 24 attention layers, sliding_attention and full_attention alternating from a sliding one.
// Its shrunk copies keep both kinds, half each, alternating from a sliding layer (the resampler that
// sampled the sliding layer number floor((2k + 1) A / (2a)) gave 4 or 12 full layers and no sliding one,
// and 2, 3 or 6 sliding ones and no full one: prime-rl #2828's failure inside the harness).
TEST(HfConfig, ShrunkGptOssKeepsItsSlidingAndFullLayers) {
  const auto flags = [](const HfModel& m) {
    std::string s;
    for (size_t i = 0; i < m.sliding.size(); ++i) s += m.mixers[i] == 'A' ? (m.sliding[i] ? 'S' : 'F') : 'M';
    return s;
  };
  const HfModel g = shipped_model("gpt-oss-20b");
  ASSERT_EQ(flags(g), "SFSFSFSFSFSFSFSFSFSFSFSF");
  ModelOverrides o;
  // n = 2: S and F 1 each; S number floor(12 / 2) = 6 -> layer 12, F number 6 -> layer 13.
  o.layers = 2;
  EXPECT_EQ(flags(with_overrides(g, o)), "SF");
  // n = 3: 1.5 each, the tie to S (seen first): S numbers 3, 9 -> layers 6, 18; F number 6 -> 13.
  o.layers = 3;
  EXPECT_EQ(flags(with_overrides(g, o)), "SFS");
  // n = 4: 2 each: S numbers 3, 9 -> 6, 18; F numbers 3, 9 -> 7, 19.
  o.layers = 4;
  EXPECT_EQ(flags(with_overrides(g, o)), "SFSF");
  EXPECT_EQ(with_overrides(g, o).sliding_window, 128);
  // n = 6: 3 each: numbers 2, 6, 10 -> S 4, 12, 20; F 5, 13, 21.
  o.layers = 6;
  EXPECT_EQ(flags(with_overrides(g, o)), "SFSFSF");
  // n = 12: 6 each: numbers 1, 3, ..., 11 -> S 2, 6, ..., 22; F 3, 7, ..., 23.
  o.layers = 12;
  EXPECT_EQ(flags(with_overrides(g, o)), "SFSFSFSFSFSF");
  // One layer cannot keep both kinds: refused naming the key and both counts.
  o.layers = 1;
  try {
    (void)with_overrides(g, o);
    ADD_FAILURE() << "1 layer of gpt-oss-20b was not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers: gpt-oss-20b's attention layers resampled to 1 cannot keep "
                                         "each kind (12 sliding_attention, 12 full_attention); give at least 2"),
              std::string::npos)
        << e.what();
  }
  // The planner's flag is named as such.
  o.key = "--";
  try {
    (void)with_overrides(g, o);
    ADD_FAILURE() << "--layers 1 of gpt-oss-20b was not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--layers: gpt-oss-20b's attention layers"), std::string::npos) << e.what();
  }
  // A scenario's model.config shrunk to 4 layers: its attention kinds are the layer_types the runner
  // runs (sliding, full, sliding, full, with the file's window and sinks), and a transport_sliding case
  // (refused on a model without sliding layers) parses.
  const ScenarioSpec s = parse_scenario(R"(
model: {config: gpt-oss-20b, layers: 4, hidden: 64, heads: 8, vocab: 256, ffn: 64}
batch: {seq_len: 300}
sweep: {sharder: contiguous, transport: ring, transport_sliding: ring_window, cp: 2, mask: causal}
)",
                                        "x.yaml");
  ASSERT_EQ(s.model.attention.layer_kinds.size(), 4u);
  EXPECT_EQ(s.model.attention.layer_kinds[0], AttentionKind::sliding);
  EXPECT_EQ(s.model.attention.layer_kinds[1], AttentionKind::full);
  EXPECT_EQ(s.model.attention.layer_kinds[2], AttentionKind::sliding);
  EXPECT_EQ(s.model.attention.layer_kinds[3], AttentionKind::full);
  EXPECT_EQ(s.model.attention.window, 128);
  ASSERT_EQ(s.cases.size(), 1u);
  EXPECT_EQ(s.cases[0].sliding_transport, "ring_window");
  try {
    (void)parse_scenario("model: {config: gpt-oss-20b, layers: 1, hidden: 64, heads: 8, vocab: 256, ffn: 64}\n",
                         "x.yaml");
    ADD_FAILURE() << "model.layers: 1 of gpt-oss-20b was not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("x.yaml: model.layers: gpt-oss-20b's attention layers resampled to 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(HfConfig, OverridesKeepHeadRatios) {
  const HfModel n = shipped_model("nemotron-h-8b");
  ModelOverrides o;
  o.layers = 4;
  o.hidden = 64;
  o.heads = 4;
  o.ssm_heads = 4;
  o.ssm_head_dim = 16;
  o.ssm_state = 8;
  const HfModel s = with_overrides(n, o);
  EXPECT_EQ(s.name, "nemotron-h-8b+custom");
  EXPECT_EQ(s.mixers, "MMAM");
  EXPECT_EQ(s.kv_heads, 1);      // 4 query heads per kv head, as the file
  EXPECT_EQ(s.head_dim, 16);     // hidden / heads
  EXPECT_EQ(s.ssm.groups, 1);    // 16 SSM heads per group in the file: at least one group
  EXPECT_EQ(s.ssm.conv, 4);      // not named: the file's
  EXPECT_EQ(s.vocab, 131072);
  EXPECT_EQ(s.mlp_layers, 3);    // 24 of 28 scaled to 4 mixers
  o.ssm_heads = 32;
  EXPECT_EQ(with_overrides(n, o).ssm.groups, 2);
  o.ssm_groups = 4;
  EXPECT_EQ(with_overrides(n, o).ssm.groups, 4);  // named: wins
  o = ModelOverrides{};
  o.heads = 16;
  EXPECT_EQ(with_overrides(shipped_model("llama3-8b"), o).kv_heads, 4);
  o.kv_heads = 16;
  EXPECT_EQ(with_overrides(shipped_model("llama3-8b"), o).kv_heads, 16);
  EXPECT_EQ(with_overrides(n, ModelOverrides{}).name, "nemotron-h-8b");  // nothing named: unchanged
  // Sliding flags follow the layers they sample.
  o = ModelOverrides{};
  o.layers = 4;
  const HfModel mi = with_overrides(shipped_model("mistral-7b"), o);
  EXPECT_EQ(mi.sliding_layers(), 4);
  EXPECT_EQ(mi.sliding_window, 4096);
}

// Per-layer attributes of a shrunk model whose layers differ, against patterns worked out by hand
// from the rule (hf_config.hpp with_overrides): the attention layers' sliding / full pattern resampled
// onto the new attention layers by resample_layer_pattern. A model where every layer is the same
// (mistral: all sliding) passes whatever layer is sampled; these do not.
TEST(HfConfig, ResampledSlidingFlagsAreTheLayersTheySample) {
  const auto flags = [](const HfModel& m) {
    std::string s;
    for (size_t i = 0; i < m.sliding.size(); ++i) s += m.mixers[i] == 'A' ? (m.sliding[i] ? 'S' : 'F') : 'M';
    return s;
  };
  // 36 attention layers, full every 4th (3, 7, 11, ...): "SSSF" x 9 (S 27, F 9; S number m is layer
  // 4 floor(m / 3) + m mod 3, F number m is layer 4m + 3).
  json t = shipped_json("qwen3-8b");
  t["sliding_window"] = 1024;
  t["layer_types"] = json::array();
  for (int i = 0; i < 36; ++i) t["layer_types"].push_back(i % 4 == 3 ? "full_attention" : "sliding_attention");
  const HfModel g = parse_hf_config(t.dump(), "t.json", "t");
  ModelOverrides o;
  // n = 6: S 4.5, F 1.5, the tie to S: S 5 (numbers 2, 8, 13, 18, 24 -> layers 2, 10, 17, 24, 32), F 1
  // (number 4 -> 19).
  o.layers = 6;
  EXPECT_EQ(flags(with_overrides(g, o)), "SSSFSS");
  // n = 4: S 3 (numbers 4, 13, 22 -> 5, 17, 29), F 1 (-> 19).
  o.layers = 4;
  EXPECT_EQ(flags(with_overrides(g, o)), "SSFS");
  // n = 9: S 6.75, F 2.25 -> S 7 (numbers 1, 5, 9, 13, 17, 21, 25 -> 1, 6, 12, 17, 22, 28, 33), F 2
  // (numbers 2, 6 -> 11, 27). (The previous rule: every one sliding.)
  o.layers = 9;
  EXPECT_EQ(flags(with_overrides(g, o)), "SSFSSSFSS");
  EXPECT_EQ(with_overrides(g, o).sliding_window, 1024);
  // n = 2: S 1.5, F 0.5 -> S 2, F 0, then one F from S: S number 13 -> 17, F number 4 -> 19.
  o.layers = 2;
  EXPECT_EQ(flags(with_overrides(g, o)), "SF");

  // A hybrid whose attention layers differ: Nemotron-H's 28 mixers (A at 4, 10, 16, 22), the 2nd and
  // 4th attention layers sliding ("FSFS"). n = 14 -> mixers "MMMMAMMMMMAMMM" (2 attention layers); the
  // attention kinds "FSFS" resampled to 2: F number 1 (attention layer 2), S number 1 (3) -> F S. (The
  // previous rule gave S S: no full layer left.)
  HfModel h = shipped_model("nemotron-h-8b");
  h.sliding.assign(h.mixers.size(), false);
  h.sliding[10] = h.sliding[22] = true;
  h.sliding_window = 512;
  o.layers = 14;
  EXPECT_EQ(flags(with_overrides(h, o)), "MMMMFMMMMMSMMM");
  EXPECT_EQ(with_overrides(h, o).sliding_window, 512);
  // n = 4 -> "MMAM": one attention layer cannot keep both kinds: refused.
  o.layers = 4;
  try {
    (void)with_overrides(h, o);
    ADD_FAILURE() << "one attention layer of a sliding / full hybrid was not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers: nemotron-h-8b's attention layers resampled to 1 cannot keep "
                                         "each kind (2 full_attention, 2 sliding_attention)"),
              std::string::npos)
        << e.what();
  }
  // Mixers given by hand: "AMAA" (a = 3): F 1.5, S 1.5, the tie to F (seen first): F numbers 0, 1
  // (attention layers 0, 2), S number 1 (3) -> F F S.
  o = ModelOverrides{};
  o.mixers = "AMAA";
  EXPECT_EQ(flags(with_overrides(h, o)), "FMFS");
  // A model without sliding layers keeps none, and no window.
  o = ModelOverrides{};
  o.layers = 4;
  EXPECT_EQ(flags(with_overrides(shipped_model("nemotron-h-8b"), o)), "MMFM");
  EXPECT_EQ(with_overrides(shipped_model("nemotron-h-8b"), o).sliding_window, 0);
}

TEST(HfConfig, ScenarioModelConfigShrinksARealModel) {
  const std::string yaml = R"(
model:
  config: )" + source_path("scenarios/models/nemotron-h-8b.json") +
                           R"(
  layers: 4
  hidden: 64
  heads: 4
  vocab: 256
  ffn: 128
  ssm: {heads: 4, head_dim: 16, state: 8}
batch: {seq_len: 64}
sweep: {sharder: load_balanced, transport: allgather, cp: [2, 4]}
)";
  const ScenarioSpec s = parse_scenario(yaml, "x.yaml");
  EXPECT_EQ(s.model.preset, "nemotron-h-8b+custom");
  EXPECT_EQ(s.model.mixers, "MMAM");
  EXPECT_EQ(s.model.layers, 4);
  EXPECT_EQ(s.model.heads, 4);
  EXPECT_EQ(s.model.kv_heads, 1);
  EXPECT_EQ(s.model.hidden, 64);
  EXPECT_EQ(s.model.vocab, 256);
  EXPECT_EQ(s.model.ssm.heads, 4);
  EXPECT_EQ(s.model.ssm.groups, 1);
  EXPECT_EQ(s.model.ssm.conv, 4);
  EXPECT_EQ(s.cases.size(), 2u);
  // A config path relative to the scenario file's folder, or a shipped model's name.
  const std::string rel = R"(
model: {config: models/nemotron-h-8b.json, layers: 4, hidden: 64, heads: 4, vocab: 256, ffn: 128,
        ssm: {heads: 4, head_dim: 16, state: 8}}
)";
  EXPECT_EQ(parse_scenario(rel, source_path("scenarios/x.yaml")).model.mixers, "MMAM");
  const std::string named = R"(
model: {config: llama3-8b, layers: 2, hidden: 64, heads: 8, vocab: 256, ffn: 128}
)";
  const ScenarioSpec l = parse_scenario(named, "x.yaml");
  EXPECT_EQ(l.model.kv_heads, 2);
  EXPECT_EQ(l.model.mixers, "AA");
  EXPECT_EQ(l.model.rope_theta, 500000.0);

  auto error_of = [](const std::string& y) {
    try {
      (void)parse_scenario(y, "scenarios/x.yaml");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("model: {preset: tiny, config: llama3-8b}").find("scenarios/x.yaml: model.config: give model.preset or model.config, not both"),
            std::string::npos);
  EXPECT_NE(error_of("model: {config: nowhere/config.json}").find("scenarios/x.yaml: model.config: cannot read 'nowhere/config.json'"),
            std::string::npos);
  // A head_dim the test model cannot derive (hidden / heads) is refused, naming the file; hidden and
  // heads given explicitly make it hidden / heads.
  const std::string bad = temp_file("cpbench_qwen3_small", [] {
    json q = shipped_json("qwen3-8b");
    q["hidden_size"] = 1024;
    q["num_attention_heads"] = 16;
    return q.dump();
  }());
  const std::string e = error_of("model: {config: " + bad + "}");
  EXPECT_NE(e.find("model.config: " + bad + ": head_dim 128 is not hidden_size / num_attention_heads = 64"),
            std::string::npos)
      << e;
  std::remove(bad.c_str());
  // Errors of the file itself keep naming the file and the field.
  json broken = shipped_json("jamba-1.5-mini");
  broken.erase("mamba_d_conv");
  const std::string jb = temp_file("cpbench_jamba", broken.dump());
  EXPECT_NE(error_of("model: {config: " + jb + "}").find(jb + ": mamba_d_conv: missing"), std::string::npos);
  std::remove(jb.c_str());
}

// docs/scenarios.md's model.config row names every model_type the reader takes and every shipped config
// (the CLI's help prints the same lists from known_model_types / shipped_model_names).
TEST(HfConfig, ScenariosDocListsEveryModelTypeAndShippedConfig) {
  std::ifstream in(source_path("docs/scenarios.md"));
  ASSERT_TRUE(in.good());
  std::string line, row;
  while (std::getline(in, line))
    if (line.starts_with("| `model.config`")) row = line;
  ASSERT_FALSE(row.empty()) << "docs/scenarios.md has no model.config row";
  for (const auto& t : known_model_types())
    EXPECT_NE(row.find("`" + t + "`"), std::string::npos) << "docs/scenarios.md model.config omits model_type " << t;
  for (const auto& n : shipped_model_names())
    EXPECT_NE(row.find("`" + n + "`"), std::string::npos) << "docs/scenarios.md model.config omits shipped " << n;
}
