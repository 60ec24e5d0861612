// The Gated DeltaNet layer on one rank (kernels/mixers/gdn/gdn.hpp) against a reference written here from
// the Qwen3-Next definition, head by head: causal depthwise conv and SiLU on q, k, v, L2-normalised q
// and k, value head h reading key head h / (Hv / Hk), beta = sigmoid(b), g = -exp(A_log) softplus(a +
// dt_bias), the token-by-token recurrence (gdn_recurrence); the state reset at a document start under
// a document mask (a document's outputs equal a run of that document alone); the gated RMSNorm; and the
// refusals naming the model.gdn key.
#include <gtest/gtest.h>

#include <cmath>

#include "sharders/core/check.hpp"
#include "tests/unit/gdn_test_util.hpp"

using namespace cpbench;
using namespace cpbench::gdn_test;

namespace {

// The layer's o for one row of L tokens, every token real, one document, written head by head.
at::Tensor reference_layer(const at::Tensor& proj, const GdnParams& p, const GdnConfig& c) {
  const int64_t L = proj.size(1), K = c.conv, Hk = c.key_heads, Hv = c.value_heads;
  const int64_t dk = c.key_head_dim, dv = c.value_head_dim, cc = c.conv_channels();
  const at::Tensor x = proj[0].narrow(1, 0, cc);  // [L, cc]
  at::Tensor conv = at::zeros({L, cc}, x.options());
  for (int64_t t = 0; t < L; ++t)
    for (int64_t j = 0; j < K && j <= t; ++j) conv[t] += p.conv_w.select(1, K - 1 - j) * x[t - j];
  conv = at::silu(conv);
  const auto unit = [](const at::Tensor& t) { return t / at::sqrt((t * t).sum(-1, true) + 1e-6); };
  const at::Tensor b = proj[0].narrow(1, cc + c.value_dim(), Hv), a = proj[0].narrow(1, cc + c.value_dim() + Hv, Hv);
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < Hv; ++h) {
    const int64_t kh = h / (Hv / Hk);
    const at::Tensor q = unit(conv.narrow(1, kh * dk, dk)) / std::sqrt(static_cast<double>(dk));
    const at::Tensor k = unit(conv.narrow(1, Hk * dk + kh * dk, dk));
    const at::Tensor v = conv.narrow(1, 2 * Hk * dk + h * dv, dv);
    const at::Tensor beta = at::sigmoid(b.select(1, h));
    const at::Tensor g = -at::exp(p.A_log[h]) * at::softplus(a.select(1, h) + p.dt_bias[h]);
    const auto row = [&](const at::Tensor& t) { return t.view({1, L, 1, -1}); };
    heads.push_back(gdn_recurrence(row(q), row(k), row(v), g.view({1, L, 1}), beta.view({1, L, 1}),
                                   at::zeros({1, L}, at::kLong))
                        .o.view({L, dv}));
  }
  return at::cat(heads, 1).unsqueeze(0);  // [1, L, Hv * dv]
}

at::Tensor random_proj(const GdnConfig& c, int64_t L, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::normal(0.0, 1.0, {1, L, c.in_proj_width()}, gen, at::TensorOptions().dtype(at::kDouble));
}

}  // namespace

TEST(GdnLayer, MatchesTheDefinitionHeadByHead) {
  // 2 key heads, 6 value heads (three per key head), dk != dv, chunk 8 over 45 tokens.
  const GdnConfig c{2, 6, 8, 4, 4, 8};
  const GdnParams p = draw_params(c, 3);
  const at::Tensor proj = random_proj(c, 45, 4);
  const Laid st = make_stream("contiguous", 1, {{45}});
  const GdnStepContext ctx = single_rank_linear_context(st.meta, MaskSpec::parse("causal"), c, at::kDouble, at::kCPU);
  const at::Tensor got = linear_forward<GdnParams, GdnConfig, GdnStepContext>(proj, p, c, ctx);
  const at::Tensor want = reference_layer(proj, p, c);
  EXPECT_LT(rel_error(got, want), 1e-12);
  // Each value head against the definition on its own: a wrong key head shows in that head.
  for (int64_t h = 0; h < c.value_heads; ++h)
    EXPECT_LT(rel_error(got.narrow(2, h * 4, 4), want.narrow(2, h * 4, 4)), 1e-12) << "value head " << h;
}

TEST(GdnLayer, TheStateResetsAtADocumentStart) {
  const GdnConfig c{2, 4, 8, 8, 4, 8};
  const GdnParams p = draw_params(c, 7);
  const at::Tensor proj = random_proj(c, 70, 8);
  const MaskSpec doc = MaskSpec::parse("document");
  const Laid both = make_stream("contiguous", 1, {{30, 40}});
  const Laid alone = make_stream("contiguous", 1, {{40}});
  const at::Tensor y = linear_forward<GdnParams, GdnConfig, GdnStepContext>(proj, p, c, single_rank_linear_context(both.meta, doc, c, at::kDouble, at::kCPU));
  const at::Tensor tail = proj.narrow(1, 30, 40).contiguous();
  const at::Tensor y2 = linear_forward<GdnParams, GdnConfig, GdnStepContext>(tail, p, c, single_rank_linear_context(alone.meta, doc, c, at::kDouble, at::kCPU));
  EXPECT_LT(rel_error(y.narrow(1, 30, 40), y2), 1e-12) << "the second document must not see the first";
  // Under a causal mask the two documents are one stream: the second sees the first.
  const at::Tensor yc =
      linear_forward<GdnParams, GdnConfig, GdnStepContext>(proj, p, c, single_rank_linear_context(both.meta, MaskSpec::parse("causal"), c, at::kDouble, at::kCPU));
  EXPECT_GT(rel_error(yc.narrow(1, 30, 40), y2), 1e-3);
}

TEST(GdnLayer, GatedNormIsPerValueHead) {
  const GdnConfig c{1, 2, 4, 3, 4, 8};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor x = at::normal(0.0, 1.0, {1, 5, 6}, gen, o), z = at::normal(0.0, 1.0, {1, 5, 6}, gen, o);
  const at::Tensor w = at::tensor({0.5, 1.0, 2.0}, o);
  const at::Tensor got = gdn_gated_norm(x, z, w, c);
  for (int64_t h = 0; h < 2; ++h) {
    const at::Tensor xh = x.narrow(2, 3 * h, 3);
    const at::Tensor want = xh / at::sqrt((xh * xh).mean(-1, true) + 1e-6) * w * at::silu(z.narrow(2, 3 * h, 3));
    EXPECT_LT(rel_error(got.narrow(2, 3 * h, 3), want), 1e-14) << "value head " << h;
  }
}

TEST(GdnLayer, ConfigRefusalsNameTheKey) {
  const auto why = [](GdnConfig c) {
    try {
      c.validate();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(why(GdnConfig{}), "accepted");
  EXPECT_NE(why(GdnConfig{2, 3, 8, 8, 4, 8}).find("model.gdn.value_heads: 3 must be a positive multiple of "
                                                  "model.gdn.key_heads 2"),
            std::string::npos);
  EXPECT_NE(why(GdnConfig{2, 4, 0, 8, 4, 8}).find("model.gdn.key_head_dim"), std::string::npos);
  EXPECT_NE(why(GdnConfig{2, 4, 8, 8, 4, 0}).find("model.gdn.chunk"), std::string::npos);
}
