#pragma once
// Helpers of the Kimi Delta Attention layer tests (kda_cp_test.cpp): the layer's parameters from a seed,
// and the layer on one rank or on W ranks through the linear mixers' shared harness
// (linear_cp_test_util.hpp).
#include <memory>
#include <vector>

#include "kernels/mixers/kda/kda.hpp"
#include "tests/unit/linear_cp_test_util.hpp"

namespace cpbench::kda_test {

using linear_test::Laid;
using linear_test::LayerRun;

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

inline std::vector<at::Tensor> leaves(const KdaParams& p) { return {p.conv_w, p.dt_bias, p.A_log}; }

inline KdaParams as_leaves(const KdaParams& p, at::ScalarType dtype) {
  const auto f = [&](const at::Tensor& t) { return t.to(dtype).detach().requires_grad_(true); };
  return {f(p.conv_w), f(p.dt_bias), f(p.A_log), f(p.norm_w)};
}

// The layer's delta-rule part over `st` on W threads, loss = sum(o * wy).
inline LayerRun run_cp(const Laid& st, const KdaConfig& c, const KdaParams& p64, const at::Tensor& proj,
                       const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype, GdnCpOptions options) {
  return linear_test::run_cp_layer(
      st, c.value_dim(), leaves(p64), proj, wy, dtype,
      [&](int64_t r, const comm::Communicator& cm, const TokenMeta& all_meta, int64_t* sent) -> linear_test::RankForward {
        GdnCpOptions o = options;
        o.drop_incoming_state = options.drop_incoming_state && r == st.g.cp - 1;
        auto ctx = std::make_shared<KdaStepContext>(cp_linear_context(cm, st.g, all_meta, mask, c, dtype, at::kCPU, "cp:test", o));
        ctx->bytes_sent = sent;
        return [&, ctx](const at::Tensor& x) {
          const KdaParams params = as_leaves(p64, dtype);
          return linear_test::RankRun{kda_forward(x, params, c, *ctx), leaves(params), ctx->bytes_per_layer()};
        };
      });
}

inline LayerRun run_single(const TokenMeta& meta, const KdaConfig& c, const KdaParams& p64, const at::Tensor& proj,
                           const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype) {
  const KdaStepContext ctx = single_rank_linear_context(meta, mask, c, dtype, at::kCPU);
  return linear_test::run_single_layer(proj, wy, dtype, [&](const at::Tensor& x) {
    const KdaParams params = as_leaves(p64, dtype);
    return linear_test::RankRun{kda_forward(x, params, c, ctx), leaves(params), 0};
  });
}

}  // namespace cpbench::kda_test
