#pragma once
// A model described by its Hugging Face `config.json`, parsed once into a typed struct (HfModel):
// the fields of the families users run long-context training on. Nothing downstream reads JSON.
//
//   llama, mistral, qwen2, qwen3   hidden_size, num_hidden_layers, num_attention_heads,
//                                  num_key_value_heads (default: the query heads, as transformers),
//                                  head_dim (default hidden_size / num_attention_heads),
//                                  intermediate_size, vocab_size, rope_theta (default 10000);
//                                  sliding_window and which layers use it: `layer_types`
//                                  ("sliding_attention") when given; else mistral: every layer when
//                                  sliding_window is set; qwen2 / qwen3: layers >= max_window_layers
//                                  when use_sliding_window is true; llama: none
//   nemotron_h                     hybrid_override_pattern (one entry per block: M Mamba-2, * attention,
//                                  - MLP, E MoE MLP; its length is num_hidden_layers), mamba_num_heads,
//                                  mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size
//                                  (optional), attention as above (head_dim or attention_head_dim)
//   jamba                          attn_layer_period / attn_layer_offset (layer i is attention iff
//                                  i % period == offset, else Mamba), mamba_d_state, mamba_d_conv,
//                                  mamba_expand, num_experts / num_experts_per_tok /
//                                  expert_layer_period / expert_layer_offset (optional; MoE MLPs).
//                                  Jamba's layers are Mamba-1: one channel per head (heads = expand x
//                                  hidden, head_dim 1), one B/C group; their A is per channel and
//                                  state where Mamba-2's is one scalar per head, which changes no size
//   mamba2                         hidden_size, num_hidden_layers, num_heads, head_dim, state_size,
//                                  n_groups, conv_kernel, vocab_size, chunk_size (optional); no MLP
//   qwen3_next, qwen3_5_text,      Gated DeltaNet hybrids: `layer_types` ("linear_attention" = G,
//   qwen3_5_moe_text               "full_attention" = A; any other entry is refused naming it), else
//                                  full_attention_interval (default 4: layer i is attention iff
//                                  (i+1) % interval == 0); linear_num_key_heads, linear_num_value_heads,
//                                  linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim;
//                                  attention as llama with head_dim; partial_rotary_factor (top level or
//                                  in rope_parameters, default 0.25 as transformers); MoE when
//                                  num_experts > 0 (moe_intermediate_size, num_experts_per_tok; layers in
//                                  mlp_only_layers keep a dense MLP of intermediate_size)
//   qwen3_5, qwen3_5_moe           the multimodal wrapper: its `text_config` object is read as above
//   kimi_linear                    linear_attn_config: kda_layers (K) / full_attn_layers (A), 1-based, num_heads,
//                                  head_dim (dk = dv = gate rank), short_conv_kernel_size; MLA as plain attention
//                                  (qk_nope + qk_rope dims); MoE after first_k_dense_replace dense layers
//   gpt_oss                        sliding / full layer_types, sliding_window, head_dim, learned sinks (every
//                                  layer), MoE on every layer (num_local_experts)
//   deepseek_v3, kimi_k2           MLA on every layer (attention.mla), q_lora_rank, MoE after
//                                  first_k_dense_replace dense layers (routed + shared experts); the
//                                  attention families' readers (hf_attention_families.hpp) list the fields
//   glm4_moe                       GQA attention on every layer, partial rotary, MoE after
//                                  first_k_dense_replace dense layers (routed + shared experts); MTP
//                                  modules recorded, not counted (hf_attention_families.hpp)
//   every family                   tie_word_embeddings (default false); the dense MLP layers' width
//                                  (intermediate_size) in dense_ffn when some MLP layers are not MoE
//   deepseek_v32, glm_moe_dsa      as deepseek_v3, plus DeepSeek Sparse Attention on every layer
//                                  (attention.dsa: index_n_heads, index_head_dim, index_topk);
//                                  glm_moe_dsa's shared indexer layers: indexer_types,
//                                  index_topk_pattern, index_topk_freq / index_skip_topk_offset
//
// Errors are UsageError, one line naming the file and the field: a missing or mistyped field, an
// unknown model_type (listing the known ones), a pattern whose length is not num_hidden_layers.
// The shipped configs (scenarios/models/*.json, the published dimensions of real models, no weights)
// are compiled into the binary and reachable by name (shipped_model).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/mixers/mixer_configs.hpp"

namespace cpbench {

struct HfModel : MixerConfigs {
  std::string name;        // the preset name or the file's stem ("nemotron-h-8b")
  std::string file;        // the file as given, for messages ("" when built in code)
  std::string model_type;  // one of known_model_types()
  int64_t hidden = 0, vocab = 0;
  int64_t blocks = 0;      // num_hidden_layers as the file counts them (Nemotron-H: every M, *, -, E entry)
  std::string mixers;      // one letter per mixer layer in order (the registry's letters, kernels/mixers/mixer.hpp)
  int64_t mlp_layers = 0;  // MLP blocks (one per layer, Nemotron-H: its - and E entries, Mamba-2: none)
  int64_t moe_layers = 0;  // of which mixture-of-experts
  int64_t ffn = 0;         // intermediate_size of one (expert) MLP; 0 when the model has none
  int64_t experts = 0, experts_per_token = 0;  // MoE layers only (routed experts)
  int64_t shared_experts = 0;  // experts every token also runs (DeepSeek-V3's n_shared_experts)
  // Attention (0 when the model has no attention layer).
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // MLA: head_dim is q/k's (qk_nope + qk_rope)
  int64_t q_lora_rank = 0;  // MLA's query LoRA rank (0 = none); CP moves no query, kept for the record
  double rope_theta = 10000;
  int64_t sliding_window = 0;  // tokens; 0 = none
  std::vector<bool> sliding;   // per mixer layer: an attention layer that uses sliding_window
  // The other mixers' sizes are the MixerConfigs members, each read by its mixer (Mixer::read_hf).
  double partial_rotary_factor = 1.0;  // the fraction of head_dim RoPE rotates (Qwen3-Next: 0.25)
  // For the whole step's parameter count (the test model ignores them):
  bool tied_embeddings = false;  // tie_word_embeddings: the LM head is the embedding matrix (Qwen3-4B)
  int64_t dense_ffn = 0;         // intermediate_size of the dense MLP layers (mlp_layers - moe_layers of them)
  int64_t mtp_layers = 0;        // num_nextn_predict_layers: multi-token-prediction modules, not in `mixers`

  [[nodiscard]] int64_t attention_layers() const;
  [[nodiscard]] int64_t layers_of(char letter) const;  // layers of the mixer with this letter
  [[nodiscard]] int64_t sliding_layers() const;
};

// The model_types read (in this order in messages).
[[nodiscard]] const std::vector<std::string>& known_model_types();

// `text`: the config.json's contents; `file`: how messages name it; `name`: the model's name.
[[nodiscard]] HfModel parse_hf_config(const std::string& text, const std::string& file, const std::string& name);
// Reads and parses `path` (UsageError when it cannot be read). The name is the file's stem, or the
// parent folder's name when the file is called config.json (a checkout of the model's repository).
[[nodiscard]] HfModel read_hf_config(const std::string& path);

// A config shipped in scenarios/models/ and compiled in (the generated shipped_models.cpp).
struct ShippedModel {
  const char* name;  // file stem: the preset name
  const char* path;  // "scenarios/models/<name>.json"
  const char* text;  // the file's contents
};
[[nodiscard]] const std::vector<ShippedModel>& shipped_models();
[[nodiscard]] std::vector<std::string> shipped_model_names();
// nullptr when `name` is no shipped model.
[[nodiscard]] const ShippedModel* find_shipped_model(const std::string& name);
// The shipped model `name`, parsed; UsageError listing the names when there is none.
[[nodiscard]] HfModel shipped_model(const std::string& name);
// A path (ends in .json or holds a '/') is read as a file, anything else is a shipped model's name.
[[nodiscard]] HfModel model_from_config_or_name(const std::string& path_or_name);

// Explicit sizes that replace the file's (0 / empty = keep the file's): a scenario's model keys or the
// planner's flags. `key` names them in messages ("model." or "--").
struct ModelOverrides {
  std::string key = "model.";
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, ffn = 0;
  std::string mixers;
  int64_t ssm_heads = 0, ssm_head_dim = 0, ssm_state = 0, ssm_groups = 0, ssm_conv = 0;
  [[nodiscard]] bool any() const;
};
// `m` shrunk or grown by `o`, keeping what o does not name in proportion (so a CPU run keeps a real
// model's head ratios and layer pattern):
//   layers without mixers   mixers = resample_mixers(m.mixers, layers); MLP blocks scale with the mixer
//                           layers. Sliding flags (layers or mixers given): the file's attention layers'
//                           sliding / full pattern resampled (resample_layer_pattern) onto the new
//                           attention layers, so both kinds keep their share; UsageError naming
//                           <key>layers (or <key>mixers) and both counts when too few attention layers
//                           are left to keep both
//                           DSA's full / shared indexer layers (attention.dsa.indexer_kinds) the
//                           same way, then the first full layer moved to the front if a shared one
//                           would open the model (it needs a full layer before it)
//   heads without kv_heads  kv_heads = max(1, heads / (m.heads / m.kv_heads)): query heads per kv head kept
//   hidden or heads         head_dim = hidden / heads unless head_dim is given
//   ssm_heads w/o groups    groups = max(1, ssm_heads / (m.ssm.heads / m.ssm.groups))
// The result is not validated here (ModelConfig::validate and the planner's checks name the key).
[[nodiscard]] HfModel with_overrides(const HfModel& m, const ModelOverrides& o);

// A per-layer pattern (one character per layer, each a kind: a mixer's letter, or S / F for an attention
// layer's sliding / full) resampled to `n` layers, keeping each kind's share and the file's interleave:
//   counts  kind i, c_i of the L layers, gets a_i: the largest-remainder rounding of n c_i / L (a tie goes
//           to the kind seen first), then at least one layer of every kind, taken from the kind with the
//           most (the first such)
//   layers  kind i's k-th is the file's layer floor((2k + 1) c_i / (2 a_i)) of that kind's c_i, and the
//           picks keep the file's order: for n < L the result is a subsequence of the file's layers
// Identity when n == L; "" when n <= 0. Throws UsageError "<key>: <what> resampled to n cannot keep each
// kind (c_1 <kind_name(k_1)>, c_2 ...); give at least K ..." when n is below the number of kinds K.
// gpt-oss's 24 alternating "SFSF..." at n = 4 -> "SFSF", n = 3 -> "SFS"; n = 1 refused.
[[nodiscard]] std::string resample_layer_pattern(const std::string& pattern, int64_t n, const std::string& key,
                                                 const std::string& what,
                                                 const std::function<std::string(char)>& kind_name);
// `mixers` (the registry's letters) resampled to `n` layers by resample_layer_pattern, a kind named by its
// mixer's registry name. Nemotron-H-8B's 28 mixers (4 attention) at n = 4 -> "MMAM"; Jamba's 32
// (period 8, offset 4) at n = 8 -> "MMMMAMMM". "" (every layer attention) -> n attention layers.
[[nodiscard]] std::string resample_mixers(const std::string& mixers, int64_t n, const std::string& key = "layers",
                                          const std::string& what = "the mixer layers");

}  // namespace cpbench
