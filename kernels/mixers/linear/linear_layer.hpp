#pragma once
// What every linear mixer's layer holds and draws the same way: its config, its recurrent part's
// parameters (the mixer's Params, which its linear_forward reads), the pre-norm [hidden] and the two
// projections, in_proj [in_width, hidden] ~ N(0, 1/sqrt(hidden)) and out_proj [hidden, config.out_width()]
// ~ N(0, 1/sqrt(out_width)), and the forward they share (LinearLayer): a mixer whose own weights all sit in
// its Params describes its layer as a LinearLayerDef (Mamba-2, GDN); one with weights beyond them writes its
// layer class on LinearWeights (KDA).
//
// Drawn in this order: norm, in_proj, the mixer's own weights (`own`), out_proj. The draws are sequential,
// so this order and the names are what a layer's values depend on: the reference rank and every CP rank
// draw the same.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "kernels/mixers/linear/linear_mixer.hpp"
#include "kernels/mixers/linear/linear_parts.hpp"
#include "kernels/mixers/mixer.hpp"
#include "kernels/mixers/norm.hpp"

namespace cpbench {

template <class Config, class Params>
struct LinearWeights {
  Config c;
  Params p;
  at::Tensor norm, in_proj, out_proj;
};

// The names the three shared weights are drawn under (LayerInit's names).
struct LinearWeightNames {
  const char* norm;
  const char* in_proj;
  const char* out_proj;
};

// `own(params)` draws the mixer's own weights between in_proj and out_proj.
template <class Params, class Config, class Own>
[[nodiscard]] LinearWeights<Config, Params> draw_linear_weights(const Config& c, const LayerInit& in,
                                                                const LinearWeightNames& names, int64_t in_width,
                                                                Own&& own) {
  LinearWeights<Config, Params> w{c, Params{}, {}, {}, {}};
  w.norm = in.ones(names.norm, in.hidden);
  w.in_proj = in.normal(names.in_proj, {in_width, in.hidden}, 1.0 / std::sqrt(static_cast<double>(in.hidden)));
  own(w.p);
  w.out_proj =
      in.normal(names.out_proj, {in.hidden, c.out_width()}, 1.0 / std::sqrt(static_cast<double>(c.out_width())));
  return w;
}

// The parameters every linear mixer's recurrence draws the same way (Params has conv_w, dt_bias, A_log),
// named `prefix` + the field: conv_w [conv_channels, K] ~ N(0, 1/sqrt(K)) (draw_conv); dt_bias [n_dt] around
// -3 (softplus(-3) ~ 0.05: decays over tens of tokens, so the state crosses rank boundaries) and A_log [n_a]
// around 0 (draw_decay).
template <class Params, class Config>
void draw_conv(Params& p, const LayerInit& in, const std::string& prefix, const Config& c) {
  p.conv_w = in.normal(prefix + "conv_w", {c.conv_channels(), c.conv}, 1.0 / std::sqrt(static_cast<double>(c.conv)));
}
template <class Params>
void draw_decay(Params& p, const LayerInit& in, const std::string& prefix, int64_t n_dt, int64_t n_a) {
  p.dt_bias = in.around(prefix + "dt_bias", n_dt, -3.0, 0.5);
  p.A_log = in.around(prefix + "A_log", n_a, 0.0, 0.5);
}

// A linear mixer's layer as data, when all it adds to LinearWeights is parameters in its Params (Mamba-2's,
// Gated DeltaNet's; KDA's low-rank gates are weights of its own, so its layer is a class): its weights'
// names and draws and its output gate. LinearLayer runs it.
template <class ContextT, class ConfigT, class ParamsT>
struct LinearLayerDef {
  using Context = ContextT;  // its step context (LinearStepContextOf: the letter it is found under)
  using Config = ConfigT;
  using Params = ParamsT;
  LinearWeightNames names;
  void (*draw)(Params& p, const Config& c, const LayerInit& in);  // its own weights (draw_linear_weights' `own`)
  // z, the output gate's input, from proj (taken before the recurrence), and the layer's output before
  // out_proj from the recurrence's y and z.
  at::Tensor (*gate_input)(const at::Tensor& proj, const Config& c);
  at::Tensor (*gate)(const at::Tensor& y, const at::Tensor& z, const Params& p, const Config& c);
};

// One layer of `def`: x [R, S_local, hidden] -> RMSNorm -> in_proj [R, S_local, in_proj_width] = proj ->
// linear_forward under the step's strategy, through its clock -> def.gate(y, def.gate_input(proj)) -> out_proj.
template <const auto& def>
class LinearLayer final : public MixerLayer {
 public:
  using Def = std::decay_t<decltype(def)>;
  LinearLayer(const typename Def::Config& c, const LayerInit& in)
      : w_(draw_linear_weights<typename Def::Params>(c, in, def.names, c.in_proj_width(),
                                                     [&](typename Def::Params& p) { def.draw(p, c, in); })) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x, const LayerStep& step) const override {
    using Context = typename Def::Context;
    const auto& ctx = step_context<Context>(step);
    const at::Tensor proj = at::linear(rms_norm(x, w_.norm), w_.in_proj);
    const at::Tensor z = def.gate_input(proj, w_.c);
    const at::Tensor y = clocked(ctx, proj, [&](const at::Tensor& p) { return linear_forward(p, w_.p, w_.c, ctx); });
    return at::linear(def.gate(y, z, w_.p, w_.c), w_.out_proj);
  }

 private:
  LinearWeights<typename Def::Config, typename Def::Params> w_;
};

}  // namespace cpbench
