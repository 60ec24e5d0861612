#include "harness/model/hf_attention_families.hpp"

#include <algorithm>
#include <cmath>

namespace cpbench::hf {

namespace {

// rope_theta at the top level or in rope_parameters (transformers 5), else `fallback`.
double rope_theta_of(const Fields& f, double fallback) {
  if (f.has("rope_parameters") && f.j["rope_parameters"].is_object()) {
    const auto& rp = f.j["rope_parameters"];
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) return rp["rope_theta"].get<double>();
  }
  return f.number_or("rope_theta", fallback);
}

}  // namespace

void read_attention(const Fields& f, HfModel& m) {
  m.heads = f.integer("num_attention_heads");
  m.kv_heads = f.integer_or("num_key_value_heads", m.heads);
  if (m.heads % m.kv_heads != 0)
    f.fail("num_key_value_heads", std::to_string(m.kv_heads) + " does not divide num_attention_heads " +
                                      std::to_string(m.heads));
  const char* dim_field = f.has("head_dim") ? "head_dim" : "attention_head_dim";
  if (f.has(dim_field)) {
    m.head_dim = f.integer(dim_field);
  } else {
    if (m.hidden % m.heads != 0)
      f.fail("head_dim", "missing, and hidden_size " + std::to_string(m.hidden) +
                             " is not a multiple of num_attention_heads " + std::to_string(m.heads));
    m.head_dim = m.hidden / m.heads;
  }
  m.rope_theta = f.number_or("rope_theta", 10000);
}

void read_sliding(const Fields& f, HfModel& m) {
  const int64_t L = static_cast<int64_t>(m.mixers.size());
  m.sliding.assign(static_cast<size_t>(L), false);
  if (m.model_type == "llama") return;
  const bool gpt_oss = m.model_type == "gpt_oss";
  m.sliding_window = f.has("sliding_window") ? f.integer("sliding_window") : (gpt_oss ? 128 : 0);
  if (gpt_oss && !f.has("layer_types")) {
    for (int64_t i = 0; i < L; i += 2) m.sliding[static_cast<size_t>(i)] = true;  // transformers' default
  } else if (f.has("layer_types")) {
    const auto& t = f.j["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != L)
      f.fail("layer_types", "expected a list of " + std::to_string(L) + " entries (num_hidden_layers), got " +
                                f.shown("layer_types"));
    for (int64_t i = 0; i < L; ++i) {
      const auto& e = t[static_cast<size_t>(i)];
      if (!e.is_string() || (e != "sliding_attention" && e != "full_attention"))
        f.fail("layer_types[" + std::to_string(i) + "]",
               "expected \"sliding_attention\" or \"full_attention\", got " + e.dump());
      m.sliding[static_cast<size_t>(i)] = e == "sliding_attention";
    }
    if (m.sliding_layers() > 0 && m.sliding_window == 0)
      f.fail("sliding_window", "missing, but layer_types has sliding_attention layers");
  } else if (m.sliding_window > 0) {
    int64_t first = 0;  // mistral: every layer
    if (m.model_type == "qwen2" || m.model_type == "qwen3") {
      // transformers: sliding only with use_sliding_window, on layers >= max_window_layers.
      if (!f.boolean_or("use_sliding_window", false)) first = L;
      else first = f.integer_or("max_window_layers", 0, 0);
    }
    for (int64_t i = first; i < L; ++i) m.sliding[static_cast<size_t>(i)] = true;
  }
  if (m.sliding_layers() == 0) m.sliding_window = 0;
}

void read_dense(const Fields& f, HfModel& m) {
  read_attention(f, m);
  m.mixers.assign(static_cast<size_t>(m.blocks), 'A');
  m.ffn = f.integer("intermediate_size");
  m.mlp_layers = m.blocks;
  read_sliding(f, m);
}

void read_gpt_oss(const Fields& f, HfModel& m) {
  m.mixers.assign(static_cast<size_t>(m.blocks), 'A');
  read_attention(f, m);
  m.rope_theta = rope_theta_of(f, 150000);  // transformers' default_theta for gpt_oss
  read_sliding(f, m);
  m.attention.sinks = 1;  // every gpt-oss attention layer has one learned sink logit per head
  m.mlp_layers = m.moe_layers = m.blocks;
  m.experts = f.integer("num_local_experts");
  m.experts_per_token = f.has("num_experts_per_tok") ? f.integer("num_experts_per_tok") : f.integer("experts_per_token");
  m.ffn = f.integer("intermediate_size");  // one expert's; the test model's dense MLP runs one expert's width
}

void read_mla_moe(const Fields& f, HfModel& m) {
  m.mixers.assign(static_cast<size_t>(m.blocks), 'A');
  m.heads = f.integer("num_attention_heads");
  m.kv_heads = f.integer_or("num_key_value_heads", m.heads);
  if (m.kv_heads != m.heads)
    f.fail("num_key_value_heads", std::to_string(m.kv_heads) + " is not num_attention_heads " + std::to_string(m.heads) +
                                      " (MLA up-projects one K and V per query head)");
  MlaDims& d = m.attention.mla;
  d.kv_lora_rank = f.integer("kv_lora_rank");
  d.qk_rope_head_dim = f.integer("qk_rope_head_dim");
  d.qk_nope_head_dim = f.integer("qk_nope_head_dim");
  d.v_head_dim = f.integer("v_head_dim");
  if (d.qk_rope_head_dim % 2 != 0) f.fail("qk_rope_head_dim", "expected an even number, got " + f.shown("qk_rope_head_dim"));
  m.q_lora_rank = f.integer_or("q_lora_rank", 0, 0);
  m.head_dim = d.qk_head_dim();
  m.rope_theta = rope_theta_of(f, 10000);
  m.sliding.assign(m.mixers.size(), false);
  m.mlp_layers = m.blocks;
  m.experts = f.integer_or("n_routed_experts", 0, 0);
  m.ffn = f.integer("intermediate_size");
  m.mtp_layers = f.integer_or("num_nextn_predict_layers", 0, 0);
  if (m.experts == 0) return;
  const int64_t first_dense = f.integer_or("first_k_dense_replace", 0, 0), freq = f.integer_or("moe_layer_freq", 1);
  for (int64_t i = first_dense; i < m.blocks; ++i) m.moe_layers += i % freq == 0 ? 1 : 0;
  m.experts_per_token = f.integer("num_experts_per_tok");
  m.shared_experts = f.integer_or("n_shared_experts", 0, 0);
  // The test model has one dense MLP per layer: an MoE layer's per-token width is one expert's.
  if (m.moe_layers > 0) m.ffn = f.integer("moe_intermediate_size");
}

void read_glm4_moe(const Fields& f, HfModel& m) {
  m.mixers.assign(static_cast<size_t>(m.blocks), 'A');
  read_attention(f, m);
  m.rope_theta = rope_theta_of(f, 10000);
  // transformers: partial_rotary_factor at the top level (GLM-4.5's files) or in rope_parameters, 0.5 when
  // neither gives it (Glm4MoeConfig's backward-compatible default).
  m.partial_rotary_factor = 0.5;
  if (f.has("partial_rotary_factor")) {
    m.partial_rotary_factor = f.number_or("partial_rotary_factor", 0.5);
  } else if (f.has("rope_parameters") && f.j["rope_parameters"].is_object() &&
             f.j["rope_parameters"].contains("partial_rotary_factor")) {
    const auto& v = f.j["rope_parameters"]["partial_rotary_factor"];
    if (!v.is_number() || !(v.get<double>() > 0))
      f.fail("rope_parameters.partial_rotary_factor", "expected a positive number");
    m.partial_rotary_factor = v.get<double>();
  }
  if (m.partial_rotary_factor > 1)
    f.fail("partial_rotary_factor", "expected a fraction in (0, 1], got " + f.shown("partial_rotary_factor"));
  if (static_cast<int64_t>(std::llround(static_cast<double>(m.head_dim) * m.partial_rotary_factor)) % 2 != 0)
    f.fail("partial_rotary_factor", "rotates an odd number of head_dim " + std::to_string(m.head_dim) + "'s channels");
  m.sliding.assign(m.mixers.size(), false);
  m.mlp_layers = m.blocks;
  m.ffn = f.integer("intermediate_size");
  m.experts = f.integer_or("n_routed_experts", 0, 0);
  m.mtp_layers = f.integer_or("num_nextn_predict_layers", 0, 0);
  if (m.experts == 0) return;
  // Glm4MoeDecoderLayer: layer i is MoE iff i >= first_k_dense_replace (transformers' default 1).
  const int64_t first_dense = f.integer_or("first_k_dense_replace", 1, 0);
  if (first_dense > m.blocks)
    f.fail("first_k_dense_replace",
           std::to_string(first_dense) + " is more than num_hidden_layers " + std::to_string(m.blocks));
  m.moe_layers = m.blocks - first_dense;
  m.experts_per_token = f.integer("num_experts_per_tok");
  if (m.experts_per_token > m.experts)
    f.fail("num_experts_per_tok",
           std::to_string(m.experts_per_token) + " is more than n_routed_experts " + std::to_string(m.experts));
  m.shared_experts = f.integer_or("n_shared_experts", 1, 0);
  // As deepseek_v3: ffn is one routed expert's width; the dense layers' is dense_ffn (hf_config.cpp).
  if (m.moe_layers > 0) m.ffn = f.integer("moe_intermediate_size");
}

void read_dsa(const Fields& f, HfModel& m) {
  read_mla_moe(f, m);
  const bool glm = f.model_type() == "glm_moe_dsa";
  DsaConfig& d = m.attention.dsa;
  d.index_heads = f.integer_or("index_n_heads", glm ? 32 : 64);
  d.index_head_dim = f.integer_or("index_head_dim", 128);
  d.topk = f.integer_or("index_topk", 2048);
  d.scoring_relu = true;
  if (d.index_head_dim <= m.attention.mla.qk_rope_head_dim)
    f.fail("index_head_dim", "must exceed qk_rope_head_dim " + std::to_string(m.attention.mla.qk_rope_head_dim) +
                                 " (the indexer's RoPE covers its first qk_rope_head_dim dims)");
  // GLM-5's indexer_types (GlmMoeDsaConfig.__post_init__): the list itself, else index_topk_pattern (a
  // string of F / S, or a list), else index_topk_freq (default 1) with index_skip_topk_offset (default 2):
  // layer i full iff max(i - offset + 1, 0) % freq == 0. deepseek_v32: every layer full.
  if (!glm) return;
  const auto L = static_cast<size_t>(m.blocks);
  std::vector<DsaIndexerKind> kinds;
  std::string field;
  const auto kind_of = [&](const std::string& where, const std::string& v) {
    if (v == "full" || v == "F") return DsaIndexerKind::full;
    if (v == "shared" || v == "S") return DsaIndexerKind::shared;
    f.fail(where, "unknown indexer type \"" + v + "\"; known: full, shared (F, S in index_topk_pattern)");
  };
  for (const char* key : {"indexer_types", "index_topk_pattern"}) {
    if (!f.has(key) || f.j[key].is_null()) continue;
    field = key;
    const auto& v = f.j[key];
    if (v.is_string() && field == "index_topk_pattern") {
      const auto p = v.get<std::string>();
      for (size_t i = 0; i < p.size(); ++i) kinds.push_back(kind_of(field + "[" + std::to_string(i) + "]", p.substr(i, 1)));
    } else if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) f.fail(field + "[" + std::to_string(i) + "]", "expected \"full\" or \"shared\"");
        kinds.push_back(kind_of(field + "[" + std::to_string(i) + "]", v[i].get<std::string>()));
      }
    } else {
      f.fail(field, "expected a list of \"full\" / \"shared\", got " + f.shown(key));
    }
    if (kinds.size() != L)
      f.fail(field, std::to_string(kinds.size()) + " entries for num_hidden_layers " + std::to_string(L));
    break;
  }
  if (field.empty()) {
    field = "index_topk_freq";
    const int64_t freq = std::max<int64_t>(f.integer_or("index_topk_freq", 1), 1);
    const int64_t offset = f.integer_or("index_skip_topk_offset", 2, 0);
    for (size_t i = 0; i < L; ++i)
      kinds.push_back(std::max<int64_t>(static_cast<int64_t>(i) - offset + 1, 0) % freq == 0 ? DsaIndexerKind::full
                                                                                              : DsaIndexerKind::shared);
  }
  if (!kinds.empty() && kinds.front() == DsaIndexerKind::shared)
    f.fail(field, "the first layer is shared (a shared indexer layer reuses the previous full layer's picks)");
  if (std::count(kinds.begin(), kinds.end(), DsaIndexerKind::shared) > 0) d.indexer_kinds = kinds;
}

}  // namespace cpbench::hf
