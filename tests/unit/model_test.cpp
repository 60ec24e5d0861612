// The test model: deterministic parameters, the SDPA hook point and its guard, the loss contract.
#include <gtest/gtest.h>

#include "harness/model/data.hpp"
#include "harness/model/model.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;

TEST(Model, SameSeedSameParametersDifferentSeedDifferent) {
  ModelConfig c = ModelConfig::preset_named("tiny");
  TinyTransformer a(c, at::kDouble, at::kCPU), b(c, at::kDouble, at::kCPU);
  c.seed += 1;
  TinyTransformer d(c, at::kDouble, at::kCPU);
  auto pa = a->parameters(), pb = b->parameters(), pd = d->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool any_diff = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(at::equal(pa[i], pb[i]));
    any_diff = any_diff || !at::equal(pa[i], pd[i]);
  }
  EXPECT_TRUE(any_diff);
}

TEST(Model, SdpaHookGuardInstallsAndRestoresEvenOnExceptions) {
  ModelConfig c = ModelConfig::preset_named("tiny");
  TinyTransformer m(c, at::kDouble, at::kCPU);
  at::Tensor ids = at::randint(1, c.vocab, {1, 8}, at::kLong), pos = at::arange(8).unsqueeze(0);
  int plain_calls = 0, hook_calls = 0;
  AttentionFn plain = [&](const at::Tensor& q, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    ++plain_calls;
    return at::zeros_like(q);
  };
  EXPECT_FALSE(static_cast<bool>(m->sdpa_hook));
  {
    SdpaHookGuard g(*m, [&](const at::Tensor& q, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
      ++hook_calls;
      return at::zeros_like(q);
    });
    (void)m->forward(ids, std::nullopt, pos, plain);
  }
  EXPECT_EQ(hook_calls, c.layers);
  EXPECT_EQ(plain_calls, 0);
  EXPECT_FALSE(static_cast<bool>(m->sdpa_hook));
  try {
    SdpaHookGuard g(*m, [&](const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) -> at::Tensor {
      throw Error("boom in the CP transport");
    });
    (void)m->forward(ids, std::nullopt, pos, plain);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "boom in the CP transport");
  }
  EXPECT_FALSE(static_cast<bool>(m->sdpa_hook)) << "the hook was not restored after the forward threw";
  (void)m->forward(ids, std::nullopt, pos, plain);
  EXPECT_EQ(plain_calls, c.layers);
}

TEST(Model, LossIsNormalizedByValidTokensAndIgnoresMaskedOnes) {
  at::Tensor logits = at::randn({1, 4, 5}, at::kDouble);
  at::Tensor labels = at::tensor({int64_t{1}, kIgnoreIndex, int64_t{3}, int64_t{4}}, at::kLong).view({1, 4});
  at::Tensor mask = at::tensor({1, 1, 0, 1}, at::kLong).view({1, 4});
  EXPECT_DOUBLE_EQ(valid_token_count(labels, mask).item<double>(), 2.0);
  at::Tensor lp = at::log_softmax(logits, -1);
  const double want = -(lp[0][0][1] + lp[0][3][4]).item<double>();
  EXPECT_NEAR(token_loss_sum(logits, labels, mask).item<double>(), want, 1e-12);
}

TEST(Model, MropePositionsRunAndDifferFromPlainRope) {
  ModelConfig c = ModelConfig::preset_named("tiny");
  c.mrope_sections = {4, 2, 2};
  TinyTransformer m(c, at::kDouble, at::kCPU);
  at::Tensor ids = at::randint(1, c.vocab, {2, 6}, at::kLong);
  at::Tensor pos = at::arange(6).unsqueeze(0).expand({2, 6});
  at::Tensor pos3 = at::stack({pos, at::floor_divide(pos, 2), at::remainder(pos, 2)}, 0);
  TokenMeta meta{pos.contiguous(), at::zeros({2, 6}, at::kLong), at::zeros({2, 6}, at::kLong), at::ones({2, 6}, at::kBool)};
  AttentionFn attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor&, const at::Tensor&) {
    return local_attention(q, k, v, meta, meta, MaskSpec::parse("causal"), 0.25);
  };
  at::Tensor a = m->forward(ids, std::nullopt, pos, attn).logits;
  at::Tensor b = m->forward(ids, std::nullopt, pos3, attn).logits;
  EXPECT_EQ(b.sizes(), a.sizes());
  EXPECT_FALSE(at::allclose(a, b));
}

TEST(Data, GlobalBatchIsDeterministicAndLabelsStayInsideDocuments) {
  BatchSpec spec;
  spec.seq_len = 20;
  spec.documents = {{7, 9}};
  ModelConfig mc = ModelConfig::preset_named("tiny");
  GlobalData a = make_global_data(spec, mc, at::kDouble, at::kCPU), b = make_global_data(spec, mc, at::kDouble, at::kCPU);
  EXPECT_TRUE(at::equal(*a.batch.input_ids, *b.batch.input_ids));
  EXPECT_EQ(a.real_tokens, 16);
  auto ids = a.batch.input_ids->accessor<int64_t, 2>();
  auto lab = a.batch.labels->accessor<int64_t, 2>();
  auto pos = a.batch.position_ids->accessor<int64_t, 2>();
  for (int s = 0; s < 20; ++s) {
    if (s == 6 || s >= 15) EXPECT_EQ(lab[0][s], kIgnoreIndex) << s;  // document ends and padding
    else EXPECT_EQ(lab[0][s], ids[0][s + 1]) << s;
  }
  EXPECT_EQ(pos[0][7], 0);   // positions restart per document
  EXPECT_EQ(pos[0][15], 8);
  EXPECT_TRUE(a.batch.padding_mask->index({0, 16}).item<bool>());
  EXPECT_FALSE(a.batch.padding_mask->index({0, 15}).item<bool>());
  GlobalData other = make_global_data(spec, mc, at::kDouble, at::kCPU, /*stream=*/1);
  EXPECT_FALSE(at::equal(*a.batch.input_ids, *other.batch.input_ids));
}
