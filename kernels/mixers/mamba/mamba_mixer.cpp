// The `M` mixer's registry entry: Mamba-2 layers (mamba.hpp) with hidden_parallel or state_passing CP
// (the `ssm_cp` axis), its negative controls and its costs for the planner and admission.
//
// Costs of one layer on one rank, P the padded row, s = P / W, H heads of dimension Ph, state N, G groups,
// conv width K, Q the chunk, hidden d, e the element size (docs/planner.md, "SSM layers"):
//   scan FLOPs (fwd)   hidden_parallel: ssm_scan_flops(P, Q, Ph, N) * P * H/W (every token, its heads)
//                      state_passing:   ssm_scan_flops(s, Q, Ph, N) * s * H + 2 Ph N * s * H (each token's
//                                       C times the state arriving at its chunk, the correction)
//   dense FLOPs (fwd)  2 s d (2 H Ph + 2 G N + H) (in_proj) + 2 s H Ph d (out_proj) + 2 K s (H Ph + 2 G N) (conv)
//   bytes              linear_cp_bytes of ssm_cp_terms (mamba_cp_costs.hpp)
//   memory             proj, conv output and y in e: R s (2 H Ph + 2 G N + H + H Ph + 2 G N + H Ph) e, one fp32
//                      state per chunk: R s/Q H Ph N 4, + linear_cp_extra_memory_bytes of ssm_cp_terms
#include <algorithm>
#include <cmath>

#include "kernels/mixers/linear/linear_mixer.hpp"
#include "kernels/mixers/mamba/mamba.hpp"

namespace cpbench {
namespace {

class MambaMixer final : public LinearMixerOf<SsmConfig> {
 public:
  MambaMixer() : LinearMixerOf({'M', "mamba", "SSM", "Mamba", "ssm", "ssm_cp", "tiny-hybrid"}) {}
  // Shrinking a real model's heads without naming its groups keeps its heads per group.
  void apply_sizes(MixerConfigs& c, const std::map<std::string, int64_t>& given, bool scaled) const override {
    const int64_t per_group = std::max<int64_t>(1, c.ssm.heads / std::max<int64_t>(1, c.ssm.groups));
    LinearMixer::apply_sizes(c, given, scaled);
    if (scaled && given.count("heads") && !given.count("groups"))
      c.ssm.groups = std::max<int64_t>(1, c.ssm.heads / per_group);
  }
  // nemotron_h's hybrid_override_pattern "M"; jamba's layers that attn_layer_period does not place; all of
  // model_type mamba2's.
  [[nodiscard]] std::string hf_layer_name(const std::string& model_type) const override {
    if (model_type == "nemotron_h") return "M";
    if (model_type == "jamba") return "other layers";
    return model_type == "mamba2" ? "every layer" : "";
  }
  void read_hf(const ConfigSource& f, MixerConfigs& configs) const override {
    SsmConfig& c = configs.ssm;
    if (f.model_type() == "jamba") {
      // Mamba-1: every inner channel is its own head of dimension 1; B and C are shared by all channels.
      c.heads = f.integer("mamba_expand") * f.integer("hidden_size");
      c.head_dim = 1, c.groups = 1, c.kind = "mamba1";
      c.state = f.integer("mamba_d_state");
      c.conv = f.integer("mamba_d_conv");
      return;
    }
    const bool nemotron = f.model_type() == "nemotron_h";
    c.kind = "mamba2";
    c.heads = f.integer(nemotron ? "mamba_num_heads" : "num_heads");
    c.head_dim = f.integer(nemotron ? "mamba_head_dim" : "head_dim");
    c.state = f.integer(nemotron ? "ssm_state_size" : "state_size");
    c.groups = f.integer("n_groups");
    c.conv = f.integer("conv_kernel");
    if (const int64_t chunk = f.integer_or("chunk_size", 0); chunk > 0) c.chunk = chunk;
    if (c.heads % c.groups != 0)
      f.fail("n_groups", std::to_string(c.groups) + " does not divide the " + std::to_string(c.heads) + " SSM heads");
  }
  [[nodiscard]] std::vector<MixerControl> controls() const override {
    return {{"ssm_rank_order", "load_balanced, SSM layers scan in rank order (chunk order not undone)",
             "scans_rank_order", "hidden_parallel", false},
            state_dropped_control("ssm_state_dropped", "SSM layers")};
  }
  // Forward per token and head from the scan's own count; backward about twice it (its convention).
  [[nodiscard]] double train_flops_per_token(const MixerConfigs& c, int64_t seq_len) const override {
    return 3.0 * ssm_scan_flops(seq_len, c.ssm.chunk, c.ssm.head_dim, c.ssm.state) * static_cast<double>(c.ssm.heads);
  }
  [[nodiscard]] std::string sizes_text(const MixerConfigs& configs) const override {
    const SsmConfig& c = configs.ssm;
    return "SSM " + std::to_string(c.heads) + " heads x " + std::to_string(c.head_dim) + ", state " +
           std::to_string(c.state) + ", " + std::to_string(c.groups) + " groups, conv " + std::to_string(c.conv) +
           ", chunk " + std::to_string(c.chunk);
  }
  [[nodiscard]] std::string recurrence_name() const override { return "scan"; }
  [[nodiscard]] std::string layers_json_key() const override { return "ssm_layers"; }
  // Weights; the chunked scan's intra-chunk tensors, ~4 of [tokens, Q, heads] per layer (decays, C.B,
  // their product, the mask) over this rank's token-heads (P/W x H either way), the reference rank's over
  // S x H too; what each layer keeps under the strategy (layers_term).
  [[nodiscard]] std::vector<MixerMemoryTerm> memory_terms(const MixerConfigs& configs,
                                                          const MemoryQuery& q) const override {
    const SsmConfig& c = configs.ssm;
    const double L = static_cast<double>(q.layers), H = q.hidden, Hs = static_cast<double>(c.heads);
    const double B = q.batch, e = q.elem_bytes, ge = q.accum_bytes, P = q.local_len * q.cp;
    const double Q = static_cast<double>(std::min<int64_t>(c.chunk, static_cast<int64_t>(q.seq_len)));
    const double scan = L * B * P / q.cp * Hs * Q * 4 * ge + (q.reference_rank ? L * B * q.seq_len * Hs * Q * 4 * ge : 0.0);
    const double guess = L * B * P *
                         (static_cast<double>(c.in_proj_width() + c.conv_channels()) +
                          static_cast<double>(c.heads * c.head_dim * c.state)) * ge;
    const std::string tokens = furthest_key({{"batch.seq_len", q.seq_ratio}, {"batch.batch_size", q.batch_ratio}});
    return {{"SSM weights", furthest_key({{"model.hidden", q.hidden_ratio}, {"model.layers", q.layers_ratio}}),
             3 * L *
                 (static_cast<double>(c.in_proj_width()) * H + static_cast<double>(c.conv_channels() * (c.conv + 1)) +
                  3 * Hs + H * static_cast<double>(c.d_inner()) + H) * e},
            {"SSM scan (chunked, Q per token and head)",
             furthest_key({{"batch.seq_len", q.seq_ratio}, {"batch.batch_size", q.batch_ratio}, {"model.ssm.heads", Hs / 4}}),
             scan},
            layers_term(configs, q, tokens, guess)};
  }
 protected:
  [[nodiscard]] double recurrence_flops(const MixerConfigs& configs, const std::string& strategy,
                                        const LayerCostQuery& q) const override {
    const SsmConfig& c = configs.ssm;
    const int64_t W = q.cp, P = q.seq_len, s = P / W;
    const double H = static_cast<double>(c.heads);
    if (this->strategy(strategy) == SsmCpStrategy::hidden_parallel)
      return ssm_scan_flops(P, c.chunk, c.head_dim, c.state) * static_cast<double>(P) * H / static_cast<double>(W);
    return ssm_scan_flops(s, c.chunk, c.head_dim, c.state) * static_cast<double>(s) * H +
           (W > 1 ? 2.0 * static_cast<double>(c.head_dim * c.state) * static_cast<double>(s) * H : 0.0);
  }
  // One fp32 state per chunk.
  [[nodiscard]] int64_t working_set_bytes(const MixerConfigs& configs, const LayerCostQuery& q, int64_t s,
                                          int64_t Q) const override {
    const SsmConfig& c = configs.ssm;
    return q.rows * ((s + Q - 1) / Q) * c.heads * c.head_dim * c.state * 4;
  }
  [[nodiscard]] std::string suffix_prefix() const override { return "/"; }
};

}  // namespace

std::unique_ptr<Mixer> make_mamba_mixer() { return std::make_unique<MambaMixer>(); }

}  // namespace cpbench
