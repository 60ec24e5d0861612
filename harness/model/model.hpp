#pragma once
// The test model: a small decoder-only transformer whose attention goes through a hook point.
//
// token embedding (or inputs_embeds) -> L x [RMSNorm -> mixer -> residual -> RMSNorm -> SwiGLU MLP ->
// residual] -> RMSNorm -> LM head. The mixer of layer l is `mixers[l]`: A = GQA attention with RoPE
// (mRoPE when position_ids is [C, B, S]), M = the Mamba-2 style SSM of harness/model/mamba.hpp
// (a Nemotron-H-like hybrid when both appear), G = the Gated DeltaNet layer of harness/model/gdn.hpp
// (a Qwen3-Next-like hybrid with A).
// Shapes: input_ids [B, S] int64 or inputs_embeds [B, S, hidden]; logits [B, S, vocab].
// Parameters are a pure function of (config, seed): every rank builds identical ones.
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/gdn.hpp"
#include "harness/model/mamba.hpp"

namespace cpbench {

struct ModelConfig {
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
  // One letter per layer: 'A' attention, 'M' Mamba (SSM), 'G' Gated DeltaNet; empty = every layer attention.
  std::string mixers;
  SsmConfig ssm;  // sizes of the 'M' layers
  GdnConfig gdn;  // sizes of the 'G' layers
  [[nodiscard]] int64_t head_dim() const { return hidden / heads; }
  [[nodiscard]] char mixer(int64_t layer) const {
    return mixers.empty() ? 'A' : mixers[static_cast<size_t>(layer)];
  }
  [[nodiscard]] bool has_ssm() const { return mixers.find('M') != std::string::npos; }
  [[nodiscard]] bool has_gdn() const { return mixers.find('G') != std::string::npos; }
  // Mamba or Gated DeltaNet layers: recurrences whose float32 error the precision rule judges.
  [[nodiscard]] bool has_recurrent() const { return has_ssm() || has_gdn(); }
  // Throws UsageError naming the field for impossible shapes.
  void validate() const;
  // "tiny" (CI), "tiny-hybrid" (tiny with mixers MAM), "tiny-gdn" (tiny with mixers GAG) and "small"; throws UsageError listing the presets on an unknown name.
  static ModelConfig preset_named(const std::string& name);
};

// Attention at the hook point: q [B, Hq, S, D], k/v [B, Hkv, S, D] -> [B, Hq, S, D].
using AttentionFn = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;

struct ModelOutput {
  at::Tensor logits;  // [B, S, vocab]
  at::Tensor x0;      // [B, S, hidden] the tensor entering layer 0 (its .grad() is dL/d(inputs_embeds))
};

class TinyTransformerImpl : public torch::nn::Module {
 public:
  TinyTransformerImpl(const ModelConfig& config, at::ScalarType dtype, const at::Device& device);

  // `attention` is called once per attention layer; when the SDPA hook holds an override (see
  // SdpaHookGuard), the override is called instead. `ssm`: how the Mamba layers run this step (one
  // rank, hidden-parallel or state-passing CP); required when the model has any. `gdn`: the same for
  // the Gated DeltaNet layers (one rank, head-parallel or state-passing CP).
  ModelOutput forward(const std::optional<at::Tensor>& input_ids, const std::optional<at::Tensor>& inputs_embeds,
                      const at::Tensor& position_ids, const AttentionFn& attention,
                      const SsmStepContext* ssm = nullptr, const GdnStepContext* gdn = nullptr);

  [[nodiscard]] const ModelConfig& config() const { return config_; }
  // The SDPA hook point: empty = call the attention passed to forward().
  AttentionFn sdpa_hook;

 private:
  ModelConfig config_;
  torch::nn::Embedding embed_{nullptr};
  struct Layer {
    char mixer = 'A';
    at::Tensor attn_norm, wq, wk, wv, wo;                               // 'A'
    at::Tensor ssm_norm, in_proj, out_proj;                             // 'M'
    SsmParams ssm;                                                      // 'M'
    at::Tensor gdn_norm, gdn_in_proj, gdn_out_proj;                     // 'G'
    GdnParams gdn;                                                      // 'G'
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
