#pragma once
// The sizes of the `G` mixer's layers (Gated DeltaNet; gdn.hpp runs them): scenario keys
// model.gdn.<field>, config.json's linear_* keys.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/mixers/config_field.hpp"

namespace cpbench {

// The chunk length the layer runs with unless model.gdn.chunk says otherwise (Qwen3-Next's 64).
inline constexpr int64_t kGdnChunk = 64;

struct GdnConfig {
  int64_t key_heads = 2;        // Hk (linear_num_key_heads)
  int64_t value_heads = 4;      // Hv (linear_num_value_heads), a multiple of Hk
  int64_t key_head_dim = 16;    // dk (linear_key_head_dim)
  int64_t value_head_dim = 16;  // dv (linear_value_head_dim)
  int64_t conv = 4;             // K (linear_conv_kernel_dim)
  int64_t chunk = kGdnChunk;    // Q of the chunked form
  [[nodiscard]] int64_t key_dim() const { return key_heads * key_head_dim; }
  [[nodiscard]] int64_t value_dim() const { return value_heads * value_head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q | k | v]
  [[nodiscard]] int64_t in_proj_width() const { return conv_channels() + value_dim() + 2 * value_heads; }
  [[nodiscard]] int64_t out_width() const { return value_dim(); }  // o, before the gated norm
  // Throws UsageError naming model.gdn.<key>.
  void validate() const;
  // "" when head-parallel CP over `cp` ranks can split this layer, else the one-line reason naming the key.
  [[nodiscard]] std::string cp_unsupported_reason(int64_t cp) const;
  // The scenario keys, in the order they are documented.
  [[nodiscard]] std::vector<ConfigField> fields();
};

}  // namespace cpbench
