#pragma once
// The sizes of the `M` mixer's layers (Mamba-2; mamba.hpp runs them): scenario keys model.ssm.<field>.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/mixers/config_field.hpp"

namespace cpbench {

// The chunk length the layer scans with (Q of ssm_scan) unless model.ssm.chunk says otherwise.
inline constexpr int64_t kSsmChunk = 64;

struct SsmConfig {
  int64_t heads = 4;     // H, SSM heads
  int64_t head_dim = 16;  // P; d_inner = H * P
  int64_t state = 16;    // N, state size per head
  int64_t groups = 2;    // G, B/C groups; divides H
  int64_t conv = 4;      // K, depthwise causal conv1d width
  int64_t chunk = kSsmChunk;  // Q of the chunked scan (a real model's config.json chunk_size)
  // As read from a published model: "mamba2", or "mamba1" (Jamba: one channel per head, one B/C group; its
  // per-channel A changes no size); "" for the test model.
  std::string kind;
  [[nodiscard]] int64_t d_inner() const { return heads * head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return d_inner() + 2 * groups * state; }  // [x | B | C]
  [[nodiscard]] int64_t in_proj_width() const { return 2 * d_inner() + 2 * groups * state + heads; }
  [[nodiscard]] int64_t out_width() const { return d_inner(); }  // y, before the gate
  // Throws UsageError naming model.ssm.<key>.
  void validate() const;
  // "" when hidden-parallel CP over `cp` ranks can split this layer, else the one-line reason
  // (heads % cp != 0; groups neither dividing cp nor divisible by it).
  [[nodiscard]] std::string cp_unsupported_reason(int64_t cp) const;
  // The scenario keys, in the order they are documented.
  [[nodiscard]] std::vector<ConfigField> fields();
};

}  // namespace cpbench
