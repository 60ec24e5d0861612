#include "harness/model/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "harness/model/hf_attention_families.hpp"
#include "harness/model/hf_fields.hpp"
#include "kernels/mixers/mixer.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

int64_t HfModel::attention_layers() const { return static_cast<int64_t>(std::count(mixers.begin(), mixers.end(), 'A')); }
int64_t HfModel::layers_of(char letter) const {
  return static_cast<int64_t>(std::count(mixers.begin(), mixers.end(), letter));
}
int64_t HfModel::sliding_layers() const { return static_cast<int64_t>(std::count(sliding.begin(), sliding.end(), true)); }

const std::vector<std::string>& known_model_types() {
  static const std::vector<std::string> all = {"llama",      "mistral",      "qwen2",   "qwen3",       "nemotron_h",      "jamba",
                                               "mamba2",     "qwen3_next",   "qwen3_5", "qwen3_5_moe", "qwen3_5_text",
                                               "qwen3_5_moe_text", "kimi_linear", "gpt_oss",
                                               "deepseek_v3", "kimi_k2",    "glm4_moe", "deepseek_v32", "glm_moe_dsa"};
  return all;
}

namespace {

using hf::Fields;

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The letter of the mixer whose layers the file's per-layer list calls `name`; refuses `field` listing the
// names this model_type's mixers answer to.
char layer_letter(const Fields& f, const std::string& name, const std::string& field) {
  if (const Mixer* m = find_hf_mixer(f.type, name)) return m->letter();
  f.fail(field, "'" + name + "' is not a layer type cpbench models (" + known_hf_layer_names(f.type) + ")");
}

// Each mixer of the model (but attention, read with the model's own fields) reads its sizes.
void read_mixer_sizes(const Fields& f, HfModel& m) {
  for (const Mixer* mx : mixers_in(m.mixers))
    if (mx->letter() != kDefaultMixer) mx->read_hf(f, m);
}

// Qwen3-Next and Qwen3.5's text model: Gated DeltaNet layers interleaved with gated full attention.
void read_qwen3_next(const Fields& f, HfModel& m) {
  if (f.has("layer_types")) {
    const auto& t = f.j["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != m.blocks)
      f.fail("layer_types", "expected a list of " + std::to_string(m.blocks) + " entries (num_hidden_layers), got " +
                                f.shown("layer_types"));
    for (size_t i = 0; i < t.size(); ++i)
      m.mixers += layer_letter(f, t[i].is_string() ? t[i].get<std::string>() : t[i].dump(),
                               "layer_types[" + std::to_string(i) + "]");
  } else {
    const int64_t interval = f.integer_or("full_attention_interval", 4);
    const char full = layer_letter(f, "full_attention", "layer_types"), linear = layer_letter(f, "linear_attention", "layer_types");
    for (int64_t i = 0; i < m.blocks; ++i) m.mixers += (i + 1) % interval == 0 ? full : linear;
  }
  if (m.attention_layers() > 0) hf::read_attention(f, m);
  m.partial_rotary_factor = 0.25;  // transformers' default for these model types
  const nlohmann::json* rope = f.has("rope_parameters") && f.j["rope_parameters"].is_object() ? &f.j["rope_parameters"]
                                                                                               : nullptr;
  if (f.has("partial_rotary_factor")) {
    m.partial_rotary_factor = f.number_or("partial_rotary_factor", 0.25);
  } else if (rope && rope->contains("partial_rotary_factor")) {
    const auto& v = (*rope)["partial_rotary_factor"];
    if (!v.is_number() || !(v.get<double>() > 0)) f.fail("rope_parameters.partial_rotary_factor", "expected a positive number");
    m.partial_rotary_factor = v.get<double>();
  }
  if (m.partial_rotary_factor > 1) f.fail("partial_rotary_factor", "expected a fraction in (0, 1]");
  if (rope && rope->contains("rope_theta") && (*rope)["rope_theta"].is_number())
    m.rope_theta = (*rope)["rope_theta"].get<double>();
  m.sliding.assign(m.mixers.size(), false);
  m.mlp_layers = m.blocks;
  const int64_t experts = f.integer_or("num_experts", 0, 0);
  if (experts > 0) {
    m.experts = experts;
    m.experts_per_token = f.integer("num_experts_per_tok");
    const int64_t step = f.integer_or("decoder_sparse_step", 1);
    std::vector<int64_t> dense;
    if (f.has("mlp_only_layers") && f.j["mlp_only_layers"].is_array())
      for (const auto& e : f.j["mlp_only_layers"]) dense.push_back(e.is_number_integer() ? e.get<int64_t>() : -1);
    for (int64_t i = 0; i < m.blocks; ++i)
      if (std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0) ++m.moe_layers;
    // The test model has one dense MLP per layer: an MoE layer's per-token work is its routed experts'.
    m.ffn = m.moe_layers > 0 ? f.integer("moe_intermediate_size") : f.integer("intermediate_size");
  } else {
    m.ffn = f.integer("intermediate_size");
  }
  read_mixer_sizes(f, m);
}

// Kimi Linear: KDA layers and MLA layers (read as plain attention: heads x (qk_nope + qk_rope) dims),
// linear_attn_config's 1-based kda_layers / full_attn_layers; MoE after first_k_dense_replace.
void read_kimi_linear(const Fields& f, HfModel& m) {
  if (!f.has("linear_attn_config") || !f.j["linear_attn_config"].is_object())
    f.fail("linear_attn_config", "missing (model_type kimi_linear lists its layers there)");
  const Fields lin{f.j["linear_attn_config"], f.file + ": linear_attn_config", f.type};
  // Each mixer's list of 1-based layer numbers (full_attn_layers, kda_layers): a layer is in one.
  std::vector<std::pair<std::string, char>> lists;
  for (const auto& mx : mixers())
    if (const std::string key = mx->hf_layer_name(f.type); !key.empty()) {
      if (!lin.has(key) || !lin.j[key].is_array()) lin.fail(key, "expected a list of 1-based layer numbers");
      lists.emplace_back(key, mx->letter());
    }
  for (int64_t i = 0; i < m.blocks; ++i) {
    const auto in = std::find_if(lists.begin(), lists.end(), [&](const auto& l) {
      return std::find(lin.j[l.first].begin(), lin.j[l.first].end(), i + 1) != lin.j[l.first].end();
    });
    if (in == lists.end())
      lin.fail(lists.back().first, "layer " + std::to_string(i + 1) + " is in none of " + known_hf_layer_names(f.type));
    m.mixers += in->second;
  }
  m.heads = f.integer("num_attention_heads");
  m.kv_heads = f.integer_or("num_key_value_heads", m.heads);
  m.head_dim = f.integer("qk_nope_head_dim") + f.integer("qk_rope_head_dim", 0);
  m.rope_theta = f.number_or("rope_theta", 10000);
  m.sliding.assign(m.mixers.size(), false), m.mlp_layers = m.blocks;
  read_mixer_sizes(f, m);
  m.experts = f.integer_or("num_experts", 0, 0);
  m.moe_layers = m.experts > 0 ? m.blocks - f.integer_or("first_k_dense_replace", 0, 0) : 0;
  m.experts_per_token = m.experts > 0 ? f.integer("num_experts_per_token") : 0;
  m.ffn = m.moe_layers > 0 ? f.integer("moe_intermediate_size") : f.integer("intermediate_size");
}

HfModel parse_json(const nlohmann::json& j, const std::string& file, const std::string& name);

// The fields every family shares, read after the family's reader: tie_word_embeddings (transformers'
// default false) and the dense MLP layers' width (intermediate_size; MoE readers set ffn to one expert's).
void read_common(const nlohmann::json& j, const std::string& file, HfModel& m) {
  const Fields f{j, file, m.model_type};
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  if (m.mlp_layers > m.moe_layers) m.dense_ffn = f.has("intermediate_size") ? f.integer("intermediate_size") : m.ffn;
}

HfModel parse_family(const nlohmann::json& j, const std::string& file, const std::string& name) {
  if (!j.is_object()) throw UsageError(file + ": expected a JSON object (a Hugging Face config.json)");
  HfModel m;
  m.name = name;
  m.file = file;
  Fields f{j, file, "?"};
  if (!f.has("model_type"))
    f.fail("model_type", "missing (cpbench reads the config.json of these model_types: " +
                             join_names(known_model_types()) + ")");
  if (!j["model_type"].is_string()) f.fail("model_type", "expected a string, got " + f.shown("model_type"));
  m.model_type = j["model_type"].get<std::string>();
  f.type = m.model_type;
  const auto& known = known_model_types();
  if (std::find(known.begin(), known.end(), m.model_type) == known.end())
    f.fail("model_type", "'" + m.model_type + "' is not a model_type cpbench reads (known: " + join_names(known) + ")");
  if (m.model_type == "qwen3_5" || m.model_type == "qwen3_5_moe") {
    // The multimodal wrapper: the language model is its text_config.
    if (!f.has("text_config") || !j["text_config"].is_object())
      f.fail("text_config", "missing (model_type " + m.model_type + " keeps its language model there)");
    nlohmann::json text = j["text_config"];
    if (!text.contains("model_type")) text["model_type"] = m.model_type + "_text";
    HfModel t = parse_json(text, file + ": text_config", name);
    t.file = file;
    return t;
  }
  m.hidden = f.integer("hidden_size");
  m.vocab = f.integer("vocab_size");
  m.blocks = f.integer("num_hidden_layers");

  const std::string& t = m.model_type;
  if (t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3") {
    hf::read_dense(f, m);
    return m;
  }
  if (t == "gpt_oss") {
    hf::read_gpt_oss(f, m);
    return m;
  }
  if (t == "deepseek_v3" || t == "kimi_k2") {
    hf::read_mla_moe(f, m);
    return m;
  }
  if (t == "glm4_moe") {
    hf::read_glm4_moe(f, m);
    return m;
  }
  if (t == "deepseek_v32" || t == "glm_moe_dsa") {
    hf::read_dsa(f, m);
    return m;
  }
  if (t == "nemotron_h") {
    const std::string pattern = f.text("hybrid_override_pattern");
    if (static_cast<int64_t>(pattern.size()) != m.blocks)
      f.fail("hybrid_override_pattern", "has " + std::to_string(pattern.size()) + " entries, num_hidden_layers is " +
                                            std::to_string(m.blocks) + " (one entry per block)");
    for (size_t i = 0; i < pattern.size(); ++i) {
      const char c = pattern[i];
      if (c == '-' || c == 'E') {
        ++m.mlp_layers;
        if (c == 'E') ++m.moe_layers;
      } else {
        const Mixer* mx = find_hf_mixer(f.type, std::string(1, c));
        if (mx == nullptr)
          f.fail("hybrid_override_pattern", "entry " + std::to_string(i) + " is '" + c + "'; expected " +
                                                known_hf_layer_names(f.type) + ", - (MLP) or E (MoE MLP)");
        m.mixers += mx->letter();
      }
    }
    if (m.attention_layers() > 0) hf::read_attention(f, m);
    if (m.mlp_layers > 0) m.ffn = f.integer("intermediate_size");
    if (m.moe_layers > 0) {
      m.experts = f.integer("n_routed_experts");
      m.experts_per_token = f.integer("num_experts_per_tok");
      if (f.has("moe_intermediate_size")) m.ffn = f.integer("moe_intermediate_size");
    }
    m.sliding.assign(m.mixers.size(), false);
    read_mixer_sizes(f, m);
  } else if (t == "jamba") {
    const int64_t period = f.integer("attn_layer_period"), offset = f.integer("attn_layer_offset", 0);
    if (offset >= period)
      f.fail("attn_layer_offset", std::to_string(offset) + " is not below attn_layer_period " + std::to_string(period));
    const char attention = layer_letter(f, "attn_layer_period", "attn_layer_period");
    const char other = layer_letter(f, "other layers", "model_type");
    for (int64_t i = 0; i < m.blocks; ++i) m.mixers += i % period == offset ? attention : other;
    if (m.attention_layers() > 0) hf::read_attention(f, m);
    m.ffn = f.integer("intermediate_size");
    m.mlp_layers = m.blocks;
    m.experts = f.integer_or("num_experts", 1);
    if (m.experts > 1) {
      m.experts_per_token = f.integer("num_experts_per_tok");
      const int64_t ep = f.integer("expert_layer_period"), eo = f.integer("expert_layer_offset", 0);
      for (int64_t i = 0; i < m.blocks; ++i) m.moe_layers += i % ep == eo ? 1 : 0;
    } else {
      m.experts = 0;
    }
    m.sliding.assign(m.mixers.size(), false);
    read_mixer_sizes(f, m);
  } else if (t == "qwen3_next" || t == "qwen3_5_text" || t == "qwen3_5_moe_text") {
    read_qwen3_next(f, m);
    return m;
  } else if (t == "kimi_linear") {
    read_kimi_linear(f, m);
    return m;
  } else {
    // A model of one linear mixer's layers only.
    m.mixers.assign(static_cast<size_t>(m.blocks), layer_letter(f, "every layer", "model_type"));
    m.sliding.assign(m.mixers.size(), false);
    read_mixer_sizes(f, m);
  }
  return m;
}

HfModel parse_json(const nlohmann::json& j, const std::string& file, const std::string& name) {
  HfModel m = parse_family(j, file, name);
  // The multimodal wrapper's text_config was read (and completed) on its own.
  if (j["model_type"] == m.model_type) read_common(j, file, m);
  return m;
}

}  // namespace

HfModel parse_hf_config(const std::string& text, const std::string& file, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message starts "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string what = e.what();
    const auto at = what.find("parse error");
    throw UsageError(file + ": not valid JSON: " + (at == std::string::npos ? what : what.substr(at)));
  }
  return parse_json(j, file, name);
}

HfModel read_hf_config(const std::string& path) {
  std::ifstream in(path);
  CP_CHECK_USAGE(in.good(), path, ": cannot read the model config (expected a Hugging Face config.json)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::filesystem::path p(path);
  std::string name = p.stem().string();
  if (name == "config" && p.has_parent_path()) name = p.parent_path().filename().string();
  return parse_hf_config(ss.str(), path, name);
}

std::vector<std::string> shipped_model_names() {
  std::vector<std::string> v;
  for (const auto& m : shipped_models()) v.emplace_back(m.name);
  return v;
}

const ShippedModel* find_shipped_model(const std::string& name) {
  for (const auto& m : shipped_models())
    if (name == m.name) return &m;
  return nullptr;
}

HfModel shipped_model(const std::string& name) {
  const ShippedModel* m = find_shipped_model(name);
  CP_CHECK_USAGE(m != nullptr, "unknown model '", name, "' (shipped: ", join_names(shipped_model_names()),
                 "; or a path to a config.json)");
  return parse_hf_config(m->text, m->path, m->name);
}

HfModel model_from_config_or_name(const std::string& s) {
  const bool path = s.find('/') != std::string::npos ||
                    (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0);
  return path ? read_hf_config(s) : shipped_model(s);
}

bool ModelOverrides::any() const {
  return layers > 0 || hidden > 0 || heads > 0 || kv_heads > 0 || head_dim > 0 || vocab > 0 || ffn > 0 ||
         !mixers.empty() || ssm_heads > 0 || ssm_head_dim > 0 || ssm_state > 0 || ssm_groups > 0 || ssm_conv > 0;
}

HfModel with_overrides(const HfModel& m, const ModelOverrides& o) {
  HfModel r = m;
  if (!o.any()) return r;
  r.name = m.name + "+custom";
  const auto L = static_cast<int64_t>(m.mixers.size());
  if (!o.mixers.empty() || o.layers > 0) {
    const std::string key = o.key + (!o.mixers.empty() ? "mixers" : "layers");
    r.mixers = !o.mixers.empty() ? o.mixers : resample_mixers(m.mixers, o.layers, key, m.name + "'s mixer layers");
    const auto n = static_cast<int64_t>(r.mixers.size());
    // The attention layers' sliding / full pattern resampled onto the new attention layers, by the same
    // rule as the mixers (sampling among all layers would hand an attention layer an SSM layer's absent flag).
    std::string kinds;
    for (int64_t i = 0; i < L; ++i)
      if (m.mixers[static_cast<size_t>(i)] == kDefaultMixer) kinds += m.sliding[static_cast<size_t>(i)] ? 'S' : 'F';
    const auto a = static_cast<int64_t>(std::count(r.mixers.begin(), r.mixers.end(), kDefaultMixer));
    const std::string flags =
        kinds.empty() ? std::string(static_cast<size_t>(a), 'F')
                      : resample_layer_pattern(kinds, a, key, m.name + "'s attention layers",
                                               [](char k) { return std::string(k == 'S' ? "sliding_attention" : "full_attention"); });
    r.sliding.assign(static_cast<size_t>(n), false);
    for (int64_t i = 0, k = 0; i < n; ++i)
      if (r.mixers[static_cast<size_t>(i)] == kDefaultMixer) r.sliding[static_cast<size_t>(i)] = flags[static_cast<size_t>(k++)] == 'S';
    if (r.sliding_layers() == 0) r.sliding_window = 0;
    // DSA's full / shared indexer layers (GLM-5's indexer_types) resampled by the same rule; a pattern that
    // would open with a shared layer gets its first full layer moved to the front (a shared layer needs one).
    if (const auto& ik = m.attention.dsa.indexer_kinds; !ik.empty()) {
      CP_CHECK(static_cast<int64_t>(ik.size()) == static_cast<int64_t>(kinds.size()), m.name, ": ", ik.size(),
               " DSA indexer types for ", kinds.size(), " attention layers");
      std::string p;
      for (const DsaIndexerKind k : ik) p += k == DsaIndexerKind::full ? 'F' : 'S';
      p = resample_layer_pattern(p, a, key, m.name + "'s DSA indexer layers",
                                 [](char k) { return std::string(k == 'S' ? "shared" : "full"); });
      if (const auto f = p.find('F'); f != 0 && f != std::string::npos)
        std::rotate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(f), p.begin() + static_cast<std::ptrdiff_t>(f) + 1);
      r.attention.dsa.indexer_kinds.clear();
      for (const char c : p) r.attention.dsa.indexer_kinds.push_back(c == 'F' ? DsaIndexerKind::full : DsaIndexerKind::shared);
    }
    const auto scale = [&](int64_t k) {
      return L > 0 ? static_cast<int64_t>(std::llround(static_cast<double>(k) * static_cast<double>(n) / static_cast<double>(L)))
                   : k;
    };
    r.mlp_layers = m.model_type == "nemotron_h" ? scale(m.mlp_layers) : (m.mlp_layers > 0 ? n : 0);
    r.moe_layers = scale(m.moe_layers);
    r.blocks = m.model_type == "nemotron_h" ? n + r.mlp_layers : n;
  }
  if (o.hidden > 0) r.hidden = o.hidden;
  if (o.heads > 0) {
    r.heads = o.heads;
    r.kv_heads = m.heads > 0 && m.kv_heads > 0 ? std::max<int64_t>(1, o.heads / (m.heads / m.kv_heads)) : o.heads;
  }
  if (o.kv_heads > 0) r.kv_heads = o.kv_heads;
  if (o.head_dim > 0) r.head_dim = o.head_dim;
  else if ((o.hidden > 0 || o.heads > 0) && r.heads > 0) r.head_dim = r.hidden / r.heads;
  if (o.vocab > 0) r.vocab = o.vocab;
  if (o.ffn > 0) r.ffn = o.ffn;
  if (o.ssm_heads > 0) {
    r.ssm.heads = o.ssm_heads;
    r.ssm.groups = std::max<int64_t>(1, o.ssm_heads / std::max<int64_t>(1, m.ssm.heads / std::max<int64_t>(1, m.ssm.groups)));
  }
  if (o.ssm_groups > 0) r.ssm.groups = o.ssm_groups;
  if (o.ssm_head_dim > 0) r.ssm.head_dim = o.ssm_head_dim;
  if (o.ssm_state > 0) r.ssm.state = o.ssm_state;
  if (o.ssm_conv > 0) r.ssm.conv = o.ssm_conv;
  return r;
}

std::string resample_layer_pattern(const std::string& pattern, int64_t n, const std::string& key,
                                   const std::string& what, const std::function<std::string(char)>& kind_name) {
  const auto L = static_cast<int64_t>(pattern.size());
  if (n <= 0 || L == 0) return "";
  if (n == L) return pattern;
  // The kinds in order of first appearance, each with its layers' positions.
  std::vector<char> kinds;
  std::vector<std::vector<int64_t>> at;
  for (int64_t i = 0; i < L; ++i) {
    const char c = pattern[static_cast<size_t>(i)];
    const auto kind = static_cast<size_t>(std::find(kinds.begin(), kinds.end(), c) - kinds.begin());
    if (kind == kinds.size()) kinds.push_back(c), at.emplace_back();
    at[kind].push_back(i);
  }
  const auto K = static_cast<int64_t>(kinds.size());
  if (n < K) {
    std::string counts;
    for (size_t i = 0; i < kinds.size(); ++i)
      counts += (i == 0 ? "" : ", ") + std::to_string(at[i].size()) + " " + kind_name(kinds[i]);
    throw UsageError(key + ": " + what + " resampled to " + std::to_string(n) + " cannot keep each kind (" + counts +
                     "); give at least " + std::to_string(K) + " (resampling keeps every kind and its share)");
  }
  // Largest remainder of n c_i / L (ties: the kind seen first), then at least one layer of each kind,
  // taken from the kind that has the most.
  std::vector<int64_t> count(kinds.size());
  std::vector<std::pair<int64_t, size_t>> remainder;  // (n c_i mod L, i)
  int64_t given = 0;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const auto c = static_cast<int64_t>(at[i].size());
    count[i] = n * c / L, given += count[i];
    remainder.emplace_back(n * c % L, i);
  }
  std::stable_sort(remainder.begin(), remainder.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (int64_t k = 0; given < n; ++k, ++given) ++count[remainder[static_cast<size_t>(k)].second];
  for (auto& c : count)
    if (c == 0) {
      ++c;
      --*std::max_element(count.begin(), count.end());
    }
  // Kind i's k-th layer is its file layer floor((2k + 1) c_i / (2 a_i)); the picks keep the file's order.
  std::vector<int64_t> picks;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const auto c = static_cast<int64_t>(at[i].size());
    for (int64_t k = 0; k < count[i]; ++k) picks.push_back(at[i][static_cast<size_t>((2 * k + 1) * c / (2 * count[i]))]);
  }
  std::stable_sort(picks.begin(), picks.end());
  std::string out;
  for (const int64_t p : picks) out += pattern[static_cast<size_t>(p)];
  return out;
}

std::string resample_mixers(const std::string& mixers, int64_t n, const std::string& key, const std::string& what) {
  if (mixers.empty()) return std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), kDefaultMixer);
  return resample_layer_pattern(mixers, n, key, what, [](char letter) {
    for (const Mixer* mx : mixers_in(std::string(1, letter))) return mx->name();
    return std::string(1, letter);
  });
}

}  // namespace cpbench
