#include "harness/runner/scenario_model.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "harness/model/hf_config.hpp"

namespace cpbench {

namespace {

// A model.config value: a path (relative to the scenario file's folder, then to the current folder)
// or a shipped model's name (scenarios/models/<name>.json, compiled in).
HfModel read_model_config(const yaml_read::Ctx& c, const std::string& value) {
  namespace fs = std::filesystem;
  const fs::path given(value);
  std::vector<fs::path> tried;
  if (given.is_relative()) tried.push_back(fs::path(c.file).parent_path() / given);
  tried.push_back(given);
  for (const auto& p : tried) {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) continue;
    try {
      return read_hf_config(p.lexically_normal().string());
    } catch (const UsageError& e) {
      c.fail("model.config", e.what());
    }
  }
  if (const ShippedModel* shipped = find_shipped_model(value)) return parse_hf_config(shipped->text, shipped->path, shipped->name);
  std::string names;
  for (const auto& n : shipped_model_names()) names += (names.empty() ? "" : ", ") + n;
  c.fail("model.config", "cannot read '" + value + "' (looked next to the scenario and in the current folder); "
                         "a path to a Hugging Face config.json or a shipped model: " + names);
}

// The test model (ModelConfig) of a real model's config: one mixer layer per test-model layer (each
// with the test model's MLP; Nemotron-H's MLP-only blocks fold into it, a model without MLPs gets one of
// width hidden), head_dim = hidden / heads as the test model derives it.
ModelConfig test_model_of(const yaml_read::Ctx& c, const HfModel& h) {
  ModelConfig m;
  m.preset = h.name;
  m.layers = static_cast<int64_t>(h.mixers.size());
  m.hidden = h.hidden;
  m.vocab = h.vocab;
  m.ffn = h.ffn > 0 ? h.ffn : h.hidden;
  m.rope_theta = h.rope_theta;
  m.mixers = h.mixers;
  if (h.attention_layers() > 0) {
    m.heads = h.heads;
    m.kv_heads = h.kv_heads;
    if (h.heads > 0 && h.hidden % h.heads == 0 && h.head_dim != h.hidden / h.heads)
      c.fail("model.config", h.file + ": head_dim " + std::to_string(h.head_dim) + " is not hidden_size / " +
                                 "num_attention_heads = " + std::to_string(h.hidden / h.heads) +
                                 ", which the test model derives it from; give model.hidden and model.heads");
  } else {
    m.heads = m.kv_heads = 1;  // no attention layer: the test model's attention sizes are unused
  }
  if (h.ssm_layers() > 0) m.ssm = h.ssm;
  if (h.gdn_layers() > 0) m.gdn = h.gdn;
  return m;
}

}  // namespace

ModelConfig read_model(const yaml_read::Ctx& c, const YAML::Node& m) {
  check_keys(c, m, "model", {"preset", "config", "layers", "hidden", "heads", "kv_heads", "vocab", "ffn",
                             "rope_theta", "mrope_sections", "seed", "mixers", "ssm", "gdn"});
  if (m["preset"] && m["config"]) c.fail("model.config", "give model.preset or model.config, not both");
  ModelOverrides o;
  if (m["layers"]) o.layers = read_int(c, m["layers"], "model.layers", 1);
  if (m["hidden"]) o.hidden = read_int(c, m["hidden"], "model.hidden", 1);
  if (m["heads"]) o.heads = read_int(c, m["heads"], "model.heads", 1);
  if (m["kv_heads"]) o.kv_heads = read_int(c, m["kv_heads"], "model.kv_heads", 1);
  if (m["vocab"]) o.vocab = read_int(c, m["vocab"], "model.vocab", 2);
  if (m["ffn"]) o.ffn = read_int(c, m["ffn"], "model.ffn", 1);
  if (m["mixers"]) o.mixers = read_str(c, m["mixers"], "model.mixers");
  if (const auto ssm = m["ssm"]) {
    if (!ssm.IsMap()) c.fail("model.ssm", "expected a mapping of heads, head_dim, state, groups, conv, got " + yaml_read::scalar_text(ssm));
    check_keys(c, ssm, "model.ssm", {"heads", "head_dim", "state", "groups", "conv"});
    if (ssm["heads"]) o.ssm_heads = read_int(c, ssm["heads"], "model.ssm.heads", 1);
    if (ssm["head_dim"]) o.ssm_head_dim = read_int(c, ssm["head_dim"], "model.ssm.head_dim", 1);
    if (ssm["state"]) o.ssm_state = read_int(c, ssm["state"], "model.ssm.state", 1);
    if (ssm["groups"]) o.ssm_groups = read_int(c, ssm["groups"], "model.ssm.groups", 1);
    if (ssm["conv"]) o.ssm_conv = read_int(c, ssm["conv"], "model.ssm.conv", 1);
  }
  // model.gdn: the Gated DeltaNet layers' sizes, applied over the preset's or the config file's.
  GdnConfig gdn_keys;
  bool any_gdn = false;
  const auto apply_gdn = [&](GdnConfig& g) {
    if (!any_gdn) return;
    const auto gd = m["gdn"];
    if (gd["key_heads"]) g.key_heads = gdn_keys.key_heads;
    if (gd["value_heads"]) g.value_heads = gdn_keys.value_heads;
    if (gd["key_head_dim"]) g.key_head_dim = gdn_keys.key_head_dim;
    if (gd["value_head_dim"]) g.value_head_dim = gdn_keys.value_head_dim;
    if (gd["conv"]) g.conv = gdn_keys.conv;
    if (gd["chunk"]) g.chunk = gdn_keys.chunk;
  };
  if (const auto gd = m["gdn"]) {
    if (!gd.IsMap())
      c.fail("model.gdn", "expected a mapping of key_heads, value_heads, key_head_dim, value_head_dim, conv, chunk, got " +
                              yaml_read::scalar_text(gd));
    check_keys(c, gd, "model.gdn", {"key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv", "chunk"});
    any_gdn = true;
    if (gd["key_heads"]) gdn_keys.key_heads = read_int(c, gd["key_heads"], "model.gdn.key_heads", 1);
    if (gd["value_heads"]) gdn_keys.value_heads = read_int(c, gd["value_heads"], "model.gdn.value_heads", 1);
    if (gd["key_head_dim"]) gdn_keys.key_head_dim = read_int(c, gd["key_head_dim"], "model.gdn.key_head_dim", 1);
    if (gd["value_head_dim"])
      gdn_keys.value_head_dim = read_int(c, gd["value_head_dim"], "model.gdn.value_head_dim", 1);
    if (gd["conv"]) gdn_keys.conv = read_int(c, gd["conv"], "model.gdn.conv", 1);
    if (gd["chunk"]) gdn_keys.chunk = read_int(c, gd["chunk"], "model.gdn.chunk", 1);
  }
  ModelConfig model;
  if (m["config"]) {
    // A real model's config.json: the explicit keys above override the file, keeping its ratios.
    const HfModel base = read_model_config(c, read_str(c, m["config"], "model.config"));
    model = test_model_of(c, with_overrides(base, o));
    apply_gdn(model.gdn);
  } else {
    if (m["preset"]) {
      try {
        model = ModelConfig::preset_named(read_str(c, m["preset"], "model.preset"));
      } catch (const UsageError& e) {
        throw UsageError(c.file + ": " + e.what());
      }
    } else {
      model.preset = "custom";
    }
    if (o.layers > 0) model.layers = o.layers;
    if (o.hidden > 0) model.hidden = o.hidden;
    if (o.heads > 0) model.heads = o.heads;
    if (o.kv_heads > 0) model.kv_heads = o.kv_heads;
    if (o.vocab > 0) model.vocab = o.vocab;
    if (o.ffn > 0) model.ffn = o.ffn;
    if (!o.mixers.empty()) model.mixers = o.mixers;
    if (o.ssm_heads > 0) model.ssm.heads = o.ssm_heads;
    if (o.ssm_head_dim > 0) model.ssm.head_dim = o.ssm_head_dim;
    if (o.ssm_state > 0) model.ssm.state = o.ssm_state;
    if (o.ssm_groups > 0) model.ssm.groups = o.ssm_groups;
    if (o.ssm_conv > 0) model.ssm.conv = o.ssm_conv;
    apply_gdn(model.gdn);
    if (m["preset"] && (o.any() || any_gdn)) model.preset += "+custom";
  }
  if (m["rope_theta"]) model.rope_theta = static_cast<double>(read_int(c, m["rope_theta"], "model.rope_theta", 1));
  if (m["mrope_sections"]) model.mrope_sections = read_int_list(c, m["mrope_sections"], "model.mrope_sections", 1);
  if (m["seed"]) model.seed = static_cast<uint64_t>(read_int(c, m["seed"], "model.seed", 0));
  return model;
}

}  // namespace cpbench
