#pragma once
// MLA's dims, its wire and its formulas, without tensors (kernels/attention/mla.hpp has the maths and
// the layout of the latent): the attention mixer's config, the transports' bytes formulas and the
// planner read these.
#include <cstdint>
#include <string>

namespace cpbench {

enum class MlaWire { expanded, latent };
[[nodiscard]] const char* to_string(MlaWire wire);
// Throws UsageError "<where>: unknown mla_wire 'x'; known: expanded, latent".
[[nodiscard]] MlaWire parse_mla_wire(const std::string& name, const std::string& where);

struct MlaDims {
  int64_t kv_lora_rank = 0;      // r
  int64_t qk_rope_head_dim = 0;  // dr: the shared RoPE key's dim
  int64_t qk_nope_head_dim = 0;  // dn
  int64_t v_head_dim = 0;        // dv
  [[nodiscard]] int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  [[nodiscard]] int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  [[nodiscard]] bool operator==(const MlaDims&) const = default;
};

// K/V values one token puts on the wire (one source: the transports' bytes formulas and the planner).
[[nodiscard]] int64_t mla_expanded_elements_per_token(const MlaDims& d, int64_t heads);  // H*(dn+dr) + H*dv
[[nodiscard]] int64_t mla_latent_elements_per_token(const MlaDims& d);                   // r + dr
[[nodiscard]] int64_t mla_wire_elements_per_token(const MlaDims& d, int64_t heads, MlaWire wire);
// Forward FLOPs of up-projecting `tokens` tokens' latents to `heads` heads' k_nope and v: 2 r H (dn + dv)
// per token (the backward's two gradients cost twice that).
[[nodiscard]] double mla_up_projection_flops(const MlaDims& d, int64_t heads, double tokens);

}  // namespace cpbench
