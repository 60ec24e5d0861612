#pragma once
// The test model: a small decoder-only transformer whose attention goes through a hook point.
//
// token embedding (or inputs_embeds) -> L x [RMSNorm -> mixer -> residual -> RMSNorm -> SwiGLU MLP ->
// residual] -> RMSNorm -> LM head. The mixer of layer l is the registered mixer of letter `mixers[l]`
// (kernels/mixers/mixer.hpp, known_mixer_letters(); a Nemotron-H- or Qwen3-Next-like hybrid when they
// mix); its sizes are the config's MixerConfigs member.
// Shapes: input_ids [B, S] int64 or inputs_embeds [B, S, hidden]; logits [B, S, vocab].
// Parameters are a pure function of (config, seed): every rank builds identical ones.
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/mixers/mixer.hpp"

namespace cpbench {

struct ModelConfig : MixerConfigs {
  std::string preset = "tiny";
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t vocab = 256;
  int64_t ffn = 128;
  double rope_theta = 10000.0;
  std::vector<int64_t> mrope_sections;  // sums to head_dim/2 when mRoPE position_ids are used
  uint64_t seed = 1234;
  // One mixer letter per layer (known_mixer_letters()); empty = every layer the default mixer (attention).
  std::string mixers;
  [[nodiscard]] int64_t head_dim() const { return hidden / heads; }
  [[nodiscard]] char mixer(int64_t layer) const {
    return mixers.empty() ? kDefaultMixer : mixers[static_cast<size_t>(layer)];
  }
  // The registered mixer has layers in this model.
  [[nodiscard]] bool has(const Mixer& mixer) const;
  // Layers whose float32 result the precision rule judges (Mixer::recurrent).
  [[nodiscard]] bool has_recurrent() const;
  // Throws UsageError naming the field for impossible shapes.
  void validate() const;
  // "tiny" (CI), one three-layer preset per registered mixer with its own layers (its Mixer::preset():
  // "tiny-hybrid" = MAM, "tiny-gdn" = GAG) and "small"; throws UsageError listing the presets on an
  // unknown name.
  static ModelConfig preset_named(const std::string& name);
  // The names preset_named takes, in that order.
  static std::vector<std::string> preset_names();
};

struct ModelOutput {
  at::Tensor logits;  // [B, S, vocab]
  at::Tensor x0;      // [B, S, hidden] the tensor entering layer 0 (its .grad() is dL/d(inputs_embeds))
};

class TinyTransformerImpl : public torch::nn::Module {
 public:
  TinyTransformerImpl(const ModelConfig& config, at::ScalarType dtype, const at::Device& device);

  // `attention` is called once per attention layer; when the SDPA hook holds an override (see
  // SdpaHookGuard), the override is called instead. `contexts`: how every other mixer's layers run this
  // step (one rank or CP, by letter; Mixer::single_rank_context / cp_context), required for each mixer
  // the model has that takes one. `sliding_attention`: what the sliding_attention layers call
  // (model.attention.layer_types), required when the model has any (none under the SDPA hook).
  ModelOutput forward(const std::optional<at::Tensor>& input_ids, const std::optional<at::Tensor>& inputs_embeds,
                      const at::Tensor& position_ids, const AttentionFn& attention,
                      const MixerContexts& contexts = {}, const AttentionFn* sliding_attention = nullptr);

  [[nodiscard]] const ModelConfig& config() const { return config_; }
  // The SDPA hook point: empty = call the attention passed to forward().
  AttentionFn sdpa_hook;

 private:
  ModelConfig config_;
  torch::nn::Embedding embed_{nullptr};
  struct Layer {
    std::unique_ptr<MixerLayer> mixer;  // the registered mixer's layer (its parameters registered here)
    at::Tensor mlp_norm, w_gate, w_up, w_down;
  };
  std::vector<Layer> layers_;
  at::Tensor final_norm_, lm_head_;
};
TORCH_MODULE(TinyTransformer);

// Installs `fn` at the model's SDPA hook point for its lifetime and restores the previous hook on
// destruction, also when the forward throws (the compile-safe SDPA wrap).
class SdpaHookGuard {
 public:
  SdpaHookGuard(TinyTransformerImpl& model, AttentionFn fn);
  ~SdpaHookGuard();
  SdpaHookGuard(const SdpaHookGuard&) = delete;
  SdpaHookGuard& operator=(const SdpaHookGuard&) = delete;

 private:
  TinyTransformerImpl& model_;
  AttentionFn previous_;
};

// Per token, cross-entropy(logits, labels) * loss_mask, 0 where labels == -100; float64 [B, S].
[[nodiscard]] at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& labels,
                                      const std::optional<at::Tensor>& loss_mask);
// Sum over tokens of cross-entropy(logits, labels) * loss_mask, labels == -100 ignored; float64 scalar.
[[nodiscard]] at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& labels,
                                        const std::optional<at::Tensor>& loss_mask);
// Number of tokens that count towards the loss (labels != -100 and loss_mask != 0).
[[nodiscard]] at::Tensor valid_token_count(const at::Tensor& labels, const std::optional<at::Tensor>& loss_mask);

}  // namespace cpbench
