// The `G` mixer's registry entry: Gated DeltaNet layers (gdn.hpp) with head_parallel or state_passing CP
// (the `gdn_cp` axis), its negative control and its costs for the planner and admission.
//
// Costs of one layer on one rank, P the padded row, s = P / W, Hv value heads, dk / dv head dims, Q the
// chunk, hidden d, e the element size (docs/planner.md, "Gated DeltaNet layers"):
//   delta rule FLOPs (fwd)  delta_rule_cp_flops (gdn_cp_costs.hpp)
//   dense FLOPs (fwd)       2 s d in_proj_width + 2 s Hv dv d (out_proj) + 2 K s conv_channels (conv)
//   bytes                   linear_cp_bytes of gdn_cp_terms (gdn_cp_costs.hpp)
//   memory                  proj, conv output and o in e, the chunked form's 3 fp32 [tokens, Q] matrices per
//                           value head, one fp32 state per chunk, + linear_cp_extra_memory_bytes of gdn_cp_terms
#include <algorithm>
#include <cmath>

#include "kernels/mixers/gdn/delta_rule_mixer.hpp"
#include "kernels/mixers/gdn/gdn.hpp"

namespace cpbench {
namespace {

class GdnMixer final : public DeltaRuleMixerOf<GdnConfig, false> {
 public:
  GdnMixer() : DeltaRuleMixerOf({'G', "gdn", "GDN", "Gated DeltaNet", "gdn", "gdn_cp", "tiny-gdn"}) {}
  [[nodiscard]] std::vector<MixerControl> controls() const override {
    return {state_dropped_control("gdn_state_dropped", "Gated DeltaNet layers")};
  }
  // Qwen3-Next and Qwen3.5's text model: layer_types "linear_attention".
  [[nodiscard]] std::string hf_layer_name(const std::string& model_type) const override {
    for (const char* t : {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})
      if (model_type == t) return "linear_attention";
    return "";
  }
  void read_hf(const ConfigSource& f, MixerConfigs& configs) const override {
    GdnConfig& c = configs.gdn;  // chunk stays the layer's default: config.json does not give one
    c.key_heads = f.integer("linear_num_key_heads");
    c.value_heads = f.integer("linear_num_value_heads");
    c.key_head_dim = f.integer("linear_key_head_dim");
    c.value_head_dim = f.integer("linear_value_head_dim");
    c.conv = f.integer("linear_conv_kernel_dim");
    if (c.value_heads % c.key_heads != 0)
      f.fail("linear_num_value_heads", std::to_string(c.value_heads) + " is not a multiple of linear_num_key_heads " +
                                           std::to_string(c.key_heads) + " (value heads share key heads in groups)");
  }
  [[nodiscard]] std::string plan_layers_name() const override { return description(); }
  [[nodiscard]] std::string sizes_text(const MixerConfigs& configs) const override {
    const GdnConfig& c = configs.gdn;
    return "GDN " + std::to_string(c.key_heads) + " key / " + std::to_string(c.value_heads) + " value heads x " +
           std::to_string(c.key_head_dim) + " / " + std::to_string(c.value_head_dim) + ", conv " +
           std::to_string(c.conv) + ", chunk " + std::to_string(c.chunk);
  }
  [[nodiscard]] std::string recurrence_name() const override { return "delta rule"; }
  // The case's model FLOPs: the chunked form over the whole row on one rank (no strategy's extra work),
  // per token from delta_rule_cp_flops; backward about twice the forward (the scans' convention).
  [[nodiscard]] double train_flops_per_token(const MixerConfigs& c, int64_t seq_len) const override {
    if (seq_len <= 0) return 0;
    return 3.0 * delta_rule_cp_flops(GdnCpStrategy::head_parallel, gdn_cp_shape(c.gdn, linear_cp_shape(1, seq_len, 1, c.gdn.conv, 8)), c.gdn.chunk, false) /
           static_cast<double>(seq_len);
  }
  // Weights; what each layer keeps under the strategy (layers_term: proj, conv output, o, the chunked
  // form's intra-chunk matrices, one state per chunk, the strategy's buffers), the reference rank's too.
  [[nodiscard]] std::vector<MixerMemoryTerm> memory_terms(const MixerConfigs& configs,
                                                          const MemoryQuery& q) const override {
    const GdnConfig& c = configs.gdn;
    const double L = static_cast<double>(q.layers), H = q.hidden, Hv = static_cast<double>(c.value_heads);
    const double Q = static_cast<double>(std::max<int64_t>(1, std::min<int64_t>(c.chunk, static_cast<int64_t>(q.seq_len))));
    const double guess = L * q.batch * q.local_len * q.cp *
                         (static_cast<double>(c.in_proj_width() + c.conv_channels()) + Hv * Q +
                          static_cast<double>(c.value_heads * c.key_head_dim * c.value_head_dim)) * q.accum_bytes;
    return {{"GDN weights", furthest_key({{"model.hidden", q.hidden_ratio}, {"model.layers", q.layers_ratio}}),
             3 * L *
                 (static_cast<double>(c.in_proj_width()) * H + static_cast<double>(c.conv_channels() * c.conv) +
                  2 * Hv + static_cast<double>(c.value_head_dim) + H * static_cast<double>(c.value_dim()) + H) *
                 q.elem_bytes},
            layers_term(configs, q,
                        furthest_key({{"batch.seq_len", q.seq_ratio}, {"batch.batch_size", q.batch_ratio},
                                      {"model.gdn.value_heads", Hv / 4}}),
                        guess)};
  }
 protected:
  // The chunked form's 3 fp32 [tokens, Q] matrices per value head and one fp32 state per chunk.
  [[nodiscard]] int64_t working_set_bytes(const MixerConfigs& configs, const LayerCostQuery& q, int64_t s,
                                          int64_t Q) const override {
    const GdnConfig& c = configs.gdn;
    return q.rows * s * c.value_heads * Q * 3 * 4 +
           q.rows * ((s + Q - 1) / Q) * c.value_heads * c.key_head_dim * c.value_head_dim * 4;
  }
  [[nodiscard]] std::string suffix_prefix() const override { return "/gdn_"; }
};

}  // namespace

std::unique_ptr<Mixer> make_gdn_mixer() { return std::make_unique<GdnMixer>(); }

}  // namespace cpbench
