#pragma once
// Helpers of the Kimi Delta Attention layer tests (kda_cp_test.cpp): the layer's parameters from a seed
// and the layer as the linear mixers' shared harness drives it (mixer_under_test.hpp).
#include <memory>
#include <vector>

#include "kernels/mixers/kda/kda.hpp"
#include "tests/unit/gdn_test_util.hpp"

namespace cpbench::kda_test {

inline KdaParams draw_params(const KdaConfig& c, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  KdaParams p;
  p.conv_w = at::normal(0.0, 0.5, {c.conv_channels(), c.conv}, gen, o);
  // Per-channel biases spread over [-4, 0]: channels that forget within a few tokens beside ones that
  // carry the state across ranks.
  p.dt_bias = at::normal(-2.0, 1.0, {c.key_dim()}, gen, o);
  p.A_log = at::normal(0.0, 0.5, {c.heads}, gen, o);
  p.norm_w = at::normal(1.0, 0.1, {c.value_head_dim}, gen, o);
  return p;
}

using gdn_test::as_leaves;
using gdn_test::leaves;

// The KDA layer's delta-rule part under test (mixer_under_test.hpp).
inline const linear_test::MixerUnderTest<KdaConfig, KdaParams, KdaStepContext> kMixer{
    kda_forward, leaves<KdaParams>, as_leaves<KdaParams>, [](const KdaConfig& c) { return c.proj_width(); },
    [](const KdaConfig& c) { return c.value_dim(); }};

}  // namespace cpbench::kda_test
