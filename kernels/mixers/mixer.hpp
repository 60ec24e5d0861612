#pragma once
// A mixer: the token-mixing half of a decoder layer (attention, Mamba-2, Gated DeltaNet, ...). Each is
// one folder under kernels/mixers/ that owns its parameters and config fields, its single-rank forward
// (the reference), its CP strategies by name with their byte / FLOP / memory formulas, its negative
// controls and its cost terms, behind this interface, and one line in kernels/mixers/registry.cpp
// (the model, the runner, the planner, admission and scenario validation ask the registry and never
// name a mixer). Letters: model.mixers / config layer patterns spell a model's layers one letter each.
//
// A layer is x -> x + mixer(x) followed by the model's MLP (harness/model/model.hpp); the mixer's part
// starts with its own RMSNorm.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/mixers/config_field.hpp"
#include "kernels/mixers/config_source.hpp"
#include "kernels/mixers/linear/linear_costs.hpp"
#include "kernels/mixers/mixer_configs.hpp"
#include "kernels/mixers/mixer_step.hpp"
#include "sharders/layout.hpp"
#include "sharders/mask.hpp"

namespace cpbench {

// Attention at the hook point: q [B, Hq, S, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] -> [B, Hq, S, Dv]
// (Dv = D except MLA). `sinks`: the layer's learned sink logits [Hq] (AttentionContext::sinks), undefined
// when the model has none. `kv_up`: MLA's latent wire (AttentionContext::kv_up): then k is the latent
// [B, 1, S, r + dr], v undefined, and kv_up the up-projection W_up [Hq*(dn+dv), r]; else undefined.
using AttentionFn = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& sinks, const at::Tensor& kv_up)>;

// How a layer creates its parameters: the model registers each under "<prefix><name>" and draws it from
// the model's seeded generator, one index per drawn tensor in call order (so the order of the calls is
// part of a mixer's contract: it fixes every value). Every rank builds identical ones.
struct LayerInit {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;  // the model's own dimensions
  int64_t mixer_index = 0;  // this layer's index among the model's layers of its mixer (0-based)
  // N(0, stddev) of `shape`, in the model's dtype.
  std::function<at::Tensor(const std::string& name, std::vector<int64_t> shape, double stddev)> normal;
  // mean + N(0, stddev) of [n], drawn in float64, then in the model's dtype.
  std::function<at::Tensor(const std::string& name, int64_t n, double mean, double stddev)> around;
  // ones of [n] (draws nothing).
  std::function<at::Tensor(const std::string& name, int64_t n)> ones;
};

// What a layer's forward is given besides its input.
struct LayerStep {
  const AttentionFn* attention = nullptr;  // the attention at the hook point (attention layers)
  // The sliding_attention layers' (model.attention.layer_types); null: `attention` for every layer.
  const AttentionFn* sliding_attention = nullptr;
  at::Tensor rope_cos, rope_sin;            // [B, 1, S, head_dim/2] (attention layers)
  const MixerContexts* contexts = nullptr;  // the step's contexts, by letter (the other mixers)
};

class MixerLayer {
 public:
  virtual ~MixerLayer() = default;
  // x [B, S_local, hidden] -> what the mixer adds to the residual stream, [B, S_local, hidden].
  // Collective over the step context's communicator when the mixer runs CP.
  [[nodiscard]] virtual at::Tensor forward(const at::Tensor& x, const LayerStep& step) const = 0;
};

// What a step's CP context is built from on a rank: the runner's gathered metadata and the shard's layout.
struct CpStepInputs {
  const comm::Communicator* comm = nullptr;
  const GlobalLayout* layout = nullptr;  // sharder.shard_layout().global
  TokenMeta all_meta;                     // every rank's metadata in rank order, [R, W * S_local]
  MaskSpec mask;
  at::ScalarType dtype = at::kDouble;
  at::Device device = at::kCPU;
  std::string nvtx;      // "cp:<sharder>"
  std::string strategy;  // the case's strategy for this mixer (one of strategies()); attention: the transport
  int64_t ulysses = 0;   // the case's Ulysses degree (transport hybrid); 0 for every other transport
  std::string fault;     // the case's negative control's fault for this mixer on this rank ("" = none)
};

// One layer of a mixer on one rank under one strategy, for the planner and admission. Units: tokens, bytes.
struct LayerCostQuery {
  int64_t hidden = 0;          // the model's hidden size (projections)
  int64_t rows = 1;            // R
  int64_t seq_len = 0;         // P: the padded row (a multiple of cp)
  int64_t cp = 1;              // W
  int64_t elem_bytes = 2;      // activations
  int64_t chunks_per_rank = 1; // state passing: the most chunks a rank owns (max_runs_per_rank)
};
struct LayerCost {
  double recurrence_flops = 0;   // forward FLOPs of the mixer's core on this rank (the scan / delta rule)
  double dense_flops = 0;        // forward FLOPs of its projections and conv on this rank
  LinearCpBytes bytes;           // what this rank sends, forward and backward, and the calls
  int64_t activation_bytes = 0;  // what the layer keeps per rank for the backward, CP's own buffers included
  // The core's memory-bound side (docs/planner.md, "Gated DeltaNet layers"; 0 where a mixer does not model it,
  // and its core then runs at the cluster's ssm_flops): forward bytes its kernels' passes move through HBM on
  // this rank, and forward bytes of the layout copies around its strategy's collectives (exposed).
  double recurrence_hbm_bytes = 0;
  double copy_hbm_bytes = 0;
  LinearCpBytes core_bytes;  // the part of `bytes` the core's own collectives send (no conv halo)
};

// What admission (harness/runner/admission.hpp) asks a mixer about a case: its layers' memory on a rank.
struct MemoryQuery {
  int64_t layers = 0;                                                // this mixer's layers
  double hidden = 0, batch = 0, seq_len = 0, local_len = 0, cp = 1;  // H, B, S, padded tokens per rank, W
  double elem_bytes = 8, accum_bytes = 8;                            // e, max(4, e)
  int64_t docs = 1;             // most documents in a row (at most 2 (docs + 1) chunks per rank)
  bool reference_rank = false;  // this rank also runs the single-rank reference (over S)
  std::string strategy;         // the case's strategy for this mixer
  // How far each size is above the tiny preset's: a term names the key furthest above (what a user most
  // likely mistyped) among those it grows with.
  double seq_ratio = 1, batch_ratio = 1, hidden_ratio = 1, layers_ratio = 1;
};
struct MixerMemoryTerm {
  std::string what, key;  // key: the scenario key the term grows with most ("model.ssm.heads")
  double bytes = 0;
};
// The key of the largest ratio.
[[nodiscard]] inline std::string furthest_key(std::initializer_list<std::pair<const char*, double>> keys) {
  auto best = keys.begin();
  for (auto it = keys.begin(); it != keys.end(); ++it)
    if (it->second > best->second) best = it;
  return best->first;
}

// A negative control the mixer owns: on the case's `sharder` axis by name; it shards like
// load_balanced and plants `fault` in this mixer's layers (Mixer::cp_context reads it) when the case
// runs `strategy`.
struct MixerControl {
  std::string name, description;
  std::string fault;     // what cp_context receives
  std::string strategy;  // the strategy it breaks
  bool last_rank_only = false;  // the fault acts on the last CP rank only
};

// Who a mixer is: the names every consumer shows or matches.
struct MixerInfo {
  char letter = 0;
  std::string name;         // registry name: "attention", "mamba", "gdn"
  std::string label;        // what reports and plans call its layers: "SSM", "GDN"
  std::string description;  // for listings and messages: "Mamba", "Gated DeltaNet"
  std::string config_key;   // its sizes' key under `model:` ("" when it has none of its own)
  // The scenario axis that picks its CP strategy ("" = none: attention's strategies are the transports,
  // on the `transport` axis).
  std::string strategy_axis;
  // The name of cpbench's three-layer test preset with its layers around one attention layer
  // (letter, A, letter: "tiny-hybrid" = MAM); "" for none (attention: "tiny" is all attention).
  std::string preset;
};

class Mixer {
 public:
  explicit Mixer(MixerInfo info) : info_(std::move(info)) {}
  virtual ~Mixer() = default;
  [[nodiscard]] char letter() const { return info_.letter; }
  [[nodiscard]] const std::string& name() const { return info_.name; }
  [[nodiscard]] const std::string& label() const { return info_.label; }
  [[nodiscard]] const std::string& description() const { return info_.description; }
  [[nodiscard]] const std::string& preset() const { return info_.preset; }

  // ---- config ----
  [[nodiscard]] const std::string& config_key() const { return info_.config_key; }
  // Its fields in `configs` (its MixerConfigs member's).
  [[nodiscard]] virtual std::vector<ConfigField> config_fields(MixerConfigs& /*configs*/) const { return {}; }
  // Throws UsageError naming model.<config_key>.<field>.
  virtual void validate(const MixerConfigs& /*configs*/) const {}
  // Sets the fields a scenario gave (model.<config_key>.<field> -> value). `scaled`: the sizes are a real
  // model's being shrunk, so a mixer may keep its ratios for the fields not given (Mamba: heads per group).
  virtual void apply_sizes(MixerConfigs& configs, const std::map<std::string, int64_t>& given, bool /*scaled*/) const {
    for (const auto& f : config_fields(configs))
      if (const auto it = given.find(f.name); it != given.end()) *f.value = it->second;
  }

  // ---- published models (harness/model/hf_config.cpp asks every mixer) ----
  // What the per-layer list of a model_type's config.json calls this mixer's layers (qwen3_next's
  // layer_types "linear_attention", nemotron_h's pattern "M", kimi_linear's "kda_layers"); "" when that
  // family has none of them.
  [[nodiscard]] virtual std::string hf_layer_name(const std::string& /*model_type*/) const { return ""; }
  // Its sizes from that file (called when the model has its layers; throws naming the field).
  virtual void read_hf(const ConfigSource& /*file*/, MixerConfigs& /*configs*/) const {}

  // ---- CP strategies ----
  // The axis that picks one (MixerInfo::strategy_axis), its names (the first is the default) and what a
  // case's name adds for one.
  [[nodiscard]] const std::string& strategy_axis() const { return info_.strategy_axis; }
  [[nodiscard]] virtual std::vector<std::string> strategies() const { return {}; }
  [[nodiscard]] virtual std::string case_suffix(const std::string& /*strategy*/) const { return ""; }
  // "" when `strategy` can run this mixer's layers on `layout` at cp ranks, else the one-line reason.
  [[nodiscard]] virtual std::string unsupported_reason(const MixerConfigs& /*configs*/, const std::string& /*strategy*/,
                                                       const Layout& /*layout*/, int64_t /*cp*/) const {
    return "";
  }
  [[nodiscard]] virtual std::vector<MixerControl> controls() const { return {}; }

  // ---- the model ----
  [[nodiscard]] virtual std::unique_ptr<MixerLayer> make_layer(const MixerConfigs& configs,
                                                               const LayerInit& init) const = 0;
  // The step's context for the single-rank reference (`meta` [B, S], the batch's rows as given) and for
  // a CP rank; nullptr for a mixer that needs none (attention: its transport is the AttentionFn).
  [[nodiscard]] virtual std::shared_ptr<MixerStepContext> single_rank_context(const MixerConfigs& /*configs*/,
                                                                              const TokenMeta& /*meta*/,
                                                                              const MaskSpec& /*mask*/,
                                                                              at::ScalarType /*dtype*/,
                                                                              const at::Device& /*device*/) const {
    return nullptr;
  }
  [[nodiscard]] virtual std::shared_ptr<MixerStepContext> cp_context(const MixerConfigs& /*configs*/,
                                                                     const CpStepInputs& /*in*/) const {
    return nullptr;
  }
  // Its layers' float32 result is judged by the precision rule (a recurrence's error grows with S).
  [[nodiscard]] virtual bool recurrent() const { return false; }

  // ---- how plans and reports name it ----
  // The plan's model line: "24 SSM" / "36 Gated DeltaNet" (layers of it).
  [[nodiscard]] virtual std::string plan_layers_name() const { return label(); }
  // Its sizes in one phrase for the plan's model line ("SSM 128 heads x 64, state 128, 8 groups, ...").
  [[nodiscard]] virtual std::string sizes_text(const MixerConfigs& /*configs*/) const { return ""; }
  // What its recurrence is called next to the cluster's rate for it ("scan", "delta rule").
  [[nodiscard]] virtual std::string recurrence_name() const { return ""; }
  // The plan JSON's model key counting its layers, always written ("" = none).
  [[nodiscard]] virtual std::string layers_json_key() const { return ""; }

  // ---- metrics and costs ----
  // Training FLOPs per token of one layer's core (forward + backward) in a row of seq_len tokens, for
  // the case's model FLOPs; 0 where they are not counted.
  [[nodiscard]] virtual double train_flops_per_token(const MixerConfigs& /*configs*/, int64_t /*seq_len*/) const {
    return 0;
  }
  // The report metric its layers' collective bytes per rank go to ("" = not reported).
  [[nodiscard]] virtual std::string bytes_metric() const { return ""; }
  // Its layers' memory terms on one rank (weights, the recurrence's working set, what the strategy keeps).
  [[nodiscard]] virtual std::vector<MixerMemoryTerm> memory_terms(const MixerConfigs& /*configs*/,
                                                                  const MemoryQuery& /*q*/) const {
    return {};
  }
  // One layer under `strategy` (linear mixers; attention's costs are its transports').
  [[nodiscard]] virtual LayerCost layer_cost(const MixerConfigs& /*configs*/, const std::string& /*strategy*/,
                                             const LayerCostQuery& /*q*/) const {
    return {};
  }

 private:
  MixerInfo info_;
};

// ---- the registry (registry.cpp) ----
// Every mixer, in registration order.
[[nodiscard]] const std::vector<std::unique_ptr<Mixer>>& mixers();
// The mixer of a letter; UsageError naming `key` and listing the known letters when none.
[[nodiscard]] const Mixer& mixer_for(char letter, const std::string& key = "model.mixers");
// nullptr when no mixer has that name.
[[nodiscard]] const Mixer* find_mixer(const std::string& name);
// The mixer whose layers a model_type's config.json names `hf_name` (Mixer::hf_layer_name); nullptr for none.
[[nodiscard]] const Mixer* find_hf_mixer(const std::string& model_type, const std::string& hf_name);
// Every name that model_type's per-layer list gives a mixer, with the mixer: "M (Mamba), * (attention)".
[[nodiscard]] std::string known_hf_layer_names(const std::string& model_type);
// "A (attention), M (Mamba), G (Gated DeltaNet)": each letter with its description, for messages.
[[nodiscard]] std::string known_mixer_letters();
// The letter every layer has when a model names none.
inline constexpr char kDefaultMixer = 'A';
// How many layers of `mixers` (one letter each; "" = every layer the default) are `letter`'s, of `layers`.
[[nodiscard]] int64_t count_layers(const std::string& mixers, int64_t layers, char letter);
// The registered mixers `mixers` uses (registration order; "" = the default's).
[[nodiscard]] std::vector<const Mixer*> mixers_in(const std::string& mixers);

}  // namespace cpbench
