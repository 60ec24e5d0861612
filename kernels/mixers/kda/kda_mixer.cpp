// The `K` mixer's registry entry: Kimi Delta Attention layers (kda.hpp) with head_parallel or
// state_passing CP (the `kda_cp` axis), its negative control and its costs for the planner and admission.
//
// Costs of one layer on one rank, P the padded row, s = P / W, H heads, dk / dv head dims, Q the chunk,
// r the gate rank, hidden d, e the element size:
//   delta rule FLOPs (fwd)  delta_rule_cp_flops (gdn_cp_costs.hpp) with channel_gate and Hk = Hv = H
//   dense FLOPs (fwd)       LinearMixer's with in_proj_width = 2 H dk + H dv + H + 2 r (in_proj and the two
//                           low-rank down-projections; their up-projections, 2 r (H dk + H dv) per token,
//                           are left out: r << d)
//   bytes                   linear_cp_bytes of kda_cp_terms (kda_cp_costs.hpp)
//   memory                  as GDN's, and the secondary chunking's scalings (decayed_products.hpp): per
//                           halving level (log2 Q of them) 5/2 fp32 [tokens, dk] per head kept for the
//                           backward (two decays and three scaled operands, each over half the tokens)
#include <algorithm>
#include <cmath>

#include "kernels/mixers/gdn/delta_rule_mixer.hpp"
#include "kernels/mixers/kda/kda.hpp"
#include "kernels/mixers/linear/linear_layer.hpp"
#include "kernels/mixers/norm.hpp"

namespace cpbench {
namespace {

// One Kimi Delta Attention layer: x [R, S_local, hidden] -> in_proj [q | k | v | b] and the low-rank
// per-channel gate f -> the delta rule under the step's strategy -> the sigmoid-gated RMSNorm with the output
// gate g -> out_proj. A per-channel decay: dt_bias [H*dk], A_log [H].
class KdaLayer final : public MixerLayer {
 public:
  KdaLayer(const KdaConfig& c, const LayerInit& in)
      : w_(draw_linear_weights<KdaParams>(c, in, {"kda_norm", "kda_in_proj", "kda_out_proj"},
                                          c.conv_channels() + c.heads, [&](KdaParams& p) {
                                            draw_gates(c, in);
                                            draw_conv(p, in, "kda_", c);
                                            draw_decay(p, in, "kda_", c.key_dim(), c.heads);
                                            p.norm_w = in.around("kda_norm_w", c.value_head_dim, 1.0, 0.1);
                                          })) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x, const LayerStep& step) const override {
    const auto& ctx = step_context<KdaStepContext>(step);
    const at::Tensor h = rms_norm(x, w_.norm);
    const at::Tensor proj = at::cat({at::linear(h, w_.in_proj), at::linear(at::linear(h, f_a_), f_b_)}, -1);
    const at::Tensor z = at::linear(at::linear(h, g_a_), g_b_, g_bias_);
    const at::Tensor o = clocked(ctx, proj, [&](const at::Tensor& p) { return kda_forward(p, w_.p, w_.c, ctx); });
    return at::linear(gated_rms_norm(o, z, w_.p.norm_w, w_.c.heads, w_.c.value_head_dim, /*sigmoid_gate=*/true),
                      w_.out_proj);
  }

 private:
  // The low-rank gates: the per-channel decay's f_a, f_b and the output gate's g_a, g_b, g_bias, drawn
  // after in_proj (draw_linear_weights' `own`).
  void draw_gates(const KdaConfig& c, const LayerInit& in) {
    const double s_in = 1.0 / std::sqrt(static_cast<double>(in.hidden));
    const double s_rank = 1.0 / std::sqrt(static_cast<double>(c.gate_rank));
    f_a_ = in.normal("kda_f_a", {c.gate_rank, in.hidden}, s_in);
    f_b_ = in.normal("kda_f_b", {c.key_dim(), c.gate_rank}, s_rank);
    g_a_ = in.normal("kda_g_a", {c.gate_rank, in.hidden}, s_in);
    g_b_ = in.normal("kda_g_b", {c.value_dim(), c.gate_rank}, s_rank);
    g_bias_ = in.around("kda_g_bias", c.value_dim(), 0.0, 0.1);
  }
  // Declared before w_: constructed first, so that draw_gates (run inside w_'s initialiser) assigns them.
  at::Tensor f_a_, f_b_, g_a_, g_b_, g_bias_;
  LinearWeights<KdaConfig, KdaParams> w_;
};

// The parts the shared machinery takes from this mixer (linear_parts.hpp), beside its layer: constant data.
constexpr LinearParts<KdaConfig, GdnCpStrategy, GdnCpShape, KdaStepContext> kKdaParts{
    &MixerConfigs::kda, make_linear_layer<KdaLayer>, kda_spec, kda_cp_shape, kda_cp_terms};

}  // namespace

const LinearParts<KdaConfig, GdnCpStrategy, GdnCpShape, KdaStepContext>& linear_parts(const KdaConfig&) {
  return kKdaParts;
}

namespace {

class KdaMixer final : public DeltaRuleMixerOf<KdaConfig, true> {
 public:
  KdaMixer() : DeltaRuleMixerOf({'K', "kda", "KDA", "Kimi Delta Attention", "kda", "kda_cp", "tiny-kda"}) {}
  [[nodiscard]] std::vector<MixerControl> controls() const override {
    return {state_dropped_control("kda_state_dropped", "Kimi Delta Attention layers")};
  }
  // Kimi Linear: linear_attn_config's kda_layers (1-based layer numbers) and its sizes there.
  [[nodiscard]] std::string hf_layer_name(const std::string& model_type) const override {
    return model_type == "kimi_linear" ? "kda_layers" : "";
  }
  void read_hf(const ConfigSource& f, MixerConfigs& configs) const override {
    const auto lin = f.section("linear_attn_config", "model_type kimi_linear keeps its KDA sizes there");
    KdaConfig& c = configs.kda;
    c.heads = lin->integer("num_heads");
    c.key_head_dim = c.value_head_dim = c.gate_rank = lin->integer("head_dim");
    c.conv = lin->integer("short_conv_kernel_size");
  }
  [[nodiscard]] std::string plan_layers_name() const override { return description(); }
  [[nodiscard]] std::string sizes_text(const MixerConfigs& configs) const override {
    const KdaConfig& c = configs.kda;
    return "KDA " + std::to_string(c.heads) + " heads x " + std::to_string(c.key_head_dim) + " / " +
           std::to_string(c.value_head_dim) + ", conv " + std::to_string(c.conv) + ", chunk " +
           std::to_string(c.chunk) + ", gate rank " + std::to_string(c.gate_rank);
  }
  [[nodiscard]] std::string recurrence_name() const override { return "delta rule"; }
  // The case's model FLOPs: the chunked form over the whole row on one rank (no strategy's extra work),
  // per token from delta_rule_cp_flops; backward about twice the forward (the scans' convention).
  [[nodiscard]] double train_flops_per_token(const MixerConfigs& c, int64_t seq_len) const override {
    if (seq_len <= 0) return 0;
    return 3.0 * delta_rule_cp_flops(GdnCpStrategy::head_parallel, kda_cp_shape(c.kda, linear_cp_shape(1, seq_len, 1, c.kda.conv, 8)), c.kda.chunk, true) /
           static_cast<double>(seq_len);
  }
  [[nodiscard]] std::vector<MixerMemoryTerm> memory_terms(const MixerConfigs& configs,
                                                          const MemoryQuery& q) const override {
    const KdaConfig& c = configs.kda;
    const double L = static_cast<double>(q.layers), H = q.hidden, Hd = static_cast<double>(c.heads);
    const double r = static_cast<double>(c.gate_rank);
    const double Q = static_cast<double>(std::max<int64_t>(1, std::min<int64_t>(c.chunk, static_cast<int64_t>(q.seq_len))));
    const double guess = L * q.batch * q.local_len * q.cp *
                         (static_cast<double>(c.proj_width() + c.conv_channels()) + Hd * Q * static_cast<double>(c.key_head_dim) +
                          static_cast<double>(c.heads * c.key_head_dim * c.value_head_dim)) * q.accum_bytes;
    const double weights = static_cast<double>((c.conv_channels() + c.heads) * H) + r * H * 2 +
                           r * static_cast<double>(c.key_dim() + 2 * c.value_dim()) +
                           static_cast<double>(c.conv_channels() * c.conv + c.key_dim() + c.heads + c.value_head_dim) +
                           H * static_cast<double>(c.value_dim()) + H;
    return {{"KDA weights", furthest_key({{"model.hidden", q.hidden_ratio}, {"model.layers", q.layers_ratio}}),
             3 * L * weights * q.elem_bytes},
            layers_term(configs, q,
                        furthest_key({{"batch.seq_len", q.seq_ratio}, {"batch.batch_size", q.batch_ratio},
                                      {"model.kda.heads", Hd / 4}}),
                        guess)};
  }

 protected:
  // The chunked form's 3 fp32 [tokens, Q] matrices per head, one fp32 state per chunk, and the per-channel
  // products' scalings: 5/2 fp32 [tokens, dk] per head and halving level.
  [[nodiscard]] int64_t working_set_bytes(const MixerConfigs& configs, const LayerCostQuery& q, int64_t s,
                                          int64_t Q) const override {
    const KdaConfig& c = configs.kda;
    int64_t levels = 0;
    while ((int64_t{1} << levels) < Q) ++levels;
    return q.rows * s * c.heads * Q * 3 * 4 + q.rows * ((s + Q - 1) / Q) * c.heads * c.key_head_dim * c.value_head_dim * 4 +
           q.rows * s * c.heads * c.key_head_dim * 4 * 5 * levels / 2;
  }
  [[nodiscard]] std::string suffix_prefix() const override { return "/kda_"; }
};

}  // namespace

std::unique_ptr<Mixer> make_kda_mixer() { return std::make_unique<KdaMixer>(); }

}  // namespace cpbench
