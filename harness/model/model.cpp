#include "harness/model/model.hpp"

#include <cmath>
#include <map>

#include "sharders/batch.hpp"
#include "kernels/mixers/norm.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

void ModelConfig::validate() const {
  CP_CHECK_USAGE(layers >= 1, "model.layers: expected a positive integer, got ", layers);
  CP_CHECK_USAGE(hidden >= 1, "model.hidden: expected a positive integer, got ", hidden);
  CP_CHECK_USAGE(heads >= 1 && hidden % heads == 0, "model.heads: ", heads, " must divide model.hidden ", hidden);
  CP_CHECK_USAGE(head_dim() % 2 == 0, "model: head_dim = hidden/heads = ", head_dim(), " must be even for RoPE");
  CP_CHECK_USAGE(kv_heads >= 1 && heads % kv_heads == 0, "model.kv_heads: ", kv_heads, " must divide model.heads ",
                 heads);
  CP_CHECK_USAGE(vocab >= 2, "model.vocab: expected at least 2, got ", vocab);
  CP_CHECK_USAGE(ffn >= 1, "model.ffn: expected a positive integer, got ", ffn);
  if (!mixers.empty()) {
    CP_CHECK_USAGE(static_cast<int64_t>(mixers.size()) == layers, "model.mixers: \"", mixers, "\" has ",
                   mixers.size(), " letters, model.layers is ", layers, " (one letter per layer)");
    for (char letter : mixers) (void)mixer_for(letter, "model.mixers: \"" + mixers + "\"");
  }
  for (const Mixer* m : mixers_in(mixers)) m->validate(*this);
  const int64_t attention_layers = count_layers(mixers, layers, kDefaultMixer);
  if (!attention.layer_kinds.empty())
    CP_CHECK_USAGE(static_cast<int64_t>(attention.layer_kinds.size()) == attention_layers,
                   "model.attention.layer_types: ", attention.layer_kinds.size(), " kinds for ", attention_layers,
                   " attention layers (one per attention layer, in layer order)");
  if (const auto& kinds = attention.dsa.indexer_kinds; !kinds.empty()) {
    CP_CHECK_USAGE(static_cast<int64_t>(kinds.size()) == attention_layers, "model.attention.dsa.indexer_types: ",
                   kinds.size(), " types for ", attention_layers, " attention layers (one per attention layer)");
    CP_CHECK_USAGE(kinds.front() == DsaIndexerKind::full, "model.attention.dsa.indexer_types: the first attention "
                   "layer is shared (a shared layer reuses the previous full layer's picks)");
  }
  CP_CHECK_USAGE(!attention.has_sliding() || attention.window >= 1,
                 "model.attention.window: the sliding_attention layers need a window >= 1, got ", attention.window);
  if (attention.is_mla() || attention.mla != MlaDims{}) {
    const MlaDims& d = attention.mla;
    CP_CHECK_USAGE(d.kv_lora_rank >= 1 && d.qk_rope_head_dim >= 1 && d.qk_nope_head_dim >= 1 && d.v_head_dim >= 1,
                   "model.attention.mla: kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim and v_head_dim must all be "
                   ">= 1, got ", d.kv_lora_rank, ", ", d.qk_rope_head_dim, ", ", d.qk_nope_head_dim, ", ", d.v_head_dim);
    CP_CHECK_USAGE(d.qk_rope_head_dim % 2 == 0 && d.qk_rope_head_dim <= head_dim(),
                   "model.attention.mla.qk_rope_head_dim: ", d.qk_rope_head_dim,
                   " must be even and <= the model's head_dim ", head_dim(), " (its RoPE tables)");
  }
  CP_CHECK_USAGE(attention.mla_wire == MlaWire::expanded || attention.is_mla(),
                 "model.attention.mla_wire: latent needs model.attention.mla");
  if (!mrope_sections.empty()) {
    int64_t sum = 0;
    for (auto s : mrope_sections) sum += s;
    CP_CHECK_USAGE(sum == head_dim() / 2, "model.mrope_sections sum to ", sum, ", expected head_dim/2 = ",
                   head_dim() / 2);
  }
}

bool ModelConfig::has(const Mixer& m) const { return count_layers(mixers, layers, m.letter()) > 0; }

bool ModelConfig::has_recurrent() const {
  for (const Mixer* m : mixers_in(mixers))
    if (m->recurrent()) return true;
  return false;
}

std::vector<std::string> ModelConfig::preset_names() {
  std::vector<std::string> out{"tiny"};
  for (const auto& m : cpbench::mixers())
    if (!m->preset().empty()) out.push_back(m->preset());
  out.emplace_back("small");
  return out;
}

ModelConfig ModelConfig::preset_named(const std::string& name) {
  ModelConfig c;
  c.preset = name;
  if (name == "tiny") return c;
  for (const auto& m : cpbench::mixers())
    if (!m->preset().empty() && m->preset() == name) {
      c.layers = 3;
      c.mixers = std::string{m->letter(), kDefaultMixer, m->letter()};
      return c;
    }
  if (name == "small") {
    c.layers = 4;
    c.hidden = 256;
    c.heads = 8;
    c.kv_heads = 4;
    c.vocab = 1024;
    c.ffn = 704;
    return c;
  }
  std::string known;
  for (const auto& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
  throw UsageError(detail::concat("model.preset: unknown preset '", name, "'; known presets: ", known));
}

namespace {
// Deterministic init independent of device and of global RNG state: each parameter from its own
// generator seeded by (model seed, parameter index).
at::Tensor init_param(std::vector<int64_t> shape, double stddev, uint64_t seed, uint64_t index, at::ScalarType dtype,
                      const at::Device& device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ULL + index);
  at::Tensor t = at::normal(0.0, stddev, shape, gen, at::TensorOptions().dtype(at::kDouble));
  return t.to(device, dtype);
}

// cos/sin [B, 1, S, D/2] from position_ids [B, S] or mRoPE [C, B, S] (+ sections).
std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& position_ids, const ModelConfig& c,
                                              at::ScalarType dtype) {
  const int64_t half = c.head_dim() / 2;
  auto opts = at::TensorOptions().dtype(at::kDouble).device(position_ids.device());
  at::Tensor inv_freq = at::pow(c.rope_theta, -at::arange(half, opts) * 2.0 / static_cast<double>(c.head_dim()));
  at::Tensor angles;  // [B, S, half]
  if (position_ids.dim() == 2) {
    angles = position_ids.to(at::kDouble).unsqueeze(-1) * inv_freq;
  } else {
    CP_CHECK(!c.mrope_sections.empty(), "model: mRoPE position_ids ", shape_str(position_ids.sizes()),
             " need model.mrope_sections");
    CP_CHECK(position_ids.size(0) == static_cast<int64_t>(c.mrope_sections.size()), "model: mRoPE position_ids have ",
             position_ids.size(0), " channels but model.mrope_sections has ", c.mrope_sections.size());
    std::vector<at::Tensor> parts;
    int64_t start = 0;
    for (size_t ch = 0; ch < c.mrope_sections.size(); ++ch) {
      const int64_t n = c.mrope_sections[ch];
      parts.push_back(position_ids[static_cast<int64_t>(ch)].to(at::kDouble).unsqueeze(-1) * inv_freq.narrow(0, start, n));
      start += n;
    }
    angles = at::cat(parts, -1);
  }
  return {angles.cos().unsqueeze(1).to(dtype), angles.sin().unsqueeze(1).to(dtype)};
}

}  // namespace

TinyTransformerImpl::TinyTransformerImpl(const ModelConfig& config, at::ScalarType dtype, const at::Device& device)
    : config_(config) {
  config_.validate();
  const auto& c = config_;
  const int64_t D = c.head_dim();
  uint64_t idx = 0;
  const double s_in = 1.0 / std::sqrt(static_cast<double>(c.hidden));
  embed_ = register_module("embed", torch::nn::Embedding(c.vocab, c.hidden));
  embed_->weight.set_data(init_param({c.vocab, c.hidden}, 1.0, c.seed, idx++, dtype, device));
  auto ones = [&](int64_t n) { return at::ones({n}, at::TensorOptions().dtype(dtype).device(device)); };
  std::map<char, int64_t> seen;  // layers of each mixer so far
  for (int64_t l = 0; l < c.layers; ++l) {
    Layer L;
    // torch::nn parameter names may not contain dots.
    const std::string p = "layer" + std::to_string(l) + "_";
    LayerInit init;
    init.hidden = c.hidden;
    init.heads = c.heads;
    init.kv_heads = c.kv_heads;
    init.head_dim = D;
    init.mixer_index = seen[c.mixer(l)]++;
    init.normal = [&](const std::string& name, std::vector<int64_t> shape, double stddev) {
      return register_parameter(p + name, init_param(std::move(shape), stddev, c.seed, idx++, dtype, device));
    };
    init.around = [&](const std::string& name, int64_t n, double mean, double stddev) {
      return register_parameter(p + name,
                                (init_param({n}, stddev, c.seed, idx++, at::kDouble, device) + mean).to(dtype));
    };
    init.ones = [&](const std::string& name, int64_t n) { return register_parameter(p + name, ones(n)); };
    L.mixer = mixer_for(c.mixer(l)).make_layer(c, init);
    L.mlp_norm = register_parameter(p + "mlp_norm", ones(c.hidden));
    L.w_gate = register_parameter(p + "w_gate", init_param({c.ffn, c.hidden}, s_in, c.seed, idx++, dtype, device));
    L.w_up = register_parameter(p + "w_up", init_param({c.ffn, c.hidden}, s_in, c.seed, idx++, dtype, device));
    L.w_down = register_parameter(p + "w_down",
                                  init_param({c.hidden, c.ffn}, 1.0 / std::sqrt(static_cast<double>(c.ffn)), c.seed,
                                             idx++, dtype, device));
    layers_.push_back(std::move(L));
  }
  final_norm_ = register_parameter("final_norm", ones(c.hidden));
  lm_head_ = register_parameter("lm_head", init_param({c.vocab, c.hidden}, s_in, c.seed, idx++, dtype, device));
}

ModelOutput TinyTransformerImpl::forward(const std::optional<at::Tensor>& input_ids,
                                         const std::optional<at::Tensor>& inputs_embeds, const at::Tensor& position_ids,
                                         const AttentionFn& attention, const MixerContexts& contexts,
                                         const AttentionFn* sliding_attention) {
  const auto& c = config_;
  at::Tensor x = input_ids ? embed_->forward(*input_ids) : *inputs_embeds;
  if (!x.requires_grad()) x.requires_grad_(true);
  x.retain_grad();
  ModelOutput out;
  out.x0 = x;
  auto [cos, sin] = rope_tables(position_ids, c, x.scalar_type());
  LayerStep step;
  step.attention = sdpa_hook ? &sdpa_hook : &attention;
  // The hook carries one attention for every layer: a sliding layer under it has none (refused there).
  step.sliding_attention = sdpa_hook ? nullptr : sliding_attention;
  step.rope_cos = cos;
  step.rope_sin = sin;
  step.contexts = &contexts;
  for (const auto& L : layers_) {
    x = x + L.mixer->forward(x, step);
    at::Tensor m = rms_norm(x, L.mlp_norm);
    x = x + at::linear(at::silu(at::linear(m, L.w_gate)) * at::linear(m, L.w_up), L.w_down);
  }
  out.logits = at::linear(rms_norm(x, final_norm_), lm_head_);
  return out;
}

SdpaHookGuard::SdpaHookGuard(TinyTransformerImpl& model, AttentionFn fn) : model_(model), previous_(model.sdpa_hook) {
  model_.sdpa_hook = std::move(fn);
}

SdpaHookGuard::~SdpaHookGuard() { model_.sdpa_hook = std::move(previous_); }

at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& labels, const std::optional<at::Tensor>& loss_mask) {
  at::Tensor lp = at::log_softmax(logits.to(at::kDouble), -1);
  at::Tensor valid = labels != kIgnoreIndex;
  at::Tensor safe = at::where(valid, labels, at::zeros_like(labels));
  at::Tensor nll = -lp.gather(-1, safe.unsqueeze(-1)).squeeze(-1);
  at::Tensor w = valid.to(at::kDouble);
  if (loss_mask) w = w * loss_mask->to(at::kDouble);
  return nll * w;
}

at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& labels, const std::optional<at::Tensor>& loss_mask) {
  return token_losses(logits, labels, loss_mask).sum();
}

at::Tensor valid_token_count(const at::Tensor& labels, const std::optional<at::Tensor>& loss_mask) {
  at::Tensor w = (labels != kIgnoreIndex).to(at::kDouble);
  if (loss_mask) w = w * (*loss_mask != 0).to(at::kDouble);
  return w.sum();
}

}  // namespace cpbench
