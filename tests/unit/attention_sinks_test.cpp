// Learned attention sinks (model.attention.sinks; kernels/attention/sink.hpp) on one process: the
// reference's extra softmax column against a hand-written softmax, every transport's W = 1 form (the sink
// rule after a one-block merge, fused and tiled routes) against that reference in the output and every
// gradient (the sink's included), the model's sink parameter (one per query head, drawn large enough to
// matter: a zero sink would hide a dropped or doubled one), the scenario key and its refusals, and the
// sink controls' reasons for not showing. Multi-rank agreement at W = 2, 3, 4 over every layout and
// transport, float64 and bf16, with the controls caught: scenarios/sinks.yaml (CTest scenario_sinks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>

#include "harness/model/model.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/attention/lse_merge.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/attention/sink.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/controls/control.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {
namespace {

TokenMeta docs_meta(int64_t batch, int64_t s) {
  at::Tensor pos = at::arange(s, at::kLong).unsqueeze(0).repeat({batch, 1}).contiguous();
  at::Tensor doc = (at::arange(s, at::kLong) >= s / 3).to(at::kLong).add(at::arange(s, at::kLong) >= s - 20);
  return TokenMeta{pos, at::zeros_like(pos), doc.unsqueeze(0).repeat({batch, 1}).contiguous(),
                   at::ones_like(pos, at::kBool)};
}

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() /
         std::max(1.0, want.to(at::kDouble).abs().max().item<double>());
}

struct Grads {
  at::Tensor out, dq, dk, dv, ds;
};

using AttendFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

Grads run(const AttendFn& attend, const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0,
          const at::Tensor& s0, const at::Tensor& dout) {
  const at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_(),
                   s = s0.clone().requires_grad_();
  const at::Tensor out = attend(q, k, v, s);
  out.backward(dout);
  return {out.detach(), q.grad(), k.grad(), v.grad(), s.grad()};
}

TEST(AttentionSinks, ReferenceColumnIsTheSoftmaxWithTheSinkInTheDenominator) {
  at::manual_seed(5);
  const int64_t B = 1, H = 2, S = 6, D = 4;
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({B, H, S, D}, o), k = at::randn({B, H, S, D}, o), v = at::randn({B, H, S, D}, o);
  const at::Tensor sinks = at::tensor({1.5, -0.75}, o);
  const at::Tensor mask = at::ones({S, S}, at::kBool).tril().unsqueeze(0);
  const at::Tensor got = kernels::reference_attention(q, k, v, mask, 0.5, sinks);
  // Element by element: p_ij = exp(x_ij) / (sum_{j' <= i} exp(x_ij') + exp(s_h)).
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < S; ++i) {
      double den = std::exp(sinks[h].item<double>());
      for (int64_t j = 0; j <= i; ++j) den += std::exp(0.5 * (q[0][h][i] * k[0][h][j]).sum().item<double>());
      for (int64_t d = 0; d < D; ++d) {
        double num = 0;
        for (int64_t j = 0; j <= i; ++j)
          num += std::exp(0.5 * (q[0][h][i] * k[0][h][j]).sum().item<double>()) * v[0][h][j][d].item<double>();
        EXPECT_NEAR(got[0][h][i][d].item<double>(), num / den, 1e-12) << "h " << h << " i " << i << " d " << d;
      }
    }
  // A row that sees no key attends the sink alone: output 0, no NaN.
  const at::Tensor none = kernels::reference_attention(q, k, v, at::zeros({1, S, S}, at::kBool), 0.5, sinks);
  EXPECT_EQ(none.abs().max().item<double>(), 0.0);
}

// The transports' rule after the merge (one block at W = 1) against the reference's extra column: the
// output and every gradient, the sink's included, over masks, GQA and both CPU routes.
TEST(AttentionSinks, EveryTransportAtWorldOneMatchesTheReferenceColumn) {
  const comm::Communicator one;
  const int64_t B = 2, Hq = 4, Hkv = 2, S = 96, D = 8;
  const TokenMeta m = docs_meta(B, S);
  for (const char* mk : {"causal", "document"}) {
    const MaskSpec mask = MaskSpec::parse(mk);
    at::manual_seed(7);
    const auto o = at::TensorOptions().dtype(at::kDouble);
    const at::Tensor q = at::randn({B, Hq, S, D}, o), k = at::randn({B, Hkv, S, D}, o),
                     v = at::randn({B, Hkv, S, D}, o), dout = at::randn({B, Hq, S, D}, o);
    const at::Tensor sinks = at::randn({Hq}, o) * kernels::kSinkInitStddev;
    const Grads want = run([&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& s) {
      return local_attention(a, b, c, m, m, mask, 0, s);
    }, q, k, v, sinks, dout);
    const Grads plain = run([&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor&) {
      return local_attention(a, b, c, m, m, mask, 0);
    }, q, k, v, sinks, dout);
    EXPECT_GT(rel_err(plain.out, want.out), 0.05) << mk << ": the sinks must change the output visibly";
    ASSERT_TRUE(want.ds.defined());
    EXPECT_GT(want.ds.abs().max().item<double>(), 1e-3) << mk << ": the sinks' gradient is not trivial";
    for (const char* name : {"allgather", "ring", "a2a", "hybrid"})
      for (const bool tiled : {false, true}) {
        const auto t = make_transport(name, TransportOptions{std::string(name) == "hybrid" ? 1 : 0});
        AttentionContext ctx{&one, mask, m, m, 0, nullptr, "", nullptr, tiled};
        ctx.plans = t->make_plans(mask, m, m, {}, 0, 1, at::kCPU);
        const Grads got = run([&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& s) {
          AttentionContext call = ctx;
          call.sinks = s;
          return t->attend(a, b, c, call);
        }, q, k, v, sinks, dout);
        const std::string what = std::string(name) + " " + mk + (tiled ? " tiled" : " fused");
        EXPECT_LT(rel_err(got.out, want.out), 1e-12) << what << ": out";
        EXPECT_LT(rel_err(got.dq, want.dq), 1e-12) << what << ": dq";
        EXPECT_LT(rel_err(got.dk, want.dk), 1e-12) << what << ": dk";
        EXPECT_LT(rel_err(got.dv, want.dv), 1e-12) << what << ": dv";
        ASSERT_TRUE(got.ds.defined()) << what << ": no sink gradient";
        EXPECT_LT(rel_err(got.ds, want.ds), 1e-12) << what << ": d sinks";
      }
  }
}

TEST(AttentionSinks, TheRuleAfterTheMergeEqualsTheColumnAndPerStepDoesNot) {
  // Two key blocks merged, then the sink once: the extra column. The sink after each block: not.
  at::manual_seed(11);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const int64_t B = 1, H = 3, S = 5, D = 4;
  const at::Tensor q = at::randn({B, H, S, D}, o), k = at::randn({B, H, 2 * S, D}, o), v = at::randn({B, H, 2 * S, D}, o);
  const at::Tensor sinks = at::tensor({2.0, -1.0, 0.5}, o);
  const at::Tensor want = kernels::reference_attention(q, k, v, at::ones({1, S, 2 * S}, at::kBool), 1.0, sinks);
  const auto block = [&](int64_t j) {
    const at::Tensor x = at::matmul(q, k.narrow(2, j * S, S).transpose(-1, -2));
    const at::Tensor lse = at::logsumexp(x, -1);
    return kernels::BlockOutput{at::matmul(at::softmax(x, -1), v.narrow(2, j * S, S)), lse};
  };
  at::Tensor out, lse;
  kernels::merge_block(out, lse, block(0));
  kernels::merge_block(out, lse, block(1));
  at::Tensor once_out = out.clone(), once_lse = lse.clone();
  kernels::apply_sink(once_out, once_lse, sinks);
  EXPECT_LT(rel_err(once_out, want), 1e-13);
  at::Tensor step_out, step_lse;
  kernels::merge_block(step_out, step_lse, block(0));
  kernels::apply_sink(step_out, step_lse, sinks);
  kernels::merge_block(step_out, step_lse, block(1));
  kernels::apply_sink(step_out, step_lse, sinks);
  EXPECT_GT(rel_err(step_out, want), 1e-3) << "a sink per step counts it twice";
}

// The sink parameter: one per query head per attention layer, drawn N(0, 2): a zero (or tiny) init
// would let a dropped or doubled sink pass in bf16, so the suite refuses one.
TEST(AttentionSinks, ModelDrawsOneLargeSinkPerHead) {
  ModelConfig c = ModelConfig::preset_named("tiny");
  c.heads = 12;
  c.kv_heads = 2;
  c.hidden = 96;
  c.attention.sinks = 1;
  TinyTransformer m(c, at::kDouble, at::kCPU);
  std::vector<at::Tensor> sinks;
  for (const auto& p : m->named_parameters())
    if (p.key().ends_with("sinks")) sinks.push_back(p.value().detach());
  ASSERT_EQ(static_cast<int64_t>(sinks.size()), c.layers);
  for (const auto& s : sinks) {
    EXPECT_EQ(s.dim(), 1);
    EXPECT_EQ(s.size(0), c.heads);
  }
  const at::Tensor all = at::cat(sinks);
  EXPECT_GT(all.std().item<double>(), 0.5 * kernels::kSinkInitStddev) << "sinks drawn too small to matter: " << all;
  EXPECT_GT(all.abs().max().item<double>(), 2.0) << all;
  // Same seed, no sinks: every other parameter is the same draw up to the first sink, and no sink exists.
  ModelConfig plain = c;
  plain.attention.sinks = 0;
  TinyTransformer n(plain, at::kDouble, at::kCPU);
  for (const auto& p : n->named_parameters()) EXPECT_FALSE(p.key().ends_with("sinks")) << p.key();
}

TEST(AttentionSinks, ScenarioKeyAndItsRefusals) {
  const std::string base = R"(
model: {preset: tiny, attention: {sinks: true}}
batch: {batch_size: 1, seq_len: 64}
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)";
  EXPECT_EQ(parse_scenario(base, "x.yaml").model.attention.sinks, 1);
  const auto error_of = [](const std::string& yaml) {
    try {
      (void)parse_scenario(yaml, "scenarios/x.yaml");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string not_bool = error_of(R"(
model: {preset: tiny, attention: {sinks: 3}}
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)");
  EXPECT_NE(not_bool.find("model.attention.sinks"), std::string::npos) << not_bool;
  const std::string no_attention = error_of(R"(
model: {preset: tiny, mixers: MM, attention: {sinks: true}}
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)");
  EXPECT_NE(no_attention.find("model.attention.sinks"), std::string::npos) << no_attention;
  EXPECT_NE(no_attention.find("no attention layers"), std::string::npos) << no_attention;
  const std::string unknown = error_of(R"(
model: {preset: tiny, attention: {sink: true}}
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)");
  EXPECT_NE(unknown.find("model.attention"), std::string::npos) << unknown;
}

// model.attention.sinks: {mean, std} sets the sinks' scale (TE #2541's trap needs |s| ~ 20); the default
// draw is unchanged (N(0, 2), the same values as before the key existed: mean 0 adds nothing).
TEST(AttentionSinks, ScaleKeySetsTheDraw) {
  const auto sinks_of = [](const ModelConfig& c) {
    TinyTransformer m(c, at::kDouble, at::kCPU);
    std::vector<at::Tensor> all;
    for (const auto& p : m->named_parameters())
      if (p.key().ends_with("sinks")) all.push_back(p.value().detach());
    return at::cat(all);
  };
  const ScenarioSpec big = parse_scenario(R"(
model: {preset: tiny, heads: 12, kv_heads: 2, hidden: 96, attention: {sinks: {std: 20, mean: -3}}}
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)",
                                          "x.yaml");
  EXPECT_EQ(big.model.attention.sinks, 1);
  EXPECT_EQ(big.model.attention.sink_std, 20.0);
  EXPECT_EQ(big.model.attention.sink_mean, -3.0);
  const ScenarioSpec plain = parse_scenario(R"(
model: {preset: tiny, heads: 12, kv_heads: 2, hidden: 96, attention: {sinks: true}}
sweep: {sharder: load_balanced, transport: ring, cp: 2}
)",
                                            "x.yaml");
  EXPECT_EQ(plain.model.attention.sink_std, kernels::kSinkInitStddev);
  // The same seed draws the same standard normals: the big sinks are mean + 10x the default ones.
  const at::Tensor a = sinks_of(big.model), b = sinks_of(plain.model);
  EXPECT_TRUE(at::allclose(a, b * 10.0 - 3.0)) << a << b;
  EXPECT_GT(a.abs().max().item<double>(), 15.0) << a;
  const auto error_of = [](const std::string& yaml) {
    try {
      (void)parse_scenario(yaml, "scenarios/x.yaml");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string zero = error_of("model: {preset: tiny, attention: {sinks: {std: 0}}}\n");
  EXPECT_NE(zero.find("model.attention.sinks.std"), std::string::npos) << zero;
  const std::string key = error_of("model: {preset: tiny, attention: {sinks: {scale: 3}}}\n");
  EXPECT_NE(key.find("model.attention.sinks"), std::string::npos) << key;
  const std::string mean = error_of("model: {preset: tiny, attention: {sinks: {mean: big}}}\n");
  EXPECT_NE(mean.find("model.attention.sinks.mean: expected a number"), std::string::npos) << mean;
}

TEST(AttentionSinks, ControlsSayWhenTheyCannotShow) {
  const Control* per_step = find_control("sink_per_step");
  const Control* unreduced = find_control("sink_grad_unreduced");
  ASSERT_NE(per_step, nullptr);
  ASSERT_NE(unreduced, nullptr);
  MixerConfigs with, without;
  with.attention.sinks = 1;
  ControlCase ring{2, {}, &with, 2};
  EXPECT_EQ(per_step->cannot_show(ring), "");
  EXPECT_EQ(unreduced->cannot_show(ring), "");
  ControlCase a2a{2, {}, &with, 1};
  EXPECT_NE(per_step->cannot_show(a2a).find("a2a merges one"), std::string::npos);
  EXPECT_EQ(unreduced->cannot_show(a2a), "") << "a2a's head slices still need the reduction";
  ControlCase no_sinks{2, {}, &without, 2};
  EXPECT_NE(per_step->cannot_show(no_sinks).find("model.attention.sinks"), std::string::npos);
  EXPECT_NE(unreduced->cannot_show(no_sinks).find("model.attention.sinks"), std::string::npos);
  ControlCase w1{1, {}, &with, 1};
  EXPECT_NE(unreduced->cannot_show(w1).find("cp=1"), std::string::npos);
  // The unreduced control leaves the last rank (whose partial every rank then holds) alone.
  const auto inner = make_transport("ring", {});
  EXPECT_EQ(unreduced->wrap(inner, {1, 2, at::kDouble}), inner);
  EXPECT_NE(unreduced->wrap(inner, {0, 2, at::kDouble}), inner);
}

}  // namespace
}  // namespace cpbench
