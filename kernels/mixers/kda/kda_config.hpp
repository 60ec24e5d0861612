#pragma once
// The sizes of the `K` mixer's layers (Kimi Delta Attention; kda.hpp runs them): scenario keys
// model.kda.<field>, config.json's linear_attn_config.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/mixers/config_field.hpp"
#include "kernels/mixers/gdn/gdn_config.hpp"  // kGdnChunk

namespace cpbench {

struct KdaConfig {
  int64_t heads = 4;            // H (linear_attn_config.num_heads): q, k, v and the state, one per head
  int64_t key_head_dim = 16;    // dk (linear_attn_config.head_dim)
  int64_t value_head_dim = 16;  // dv (linear_attn_config.head_dim)
  int64_t conv = 4;             // K (linear_attn_config.short_conv_kernel_size)
  int64_t chunk = kGdnChunk;    // Q of the chunked form
  int64_t gate_rank = 16;       // r of the low-rank gate projections hidden -> r -> H*dk (Kimi Linear: head_dim)
  [[nodiscard]] int64_t key_dim() const { return heads * key_head_dim; }
  [[nodiscard]] int64_t value_dim() const { return heads * value_head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q | k | v]
  // What the layer's delta-rule part takes per token: [q | k | v | b | f] (b: H, f: the gate, H*dk).
  [[nodiscard]] int64_t proj_width() const { return conv_channels() + heads + key_dim(); }
  // The dense projections' width from hidden: [q | k | v | b] and the two low-rank gates' first factors.
  [[nodiscard]] int64_t in_proj_width() const { return conv_channels() + heads + 2 * gate_rank; }
  [[nodiscard]] int64_t out_width() const { return value_dim(); }  // o, before the gated norm
  // Throws UsageError naming model.kda.<key>.
  void validate() const;
  // "" when head-parallel CP over `cp` ranks can split this layer, else the one-line reason naming the key.
  [[nodiscard]] std::string cp_unsupported_reason(int64_t cp) const;
  // The scenario keys, in the order they are documented.
  [[nodiscard]] std::vector<ConfigField> fields();
};

}  // namespace cpbench
