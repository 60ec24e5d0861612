#pragma once
// What the linear-recurrence mixers' registry entries share (Mamba-2's mamba_mixer.cpp, Gated DeltaNet's
// gdn_mixer.cpp): two CP strategies, a channel-parallel one (the default, named by the mixer) and
// "state_passing"; the same refusal rule for state passing; a state-dropped negative control; the layer's
// recurrent section timed by the step's clock. Each supplies its sizes, its layer and its formulas.
#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include "kernels/mixers/linear/linear_parts.hpp"
#include "kernels/mixers/linear/scan_plan.hpp"
#include "kernels/mixers/mixer.hpp"
#include "kernels/mixers/section_clock.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

class LinearMixer : public Mixer {
 public:
  using Mixer::Mixer;
  [[nodiscard]] bool recurrent() const override { return true; }
  [[nodiscard]] std::string case_suffix(const std::string& strategy) const override {
    return strategy == strategies().front() ? "" : suffix_prefix() + strategy;
  }
  // One layer on one rank: the mixer's recurrence FLOPs, bytes and extra memory, plus what every linear
  // layer has: dense FLOPs 2 s d in_proj + 2 s out d + 2 K s conv_channels (in_proj, out_proj, conv) and
  // kept activations R s (in_proj + conv_channels + out) e (proj, the conv's output, the output).
  [[nodiscard]] LayerCost layer_cost(const MixerConfigs& configs, const std::string& strategy,
                                     const LayerCostQuery& q) const final {
    const LinearLayerSizes z = layer_sizes(configs);
    const int64_t s = q.seq_len / q.cp, Q = std::max<int64_t>(1, std::min(z.chunk, s));
    const double rows = static_cast<double>(q.rows), d = static_cast<double>(q.hidden);
    LayerCost out;
    out.recurrence_flops = rows * recurrence_flops(configs, strategy, q);
    out.dense_flops = rows * static_cast<double>(s) *
                      (2 * d * static_cast<double>(z.in_proj_width) + 2 * static_cast<double>(z.out_width) * d +
                       2 * static_cast<double>(z.conv * z.conv_channels));
    out.bytes = cp_bytes(configs, strategy, q);
    out.activation_bytes = q.rows * s * (z.in_proj_width + z.conv_channels + z.out_width) * q.elem_bytes +
                           working_set_bytes(configs, q, s, Q) + cp_extra_memory(configs, strategy, q);
    const CoreTraffic t = core_traffic(configs, strategy, q, out.bytes);
    out.recurrence_hbm_bytes = rows * t.hbm_bytes;
    out.copy_hbm_bytes = t.copy_bytes;
    out.core_bytes = t.core_bytes;
    return out;
  }
  // "<label>_bytes_per_rank" in lower case: ssm_bytes_per_rank (Mamba), gdn_bytes_per_rank (Gated DeltaNet).
  [[nodiscard]] std::string bytes_metric() const override {
    std::string m = label();
    std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return m + "_bytes_per_rank";
  }
  [[nodiscard]] std::string unsupported_reason(const MixerConfigs& configs, const std::string& strategy,
                                               const Layout& layout, int64_t cp) const override {
    if (strategy == kStatePassing) return state_passing_unsupported_reason(layout, cp, strategy_axis());
    return cp > 1 ? split_reason(configs, cp) : "";
  }

 protected:
  struct LinearLayerSizes {
    int64_t in_proj_width = 0, out_width = 0, conv = 1, conv_channels = 0, chunk = 1;
  };
  [[nodiscard]] virtual LinearLayerSizes layer_sizes(const MixerConfigs& configs) const = 0;
  // Forward FLOPs of the recurrence on one rank for one row (its strategy's own count).
  [[nodiscard]] virtual double recurrence_flops(const MixerConfigs& configs, const std::string& strategy,
                                                const LayerCostQuery& q) const = 0;
  // The core's memory-bound side (LayerCost::recurrence_hbm_bytes, copy_hbm_bytes, core_bytes): its passes'
  // forward HBM bytes for one row, the copies around its collectives, and the bytes of those collectives
  // alone. Default: not modelled (hbm 0: the core runs at the cluster's ssm_flops), every byte the core's.
  using CoreTraffic = LinearCoreTraffic;
  [[nodiscard]] virtual CoreTraffic core_traffic(const MixerConfigs& /*configs*/, const std::string& /*strategy*/,
                                                 const LayerCostQuery& /*q*/, const LinearCpBytes& bytes) const {
    return {0, 0, bytes};
  }
  // The strategy's bytes per layer and its extra memory (the mixer's formulas).
  [[nodiscard]] virtual LinearCpBytes cp_bytes(const MixerConfigs& configs, const std::string& strategy,
                                               const LayerCostQuery& q) const = 0;
  [[nodiscard]] virtual int64_t cp_extra_memory(const MixerConfigs& configs, const std::string& strategy,
                                                const LayerCostQuery& q) const = 0;
  // What the chunked form keeps beyond the activations for s tokens per row in chunks of Q.
  [[nodiscard]] virtual int64_t working_set_bytes(const MixerConfigs& configs, const LayerCostQuery& q, int64_t s,
                                                  int64_t Q) const = 0;
  // Why the channel-parallel strategy cannot split the layer over cp ranks ("" when it can).
  [[nodiscard]] virtual std::string split_reason(const MixerConfigs& configs, int64_t cp) const = 0;
  // What a case name puts before a non-default strategy ("/" or "/gdn_").
  [[nodiscard]] virtual std::string suffix_prefix() const = 0;
  // The "<label> layers (<strategy>)" term: what every layer keeps under the case's strategy (layer_cost's
  // activation bytes, B rows of the padded row over W ranks, at most 2 (docs + 1) chunks per rank), plus
  // the reference's over S on one rank; `guess` (a cruder count that cannot overflow) when the sizes are
  // too large for the integer formulas or the strategy cannot split the layer.
  [[nodiscard]] MixerMemoryTerm layers_term(const MixerConfigs& configs, const MemoryQuery& q, const std::string& key,
                                            double guess) const {
    constexpr double kSafeForIntegerFormulas = 1e15;
    const auto W = static_cast<int64_t>(q.cp);
    const bool splits = q.strategy != strategies().front() || W == 1 || split_reason(configs, W).empty();
    if (guess >= kSafeForIntegerFormulas || !splits) return {label() + " layers", key, guess};
    const auto activation = [&](int64_t P, int64_t cp, int64_t chunks) {
      LayerCostQuery lq;
      lq.hidden = static_cast<int64_t>(q.hidden);
      lq.seq_len = P;
      lq.cp = cp;
      lq.elem_bytes = static_cast<int64_t>(q.elem_bytes);
      lq.chunks_per_rank = chunks;
      return static_cast<double>(q.layers * layer_cost(configs, q.strategy, lq).activation_bytes);
    };
    const auto P = static_cast<int64_t>(q.local_len * q.cp);
    const double bytes = q.batch * activation(P, W, 2 * (q.docs + 1)) +
                         (q.reference_rank ? q.batch * activation(static_cast<int64_t>(q.seq_len), 1, 1) : 0.0);
    return {label() + " layers (" + q.strategy + ")", key, bytes};
  }
  // The control that makes the last rank's layers ignore the state arriving at their chunks.
  [[nodiscard]] MixerControl state_dropped_control(std::string name, const std::string& layers) const {
    return {std::move(name), "load_balanced, state-passing " + layers + " on the last rank ignore their incoming state",
            "drops_incoming_state", kStatePassing, true};
  }
};

// A linear mixer's registry entry from its parts (linear_parts.hpp): its config's fields and validation,
// its strategies, layers and step contexts, its byte and memory formulas and its refusal. What is left
// to the mixer: its identity, controls, texts, sizes, recurrence FLOPs and working set.
template <class Config>
class LinearMixerOf : public LinearMixer {
 public:
  using Parts = LinearPartsOf<Config>;
  using Strategy = typename Parts::Strategy;
  using LinearMixer::LinearMixer;
  [[nodiscard]] std::vector<ConfigField> config_fields(MixerConfigs& c) const override {
    return (c.*parts().config).fields();
  }
  void validate(const MixerConfigs& c) const override { config(c).validate(); }
  [[nodiscard]] std::vector<std::string> strategies() const override { return known_cp_strategies<Strategy>(); }
  [[nodiscard]] std::unique_ptr<MixerLayer> make_layer(const MixerConfigs& c, const LayerInit& init) const override {
    return parts().layer(config(c), init);
  }
  [[nodiscard]] std::shared_ptr<MixerStepContext> single_rank_context(const MixerConfigs& c, const TokenMeta& meta,
                                                                      const MaskSpec& mask, at::ScalarType dtype,
                                                                      const at::Device& device) const override {
    return std::make_shared<typename Parts::Context>(single_rank_linear_context(meta, mask, config(c), dtype, device));
  }
  // The faults are the linear mixers' controls (state_dropped_control; Mamba's scans_rank_order).
  [[nodiscard]] std::shared_ptr<MixerStepContext> cp_context(const MixerConfigs& c,
                                                             const CpStepInputs& in) const override {
    LinearCpOptions<Strategy> o;
    o.strategy = strategy(in.strategy);
    o.drop_incoming_state = in.fault == "drops_incoming_state";
    o.undo_chunk_order = in.fault != "scans_rank_order";
    return std::make_shared<typename Parts::Context>(
        cp_linear_context(*in.comm, *in.layout, in.all_meta, in.mask, config(c), in.dtype, in.device, in.nvtx, o));
  }

 protected:
  [[nodiscard]] LinearLayerSizes layer_sizes(const MixerConfigs& configs) const final {
    const Config& c = config(configs);
    return {c.in_proj_width(), c.out_width(), c.conv, c.conv_channels(), c.chunk};
  }
  [[nodiscard]] LinearCpBytes cp_bytes(const MixerConfigs& c, const std::string& s,
                                       const LayerCostQuery& q) const override {
    return linear_cp_bytes(parts().terms, strategy(s), shape(config(c), q));
  }
  [[nodiscard]] int64_t cp_extra_memory(const MixerConfigs& c, const std::string& s,
                                        const LayerCostQuery& q) const override {
    return linear_cp_extra_memory_bytes(parts().terms, strategy(s), shape(config(c), q));
  }
  [[nodiscard]] std::string split_reason(const MixerConfigs& c, int64_t cp) const override {
    return config(c).cp_unsupported_reason(cp);
  }
  // The scenario's strategy name; throws naming the axis for an unknown one.
  [[nodiscard]] Strategy strategy(const std::string& name) const {
    const std::optional<Strategy> s = parse_cp_strategy<Strategy>(name);
    CP_CHECK_USAGE(s.has_value(), strategy_axis(), ": unknown ", label(), " CP strategy '", name, "'");
    return *s;
  }
  [[nodiscard]] static const Config& config(const MixerConfigs& c) { return c.*parts().config; }
  // The mixer's cost shape for a plan's or admission's query.
  [[nodiscard]] static typename Parts::Shape shape(const Config& c, const LayerCostQuery& q) {
    return parts().shape(c, linear_cp_shape(q.rows, q.seq_len, q.cp, c.conv, q.elem_bytes, q.chunks_per_rank));
  }

 private:
  static const Parts& parts() { return linear_parts(Config{}); }
};

// A linear layer's recurrent section through the step's clock (when one is set): core(proj).
template <class Core>
[[nodiscard]] at::Tensor clocked(const MixerStepContext& ctx, const at::Tensor& proj, Core&& core) {
  return ctx.clock ? ctx.clock->leave(core(ctx.clock->enter(proj))) : core(proj);
}

// The step's context of the mixer whose letter the Context type carries (LinearStepContextOf), as that
// type; throws naming the layer's mixer (its letter and registry description) when the runner passed none.
template <class Context>
[[nodiscard]] const Context& step_context(const LayerStep& step) {
  constexpr char letter = Context::kLetter;
  const auto it = step.contexts ? step.contexts->find(letter) : MixerContexts::const_iterator{};
  CP_CHECK(step.contexts && it != step.contexts->end() && it->second, "model: a layer with mixer ",
           std::string(1, letter), " (", mixer_for(letter).description(),
           ") but no context for it was passed to forward");
  const auto* ctx = dynamic_cast<const Context*>(it->second.get());
  CP_CHECK(ctx != nullptr, "model: the context passed for mixer ", std::string(1, letter), " (",
           mixer_for(letter).description(), ") is another mixer's");
  return *ctx;
}

}  // namespace cpbench
