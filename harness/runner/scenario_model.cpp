#include "harness/runner/scenario_model.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
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
  static_cast<MixerConfigs&>(m) = h;
  // Its layer_types / sliding window: one kind per attention layer (HfModel::sliding is per mixer layer).
  if (h.sliding_layers() > 0) {
    m.attention.layer_kinds.clear();
    for (size_t l = 0; l < h.mixers.size(); ++l)
      if (h.mixers[l] == kDefaultMixer)
        m.attention.layer_kinds.push_back(h.sliding[l] ? AttentionKind::sliding : AttentionKind::full);
    m.attention.window = h.sliding_window;
  }
  return m;
}

// model.attention's list keys (not ConfigFields): the per-layer kinds and the sliding window.
const std::vector<std::string> kAttentionKindKeys{"layer_types", "window", "mla", "mla_wire", "dsa"};

// model.attention.layer_types: [full_attention | sliding_attention, ...], one per attention layer;
// model.attention.window: N >= 1, required with a sliding layer and refused without one. Given here,
// they replace a model.config's own.
void read_attention_kinds(const yaml_read::Ctx& c, const YAML::Node& a, ModelConfig& model) {
  if (a["layer_types"]) {
    const auto names = read_str_list(c, a["layer_types"], "model.attention.layer_types",
                                     [&](const std::string& path, const std::string& v) {
                                       const auto known = attention_kind_names();
                                       if (std::find(known.begin(), known.end(), v) == known.end())
                                         c.fail(path, "unknown attention kind \"" + v +
                                                          "\"; known: full_attention, sliding_attention");
                                     });
    model.attention.layer_kinds.clear();
    for (const auto& n : names) model.attention.layer_kinds.push_back(parse_attention_kind(n, "model.attention.layer_types"));
    const int64_t attention_layers = count_layers(model.mixers, model.layers, kDefaultMixer);
    if (static_cast<int64_t>(names.size()) != attention_layers)
      c.fail("model.attention.layer_types", std::to_string(names.size()) + " kinds for the model's " +
                                                std::to_string(attention_layers) +
                                                " attention layers (one per attention layer, in layer order)");
  }
  if (a["window"]) model.attention.window = read_int(c, a["window"], "model.attention.window", 1);
  // model.attention.sinks: {mean: M, std: S} (either; the other keeps its default): the sinks' scale.
  if (a["sinks"] && a["sinks"].IsMap()) {
    const YAML::Node n = a["sinks"];
    check_keys(c, n, "model.attention.sinks", {"mean", "std"});
    if (n["std"]) model.attention.sink_std = read_positive(c, n["std"], "model.attention.sinks.std");
    if (n["mean"]) {
      double mean = 0;
      if (!n["mean"].IsScalar() || !YAML::convert<double>::decode(n["mean"], mean) || !std::isfinite(mean))
        c.fail("model.attention.sinks.mean", "expected a number, got " + yaml_read::scalar_text(n["mean"]));
      model.attention.sink_mean = mean;
    }
  }
  // model.attention.mla: {kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim} (all >= 1);
  // model.attention.mla_wire: expanded | latent (kernels/attention/mla.hpp).
  if (a["mla"]) {
    const YAML::Node n = a["mla"];
    if (!n.IsMap()) c.fail("model.attention.mla", "expected a mapping of kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim");
    check_keys(c, n, "model.attention.mla", {"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"});
    MlaDims& d = model.attention.mla;
    const auto dim = [&](const char* key) {
      const std::string path = std::string("model.attention.mla.") + key;
      if (!n[key]) c.fail(path, "missing (MLA needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim)");
      return read_int(c, n[key], path, 1);
    };
    d.kv_lora_rank = dim("kv_lora_rank");
    d.qk_rope_head_dim = dim("qk_rope_head_dim");
    d.qk_nope_head_dim = dim("qk_nope_head_dim");
    d.v_head_dim = dim("v_head_dim");
    if (d.qk_rope_head_dim % 2 != 0) c.fail("model.attention.mla.qk_rope_head_dim", "must be even (RoPE rotates pairs)");
  }
  if (a["mla_wire"]) {
    const std::string w = read_str(c, a["mla_wire"], "model.attention.mla_wire");
    if (w != "expanded" && w != "latent")
      c.fail("model.attention.mla_wire", "unknown mla_wire \"" + w + "\"; known: expanded, latent");
    model.attention.mla_wire = parse_mla_wire(w, "model.attention.mla_wire");
    if (!model.attention.is_mla()) c.fail("model.attention.mla_wire", "needs model.attention.mla");
  }
  // model.attention.dsa: {index_heads, index_head_dim, topk, scoring_relu, loss, loss_coeff, indexer_types}
  // (kernels/mixers/attention/dsa/dsa_config.hpp); given keys replace a model.config's own.
  if (a["dsa"]) {
    const YAML::Node n = a["dsa"];
    const std::string key = "model.attention.dsa";
    if (!n.IsMap())
      c.fail(key, "expected a mapping of index_heads, index_head_dim, topk, scoring_relu, loss, loss_coeff, indexer_types");
    check_keys(c, n, key, {"index_heads", "index_head_dim", "topk", "scoring_relu", "loss", "loss_coeff", "indexer_types"});
    DsaConfig& d = model.attention.dsa;
    if (n["index_heads"]) d.index_heads = read_int(c, n["index_heads"], key + ".index_heads", 1);
    if (n["index_head_dim"]) d.index_head_dim = read_int(c, n["index_head_dim"], key + ".index_head_dim", 1);
    if (n["topk"]) d.topk = read_int(c, n["topk"], key + ".topk", 1);
    if (n["scoring_relu"]) d.scoring_relu = read_bool(c, n["scoring_relu"], key + ".scoring_relu");
    if (n["loss_coeff"]) d.loss_coeff = read_positive(c, n["loss_coeff"], key + ".loss_coeff");
    if (n["loss"]) {
      const std::string l = read_str(c, n["loss"], key + ".loss");
      if (l != "dense" && l != "sparse") c.fail(key + ".loss", "unknown loss \"" + l + "\"; known: dense, sparse");
      d.loss = l == "dense" ? DsaLoss::dense : DsaLoss::sparse;
    }
    // indexer_types: [full | shared, ...], one per attention layer (GLM-5's; dsa_config.hpp).
    if (n["indexer_types"]) {
      const std::string path = key + ".indexer_types";
      const auto names = read_str_list(c, n["indexer_types"], path, [&](const std::string& at, const std::string& v) {
        if (v != "full" && v != "shared") c.fail(at, "unknown indexer type \"" + v + "\"; known: full, shared");
      });
      d.indexer_kinds.clear();
      for (const auto& t : names) d.indexer_kinds.push_back(t == "full" ? DsaIndexerKind::full : DsaIndexerKind::shared);
      const int64_t attention_layers = count_layers(model.mixers, model.layers, kDefaultMixer);
      if (static_cast<int64_t>(names.size()) != attention_layers)
        c.fail(path, std::to_string(names.size()) + " types for the model's " + std::to_string(attention_layers) +
                         " attention layers (one per attention layer, in layer order)");
    }
    for (const auto& [k, v] : {std::pair<const char*, int64_t>{"index_heads", d.index_heads},
                               {"index_head_dim", d.index_head_dim}, {"topk", d.topk}})
      if (v == 0) c.fail(key + "." + k, "missing (DSA needs index_heads, index_head_dim, topk)");
  }
  if (model.attention.dsa.enabled()) {
    const std::string key = "model.attention.dsa";
    if (!model.attention.is_mla()) c.fail(key, "needs model.attention.mla (DSA is sparse MLA)");
    if (model.attention.dsa.index_head_dim <= model.attention.mla.qk_rope_head_dim)
      c.fail(key + ".index_head_dim", "must exceed model.attention.mla.qk_rope_head_dim " +
                                          std::to_string(model.attention.mla.qk_rope_head_dim) +
                                          " (RoPE on the indexer's first qk_rope_head_dim dims)");
    if (model.attention.has_sliding()) c.fail(key, "does not take sliding_attention layers (model.attention.layer_types)");
    const auto& kinds = model.attention.dsa.indexer_kinds;
    if (!kinds.empty() && kinds.front() == DsaIndexerKind::shared)
      c.fail(key + ".indexer_types", "the first attention layer is shared: a shared layer reuses the picks of the "
                                     "previous full layer, so the first must be full");
  }
  if (model.attention.has_sliding() && model.attention.window < 1)
    c.fail("model.attention.window", "missing: model.attention.layer_types has sliding_attention layers");
  if (!model.attention.has_sliding() && a["window"])
    c.fail("model.attention.window", "the model has no sliding_attention layers (model.attention.layer_types)");
}

}  // namespace

ModelConfig read_model(const yaml_read::Ctx& c, const YAML::Node& m) {
  std::vector<std::string> keys{"preset", "config", "layers",         "hidden", "heads", "kv_heads", "vocab",
                                "ffn",    "rope_theta", "mrope_sections", "seed", "mixers"};
  for (const auto& mixer : mixers())
    if (!mixer->config_key().empty()) keys.push_back(mixer->config_key());
  check_keys(c, m, "model", keys);
  if (m["preset"] && m["config"]) c.fail("model.config", "give model.preset or model.config, not both");
  ModelOverrides o;
  if (m["layers"]) o.layers = read_int(c, m["layers"], "model.layers", 1);
  if (m["hidden"]) o.hidden = read_int(c, m["hidden"], "model.hidden", 1);
  if (m["heads"]) o.heads = read_int(c, m["heads"], "model.heads", 1);
  if (m["kv_heads"]) o.kv_heads = read_int(c, m["kv_heads"], "model.kv_heads", 1);
  if (m["vocab"]) o.vocab = read_int(c, m["vocab"], "model.vocab", 2);
  if (m["ffn"]) o.ffn = read_int(c, m["ffn"], "model.ffn", 1);
  if (m["mixers"]) o.mixers = read_str(c, m["mixers"], "model.mixers");
  // model.<config_key>: a mixer's sizes (its Mixer::config_fields), applied over the preset's or the
  // config file's.
  std::map<std::string, std::map<std::string, int64_t>> sizes;  // by config key
  for (const auto& mixer : mixers()) {
    const std::string key = mixer->config_key();
    if (key.empty() || !m[key]) continue;
    const auto node = m[key];
    MixerConfigs defaults;
    std::vector<std::string> fields;
    for (const auto& f : mixer->config_fields(defaults)) fields.push_back(f.name);
    if (!node.IsMap()) {
      std::string list;
      for (const auto& f : fields) list += (list.empty() ? "" : ", ") + f;
      c.fail("model." + key, "expected a mapping of " + list + ", got " + yaml_read::scalar_text(node));
    }
    const auto kind_keys = mixer->letter() == kDefaultMixer ? kAttentionKindKeys : std::vector<std::string>{};
    std::vector<std::string> allowed = fields;
    allowed.insert(allowed.end(), kind_keys.begin(), kind_keys.end());
    check_keys(c, node, "model." + key, allowed);
    for (const auto& f : mixer->config_fields(defaults)) {
      if (!node[f.name]) continue;
      // model.attention.sinks: {mean, std} turns the sinks on; read_attention_kinds reads the scale.
      if (mixer->letter() == kDefaultMixer && f.name == "sinks" && node[f.name].IsMap()) {
        sizes[key][f.name] = 1;
        continue;
      }
      const std::string path = "model." + key + "." + f.name;
      sizes[key][f.name] = f.flag ? (read_bool(c, node[f.name], path) ? 1 : 0) : read_int(c, node[f.name], path, f.min);
    }
  }
  const auto apply_sizes = [&](ModelConfig& model, bool scaled) {
    for (const auto& mixer : mixers())
      if (const auto it = sizes.find(mixer->config_key()); it != sizes.end())
        mixer->apply_sizes(model, it->second, scaled);
  };
  ModelConfig model;
  if (m["config"]) {
    // A real model's config.json: the explicit keys above override the file, keeping its ratios.
    const HfModel base = read_model_config(c, read_str(c, m["config"], "model.config"));
    HfModel shrunk;
    try {
      shrunk = with_overrides(base, o);
    } catch (const UsageError& e) {
      throw UsageError(c.file + ": " + e.what());
    }
    model = test_model_of(c, shrunk);
    apply_sizes(model, true);
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
    apply_sizes(model, false);
    if (m["preset"] && (o.any() || !sizes.empty())) model.preset += "+custom";
  }
  if (m["rope_theta"]) model.rope_theta = static_cast<double>(read_int(c, m["rope_theta"], "model.rope_theta", 1));
  if (m["mrope_sections"]) model.mrope_sections = read_int_list(c, m["mrope_sections"], "model.mrope_sections", 1);
  if (m["seed"]) model.seed = static_cast<uint64_t>(read_int(c, m["seed"], "model.seed", 0));
  if (m["attention"] && m["attention"].IsMap()) read_attention_kinds(c, m["attention"], model);
  // A mixer's yes/no key turned on for a model without that mixer's layers would run nothing.
  for (const auto& mixer : mixers()) {
    const auto it = sizes.find(mixer->config_key());
    if (it == sizes.end() || model.has(*mixer)) continue;
    for (const auto& f : mixer->config_fields(model))
      if (f.flag && *f.value != 0 && it->second.count(f.name))
        c.fail("model." + mixer->config_key() + "." + f.name,
               "the model has no " + mixer->description() + " layers (model.mixers " +
                   (model.mixers.empty() ? std::string("\"\"") : model.mixers) + "; the letter " +
                   std::string(1, mixer->letter()) + " is " + mixer->description() + ")");
  }
  return model;
}

}  // namespace cpbench
