#pragma once
// The readers of the attention-only model families' config.json (internal to harness/model/; hf_config
// dispatches to them by model_type), and the attention fields every family with attention reads:
//
//   read_attention   num_attention_heads, num_key_value_heads (default: the query heads),
//                    head_dim / attention_head_dim (default hidden_size / heads), rope_theta
//   read_sliding     sliding_window and which layers use it (HfModel::sliding; hf_config.hpp lists the
//                    rules per model_type)
//   read_dense       llama, mistral, qwen2, qwen3: every layer attention + one dense MLP
//   read_gpt_oss     gpt_oss: layer_types (default: even layers sliding_attention, odd full_attention,
//                    as transformers), sliding_window (default 128), head_dim, a learned sink per head on
//                    every attention layer (attention.sinks), MoE on every layer: num_local_experts,
//                    num_experts_per_tok (or experts_per_token) of intermediate_size each
//   read_mla_moe     deepseek_v3 and kimi_k2 (Kimi K2 is DeepSeek-V3's architecture; transformers reads
//                    its config as deepseek_v3): every layer MLA (attention.mla: kv_lora_rank,
//                    qk_rope_head_dim, qk_nope_head_dim, v_head_dim; q_lora_rank kept, null = none);
//                    head_dim = qk_nope + qk_rope (the q/k head dim; a `head_dim` field is not read:
//                    transformers sets it to qk_rope_head_dim); MoE: layer i is MoE iff i >=
//                    first_k_dense_replace and i % moe_layer_freq == 0 (n_routed_experts,
//                    num_experts_per_tok, n_shared_experts, moe_intermediate_size); the other layers keep
//                    their dense MLP of intermediate_size
//   read_glm4_moe    glm4_moe (GLM-4.5, GLM-4.5-Air): every layer GQA attention (read_attention: head_dim
//                    given, 128, not hidden / heads), partial_rotary_factor (top level or rope_parameters,
//                    default 0.5 as transformers), MoE as deepseek_v3 without moe_layer_freq: layer i is MoE
//                    iff i >= first_k_dense_replace (default 1), n_routed_experts, num_experts_per_tok,
//                    n_shared_experts (default 1), moe_intermediate_size. num_nextn_predict_layers (the MTP
//                    modules, also deepseek_v3's) is kept in HfModel::mtp_layers and NOT counted as layers:
//                    transformers drops their weights on load (model.layers.46.* for the Air) and the
//                    training stacks checked here (prime-rl's SFT) do not train them
//   read_dsa         deepseek_v32 and glm_moe_dsa: read_mla_moe, then DeepSeek Sparse Attention on every
//                    layer (attention.dsa): index_n_heads (default 64 / GLM-5 32), index_head_dim (128),
//                    index_topk (2048), the indexer's ReLU (both apply it); GLM-5's shared indexer layers
//                    (attention.dsa.indexer_kinds, as GlmMoeDsaConfig: indexer_types, else
//                    index_topk_pattern "FSS..." or a list, else layer i full iff max(i - index_skip_topk_offset
//                    (2) + 1, 0) % index_topk_freq (1) == 0; a first layer shared is refused, naming the field;
//                    kept only when some layer is shared)
#include "harness/model/hf_config.hpp"
#include "harness/model/hf_fields.hpp"

namespace cpbench::hf {

void read_attention(const Fields& f, HfModel& m);
// Which attention layers use the sliding window (mixer layers all 'A' here).
void read_sliding(const Fields& f, HfModel& m);
void read_dense(const Fields& f, HfModel& m);
void read_gpt_oss(const Fields& f, HfModel& m);
void read_mla_moe(const Fields& f, HfModel& m);
void read_glm4_moe(const Fields& f, HfModel& m);
void read_dsa(const Fields& f, HfModel& m);

}  // namespace cpbench::hf
