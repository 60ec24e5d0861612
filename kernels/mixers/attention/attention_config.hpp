#pragma once
// The attention mixer's own keys (model.attention.<field>).
#include <cstdint>
#include <vector>

#include "kernels/attention/mla_dims.hpp"
#include "kernels/attention/sink.hpp"
#include "kernels/mixers/attention/attention_kind.hpp"
#include "kernels/mixers/attention/dsa/dsa_config.hpp"
#include "kernels/mixers/config_field.hpp"

namespace cpbench {

struct AttentionConfig {
  // model.attention.sinks: one learned sink logit per query head in every query's softmax (gpt-oss),
  // drawn N(sink_mean, sink_std) (kernels/attention/sink.hpp). 0 / 1.
  int64_t sinks = 0;
  // model.attention.sinks: {mean: M, std: S}: the sinks' initial distribution (default N(0,
  // kSinkInitStddev)); large sinks (|s| ~ 20) are where a dropped or doubled sink shows in bf16 (TE #2541).
  double sink_mean = 0, sink_std = kernels::kSinkInitStddev;
  // model.attention.layer_types: one kind per attention layer, in layer order (attention_kind.hpp);
  // empty: every attention layer full. Not a ConfigField (a list; read by the scenario parser and
  // hf_config).
  std::vector<AttentionKind> layer_kinds;
  // model.attention.window: the sliding layers' window N in tokens (>= 1 when a layer is sliding, else 0).
  int64_t window = 0;
  // model.attention.mla: {kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim}: every attention
  // layer is MLA (kernels/attention/mla.hpp); all zero: plain GQA attention. Not ConfigFields (a
  // mapping of its own; read by the scenario parser).
  MlaDims mla;
  // model.attention.mla_wire: what the transports move, every head's K and V or the latent.
  MlaWire mla_wire = MlaWire::expanded;
  // model.attention.dsa: DeepSeek Sparse Attention on the MLA layers (dsa/dsa_config.hpp); a mapping of its
  // own, read by the scenario parser and the deepseek_v32 / glm_moe_dsa config readers.
  DsaConfig dsa;
  [[nodiscard]] bool is_mla() const { return mla.kv_lora_rank > 0; }
  [[nodiscard]] std::vector<ConfigField> fields() { return {{"sinks", &sinks, 0, /*flag=*/true}}; }
  // The kind of the `index`-th attention layer (full when layer_kinds is empty).
  [[nodiscard]] AttentionKind kind_of(int64_t index) const {
    return layer_kinds.empty() ? AttentionKind::full : layer_kinds[static_cast<size_t>(index)];
  }
  [[nodiscard]] bool has_sliding() const {
    for (AttentionKind k : layer_kinds)
      if (k == AttentionKind::sliding) return true;
    return false;
  }
};

}  // namespace cpbench
