#pragma once
// Helpers of the Gated DeltaNet layer tests (gdn_layer_test.cpp, gdn_cp_test.cpp): the layer's
// parameters from a seed, and the layer on one rank or on W ranks through the linear mixers' shared
// harness (linear_cp_test_util.hpp).
#include <memory>
#include <vector>

#include "kernels/mixers/gdn/gdn.hpp"
#include "tests/unit/linear_cp_test_util.hpp"

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

inline std::vector<at::Tensor> leaves(const GdnParams& p) { return {p.conv_w, p.dt_bias, p.A_log}; }

inline GdnParams as_leaves(const GdnParams& p, at::ScalarType dtype) {
  const auto f = [&](const at::Tensor& t) { return t.to(dtype).detach().requires_grad_(true); };
  return {f(p.conv_w), f(p.dt_bias), f(p.A_log), f(p.norm_w)};
}

// The layer over `st` on W threads, loss = sum(o * wy).
inline LayerRun run_cp(const Laid& st, const GdnConfig& c, const GdnParams& p64, const at::Tensor& proj,
                       const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype, GdnCpOptions options) {
  return linear_test::run_cp_layer(
      st, c.value_dim(), leaves(p64), proj, wy, dtype,
      [&](int64_t r, const comm::Communicator& cm, const TokenMeta& all_meta, int64_t* sent) -> linear_test::RankForward {
        GdnCpOptions o = options;
        o.drop_incoming_state = options.drop_incoming_state && r == st.g.cp - 1;
        auto ctx = std::make_shared<GdnStepContext>(cp_linear_context(cm, st.g, all_meta, mask, c, dtype, at::kCPU, "cp:test", o));
        ctx->bytes_sent = sent;
        return [&, ctx](const at::Tensor& x) {
          const GdnParams params = as_leaves(p64, dtype);
          return linear_test::RankRun{gdn_forward(x, params, c, *ctx), leaves(params), ctx->bytes_per_layer()};
        };
      });
}

inline LayerRun run_single(const TokenMeta& meta, const GdnConfig& c, const GdnParams& p64, const at::Tensor& proj,
                           const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype) {
  const GdnStepContext ctx = single_rank_linear_context(meta, mask, c, dtype, at::kCPU);
  return linear_test::run_single_layer(proj, wy, dtype, [&](const at::Tensor& x) {
    const GdnParams params = as_leaves(p64, dtype);
    return linear_test::RankRun{gdn_forward(x, params, c, ctx), leaves(params), 0};
  });
}

}  // namespace cpbench::gdn_test
