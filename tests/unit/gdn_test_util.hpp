#pragma once
// Helpers of the Gated DeltaNet layer tests (gdn_layer_test.cpp, gdn_cp_test.cpp): the layer's
// parameters from a seed and the layer as the linear mixers' shared harness drives it
// (mixer_under_test.hpp).
#include <memory>
#include <vector>

#include "kernels/mixers/gdn/gdn.hpp"
#include "tests/unit/mixer_under_test.hpp"

namespace cpbench::gdn_test {

using linear_test::Laid;
using linear_test::LayerRun;
using linear_test::make_stream;
using linear_test::rel_error;

inline GdnParams draw_params(const GdnConfig& c, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  GdnParams p;
  p.conv_w = at::normal(0.0, 0.5, {c.conv_channels(), c.conv}, gen, o);
  p.dt_bias = at::normal(-2.0, 0.5, {c.value_heads}, gen, o);
  p.A_log = at::normal(0.0, 0.5, {c.value_heads}, gen, o);
  p.norm_w = at::normal(1.0, 0.1, {c.value_head_dim}, gen, o);
  return p;
}

// The delta-rule layers' parameters (GdnParams, KdaParams: conv_w, dt_bias, A_log, norm_w): the leaves whose
// gradients the tests compare, and fresh leaves in a dtype.
template <class Params>
std::vector<at::Tensor> leaves(const Params& p) {
  return {p.conv_w, p.dt_bias, p.A_log};
}
template <class Params>
Params as_leaves(const Params& p, at::ScalarType dtype) {
  const auto f = [&](const at::Tensor& t) { return t.to(dtype).detach().requires_grad_(true); };
  return {f(p.conv_w), f(p.dt_bias), f(p.A_log), f(p.norm_w)};
}

// The GDN layer's delta-rule part under test (mixer_under_test.hpp: run_cp_mixer, run_single_mixer,
// check_mixer).
inline const linear_test::MixerUnderTest<GdnConfig, GdnParams, GdnStepContext> kMixer{
    linear_forward<GdnParams, GdnConfig, GdnStepContext>, leaves<GdnParams>, as_leaves<GdnParams>, [](const GdnConfig& c) { return c.in_proj_width(); },
    [](const GdnConfig& c) { return c.value_dim(); }};

}  // namespace cpbench::gdn_test
