// The `A` mixer: GQA attention with RoPE (mRoPE when the model's position_ids are [C, B, S]) through the
// model's attention hook point. Its CP strategies are the transports (kernels/transports/, the scenario's
// `transport` axis): the AttentionFn a step passes is the case's transport, or the single-rank reference.
//
// Layer: h = RMSNorm(x); q, k, v = h W_q, h W_k, h W_v per head; RoPE on q and k; a = attention(q, k, v);
// out = a W_o. Parameters: attn_norm [hidden], wq [Hq*D, hidden], wk, wv [Hkv*D, hidden], wo [hidden, Hq*D];
// with model.attention.sinks, sinks [Hq] (one learned logit per query head in every query's softmax,
// drawn N(sink_mean, sink_std) after wo (default N(0, kSinkInitStddev)); the transports apply it once after their merge,
// kernels/attention/sink.hpp, the reference as an extra softmax column). With model.attention.layer_types
// a layer is full or sliding (attention_kind.hpp): a sliding layer calls LayerStep::sliding_attention.
//
// With model.attention.mla every attention layer is MLA (DeepSeek-V3's, kernels/attention/mla.hpp),
// HF's DeepseekV3Attention without the q LoRA: q = h W_q [H*(dn+dr)] per head, RoPE on its last dr;
// [c, k_rope] = h W_kv_a [r + dr], c RMS-normed (kv_norm), k_rope RoPE'd once per token (one key for
// every head); W_kv_b [H*(dn+dv), r] up-projects c to each head's k_nope and v; k_h = [k_nope_h, k_rope].
// Its RoPE uses the first dr/2 frequencies of the model's tables (head_dim/2 of them; dr <= head_dim).
// model.attention.mla_wire: expanded: the layer up-projects and hands K [B, H, S, dn+dr], V [B, H, S, dv]
// to the attention; latent: it hands the latent [B, 1, S, r + dr] and W_kv_b (AttentionFn's kv_up), and
// the transport up-projects every block it attends. Parameters: attn_norm, wq, wkv_a, kv_norm, wkv_b, wo
// [hidden, H*dv] (and sinks), drawn in that order.
#include <cmath>

#include "kernels/attention/mla.hpp"
#include "kernels/attention/sink.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "kernels/mixers/attention/dsa/dsa_indexer.hpp"
#include "kernels/mixers/mixer.hpp"
#include "kernels/mixers/norm.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {
namespace {

// Rotate-half RoPE on x [B, H, S, D].
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

class AttentionLayer final : public MixerLayer {
 public:
  AttentionLayer(const LayerInit& in, const AttentionConfig& c, AttentionKind kind)
      : heads_(in.heads), kv_heads_(in.kv_heads), head_dim_(in.head_dim), kind_(kind) {
    const double s_in = 1.0 / std::sqrt(static_cast<double>(in.hidden));
    norm_ = in.ones("attn_norm", in.hidden);
    wq_ = in.normal("wq", {heads_ * head_dim_, in.hidden}, s_in);
    wk_ = in.normal("wk", {kv_heads_ * head_dim_, in.hidden}, s_in);
    wv_ = in.normal("wv", {kv_heads_ * head_dim_, in.hidden}, s_in);
    wo_ = in.normal("wo", {in.hidden, heads_ * head_dim_}, s_in);
    if (c.sinks != 0) sinks_ = in.around("sinks", heads_, c.sink_mean, c.sink_std);
  }
  [[nodiscard]] at::Tensor forward(const at::Tensor& x, const LayerStep& step) const override {
    CP_CHECK(step.attention != nullptr && static_cast<bool>(*step.attention),
             "model: no attention function at the SDPA hook point");
    const int64_t B = x.size(0), S = x.size(1), D = head_dim_;
    const at::Tensor h = rms_norm(x, norm_);
    at::Tensor q = at::linear(h, wq_).view({B, S, heads_, D}).transpose(1, 2);
    at::Tensor k = at::linear(h, wk_).view({B, S, kv_heads_, D}).transpose(1, 2);
    const at::Tensor v = at::linear(h, wv_).view({B, S, kv_heads_, D}).transpose(1, 2).contiguous();
    q = apply_rope(q, step.rope_cos, step.rope_sin).contiguous();
    k = apply_rope(k, step.rope_cos, step.rope_sin).contiguous();
    // A sliding layer runs its own attention (its mask, maybe its own transport); running it through
    // the full layers' would silently attend past the window (prime-rl #2828), so none is an error.
    CP_CHECK(kind_ == AttentionKind::full || (step.sliding_attention && static_cast<bool>(*step.sliding_attention)),
             "model: a sliding_attention layer but no sliding attention at the hook point (model.attention.layer_types)");
    const AttentionFn& attn = kind_ == AttentionKind::sliding ? *step.sliding_attention : *step.attention;
    const at::Tensor a = attn(q, k, v, sinks_, at::Tensor());
    return at::linear(a.transpose(1, 2).reshape({B, S, heads_ * D}), wo_);
  }

 private:
  int64_t heads_, kv_heads_, head_dim_;
  AttentionKind kind_;
  at::Tensor norm_, wq_, wk_, wv_, wo_, sinks_;  // sinks_ undefined without model.attention.sinks
};

class MlaLayer final : public MixerLayer {
 public:
  MlaLayer(const LayerInit& in, const AttentionConfig& c, AttentionKind kind)
      : heads_(in.heads), d_(c.mla), wire_(c.mla_wire), kind_(kind) {
    const double s_in = 1.0 / std::sqrt(static_cast<double>(in.hidden));
    norm_ = in.ones("attn_norm", in.hidden);
    wq_ = in.normal("wq", {heads_ * d_.qk_head_dim(), in.hidden}, s_in);
    wkv_a_ = in.normal("wkv_a", {d_.latent_dim(), in.hidden}, s_in);
    kv_norm_ = in.ones("kv_norm", d_.kv_lora_rank);
    wkv_b_ = in.normal("wkv_b", {heads_ * (d_.qk_nope_head_dim + d_.v_head_dim), d_.kv_lora_rank},
                       1.0 / std::sqrt(static_cast<double>(d_.kv_lora_rank)));
    wo_ = in.normal("wo", {in.hidden, heads_ * d_.v_head_dim}, s_in);
    if (c.sinks != 0) sinks_ = in.around("sinks", heads_, c.sink_mean, c.sink_std);
    if (c.dsa.enabled()) dsa_ = std::make_shared<DsaIndexer>(in, c);
  }
  [[nodiscard]] at::Tensor forward(const at::Tensor& x, const LayerStep& step) const override {
    CP_CHECK(dsa_ || (step.attention != nullptr && static_cast<bool>(*step.attention)),
             "model: no attention function at the SDPA hook point");
    const int64_t B = x.size(0), S = x.size(1), dn = d_.qk_nope_head_dim, dr = d_.qk_rope_head_dim,
                  r = d_.kv_lora_rank;
    CP_CHECK(2 * step.rope_cos.size(-1) >= dr, "model.attention.mla: qk_rope_head_dim ", dr,
             " exceeds the model's RoPE tables (head_dim ", 2 * step.rope_cos.size(-1), ")");
    const at::Tensor cos = step.rope_cos.narrow(-1, 0, dr / 2), sin = step.rope_sin.narrow(-1, 0, dr / 2);
    const at::Tensor h = rms_norm(x, norm_);
    const at::Tensor qh = at::linear(h, wq_).view({B, S, heads_, dn + dr}).transpose(1, 2);
    const at::Tensor q = at::cat({qh.narrow(-1, 0, dn), apply_rope(qh.narrow(-1, dn, dr), cos, sin)}, -1).contiguous();
    const at::Tensor kva = at::linear(h, wkv_a_);  // [B, S, r + dr]
    const at::Tensor c = rms_norm(kva.narrow(-1, 0, r), kv_norm_);
    const at::Tensor k_rope = apply_rope(kva.narrow(-1, r, dr).unsqueeze(1), cos, sin).squeeze(1);  // one per token
    const at::Tensor latent = at::cat({c, k_rope}, -1);  // [B, S, r + dr]
    if (dsa_) {  // model.attention.dsa: the indexer picks, sparse MLA attends (dsa/dsa_indexer.hpp)
      const auto rope = [&](const at::Tensor& t) { return apply_rope(t, cos, sin); };
      const at::Tensor a = dsa_->attend(h, q, latent, wkv_b_, rope, step);
      return at::linear(a.transpose(1, 2).reshape({B, S, heads_ * d_.v_head_dim}), wo_);
    }
    CP_CHECK(kind_ == AttentionKind::full || (step.sliding_attention && static_cast<bool>(*step.sliding_attention)),
             "model: a sliding_attention layer but no sliding attention at the hook point (model.attention.layer_types)");
    const AttentionFn& attn = kind_ == AttentionKind::sliding ? *step.sliding_attention : *step.attention;
    at::Tensor a;
    if (wire_ == MlaWire::latent) {
      a = attn(q, latent.unsqueeze(1).contiguous(), at::Tensor(), sinks_, wkv_b_);
    } else {
      const auto [k, v] = kernels::mla_expand(latent, wkv_b_, heads_, dn);
      a = attn(q, k, v, sinks_, at::Tensor());
    }
    return at::linear(a.transpose(1, 2).reshape({B, S, heads_ * d_.v_head_dim}), wo_);
  }

 private:
  int64_t heads_;
  MlaDims d_;
  MlaWire wire_;
  AttentionKind kind_;
  at::Tensor norm_, wq_, wkv_a_, kv_norm_, wkv_b_, wo_, sinks_;
  std::shared_ptr<const DsaIndexer> dsa_;  // model.attention.dsa
};

class AttentionMixer final : public Mixer {
 public:
  AttentionMixer() : Mixer({'A', "attention", "attention", "attention", "attention", "", ""}) {}
  // In the hybrids' per-layer lists: qwen3_next's layer_types, nemotron_h's pattern, jamba's period, Kimi
  // Linear's full_attn_layers (its MLA read as plain attention).
  [[nodiscard]] std::string hf_layer_name(const std::string& model_type) const override {
    if (model_type == "nemotron_h") return "*";
    if (model_type == "jamba") return "attn_layer_period";
    if (model_type == "kimi_linear") return "full_attn_layers";
    for (const char* t : {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})
      if (model_type == t) return "full_attention";
    return "";
  }
  [[nodiscard]] std::vector<ConfigField> config_fields(MixerConfigs& c) const override { return c.attention.fields(); }
  // model.attention.dsa: the step's DSA context (dsa/dsa_context.hpp); plain attention needs none (its
  // transport is the AttentionFn).
  [[nodiscard]] std::shared_ptr<MixerStepContext> single_rank_context(const MixerConfigs& configs, const TokenMeta& meta,
                                                                      const MaskSpec& mask, at::ScalarType dtype,
                                                                      const at::Device& /*device*/) const override {
    if (!configs.attention.dsa.enabled()) return nullptr;
    return make_dsa_single_rank_context(configs.attention, meta, mask, dtype);
  }
  [[nodiscard]] std::shared_ptr<MixerStepContext> cp_context(const MixerConfigs& configs,
                                                             const CpStepInputs& in) const override {
    if (!configs.attention.dsa.enabled()) return nullptr;
    return make_dsa_cp_context(configs.attention, in);
  }
  [[nodiscard]] std::unique_ptr<MixerLayer> make_layer(const MixerConfigs& configs,
                                                       const LayerInit& init) const override {
    if (configs.attention.is_mla())
      return std::make_unique<MlaLayer>(init, configs.attention, configs.attention.kind_of(init.mixer_index));
    return std::make_unique<AttentionLayer>(init, configs.attention,
                                            configs.attention.kind_of(init.mixer_index));
  }
};

}  // namespace

std::unique_ptr<Mixer> make_attention_mixer() { return std::make_unique<AttentionMixer>(); }

}  // namespace cpbench
