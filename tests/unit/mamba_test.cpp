// The Mamba mixer (kernels/mixers/mamba/mamba.hpp): the chunked scan the layer uses against the quadratic form
// and the plain recurrence (values and gradients, resets inside chunks and at chunk boundaries, pad
// slots, a length no multiple of the chunk, every dtype), the quadratic form against the recurrence,
// the recurrence against a scalar loop written out by hand, the conv window and scan resets at
// document starts and across pad slots, and the config / scenario checks of hidden-parallel CP.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/mixers/mamba/mamba.hpp"
#include "harness/model/model.hpp"
#include "harness/runner/scenario.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;

namespace {

struct ScanInputs {
  at::Tensor x, dt, A, B, C, D, group;
};

// Random scan inputs in float64 from `seed`, every row one group; dt = softplus(N(dt_mean, 1)).
ScanInputs draw_inputs(uint64_t seed, int64_t R, int64_t L, int64_t H, int64_t P, int64_t G, int64_t N,
                       double dt_mean) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  ScanInputs in;
  in.x = at::normal(0.0, 1.0, {R, L, H, P}, gen, opts);
  in.dt = at::softplus(at::normal(dt_mean, 1.0, {R, L, H}, gen, opts));
  in.A = -at::exp(at::normal(0.0, 0.5, {H}, gen, opts));
  in.B = at::normal(0.0, 1.0, {R, L, G, N}, gen, opts);
  in.C = at::normal(0.0, 1.0, {R, L, G, N}, gen, opts);
  in.D = at::normal(1.0, 0.1, {H}, gen, opts);
  in.group = at::zeros({R, L}, at::kLong);
  return in;
}

ScanInputs with_grad(ScanInputs in, bool requires_grad) {
  if (requires_grad)
    for (at::Tensor* t : {&in.x, &in.dt, &in.A, &in.B, &in.C, &in.D}) t->requires_grad_(true);
  return in;
}

// R = 2 rows, L = 23 tokens, H = 4 heads, G = 2 groups; row 0 resets at t = 9 and 17, pads (dt = 0)
// at t = 5, 6 of row 0 and t = 20 of row 1.
ScanInputs random_inputs(bool requires_grad) {
  const int64_t L = 23;
  ScanInputs in = draw_inputs(42, 2, L, 4, 3, 2, 5, -1.0);
  in.dt.select(0, 0).narrow(0, 5, 2).zero_();
  in.dt.select(0, 1).narrow(0, 20, 1).zero_();
  in.group.select(0, 0).narrow(0, 9, L - 9).fill_(1);
  in.group.select(0, 0).narrow(0, 17, L - 17).fill_(2);
  in.group.select(0, 1).fill_(3);
  return with_grad(in, requires_grad);
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// One rank, no CP: the whole layer's SSM part on rows described by `meta`.
at::Tensor ssm_layer(const at::Tensor& proj, const SsmParams& p, const SsmConfig& c, const TokenMeta& meta,
                     bool document_mask) {
  const SsmStepContext ctx = single_rank_linear_context(
      meta, document_mask ? MaskSpec::parse("document") : MaskSpec::parse("causal"), c, at::kDouble, at::kCPU);
  return linear_forward<SsmParams, SsmConfig, SsmStepContext>(proj, p, c, ctx);
}

SsmParams random_params(const SsmConfig& c) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  return SsmParams{at::normal(0.0, 0.5, {c.conv_channels(), c.conv}, gen, opts),
                   at::normal(0.0, 0.1, {c.conv_channels()}, gen, opts), at::normal(-2.0, 0.5, {c.heads}, gen, opts),
                   at::normal(0.0, 0.5, {c.heads}, gen, opts), at::normal(1.0, 0.1, {c.heads}, gen, opts)};
}

}  // namespace

namespace {

using ScanFn = std::function<at::Tensor(const ScanInputs&)>;

at::Tensor chunked(const ScanInputs& in, int64_t chunk) {
  return ssm_scan(in.x, in.dt, in.A, in.B, in.C, in.D, in.group, chunk);
}
at::Tensor quadratic(const ScanInputs& in) { return ssm_scan_quadratic(in.x, in.dt, in.A, in.B, in.C, in.D, in.group); }
at::Tensor recurrence(const ScanInputs& in) {
  return ssm_scan_recurrence(in.x, in.dt, in.A, in.B, in.C, in.D, in.group);
}

// Runs `f` and `g` on fresh copies of `make(true)`, backpropagates the same random weighting of the
// outputs through both, and checks values and the gradients of all six inputs (none NaN).
void expect_same_values_and_gradients(const std::function<ScanInputs(bool)>& make, const ScanFn& f, const ScanFn& g,
                                      double value_bound, double grad_bound, const std::string& what) {
  ScanInputs a = make(true), b = make(true);
  const at::Tensor ya = f(a), yb = g(b);
  EXPECT_LT(max_abs_diff(ya, yb), value_bound) << what;
  const at::Tensor w = at::normal(0.0, 1.0, ya.sizes(), at::make_generator<at::CPUGeneratorImpl>(3),
                                  at::TensorOptions().dtype(at::kDouble));
  (ya * w).sum().backward();
  (yb * w).sum().backward();
  const char* names[] = {"x", "dt", "A", "B", "C", "D"};
  const at::Tensor* ga[] = {&a.x, &a.dt, &a.A, &a.B, &a.C, &a.D};
  const at::Tensor* gb[] = {&b.x, &b.dt, &b.A, &b.B, &b.C, &b.D};
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(ga[i]->grad().defined()) << what << ": grad of " << names[i];
    EXPECT_LT(max_abs_diff(ga[i]->grad(), gb[i]->grad()), grad_bound) << what << ": grad of " << names[i];
    EXPECT_FALSE(ga[i]->grad().isnan().any().item<bool>()) << what << ": grad of " << names[i];
  }
}

}  // namespace

TEST(SsmScan, QuadraticFormEqualsTheRecurrenceValuesAndGradients) {
  expect_same_values_and_gradients(random_inputs, quadratic, recurrence, 1e-12, 1e-10, "quadratic vs recurrence");
}

// The layer's chunked scan against both references on L = 23 with resets at 9 and 17 (row 0) and
// pads at 5, 6 (row 0) and 20 (row 1). The chunk sizes put those events everywhere a chunk can have
// them: Q = 1 (every token its own chunk), 4, 8 (resets just after a boundary; 23 no multiple),
// 5 / 6 (a pad slot opening a chunk), 9 (reset 9 opens a chunk, reset 17 is a chunk's LAST token),
// 16 (one reset in each chunk), 17 (reset 17 opens a chunk), 23 (one chunk = the quadratic form),
// 64 (a chunk longer than the row). Row 1 carries one state across every chunk boundary.
TEST(SsmScan, ChunkedEqualsQuadraticAndRecurrenceValuesAndGradients) {
  for (int64_t q : {1, 3, 4, 5, 6, 8, 9, 16, 17, 23, 64}) {
    const ScanFn f = [q](const ScanInputs& in) { return chunked(in, q); };
    expect_same_values_and_gradients(random_inputs, f, quadratic, 1e-12, 1e-10, "chunk " + std::to_string(q));
    expect_same_values_and_gradients(random_inputs, f, recurrence, 1e-12, 1e-10, "chunk " + std::to_string(q));
  }
}

// A longer row (L = 300, chunks of 64 with a short last one): documents of assorted lengths, two of
// them shorter than a chunk, one spanning three chunks, and runs of pad slots across chunk boundaries.
namespace {

ScanInputs long_inputs(bool requires_grad) {
  const int64_t L = 300;
  ScanInputs in = draw_inputs(5, 1, L, 2, 4, 1, 3, -2.0);
  in.dt.narrow(1, 60, 10).zero_();  // pads across the boundary at 64
  in.dt.narrow(1, 190, 3).zero_();
  for (int64_t start : {70, 100, 128, 131, 290}) in.group.narrow(1, start, L - start).add_(1);
  return with_grad(in, requires_grad);
}

}  // namespace

TEST(SsmScan, ChunkedEqualsQuadraticOnALongRow) {
  const ScanFn f = [](const ScanInputs& in) { return chunked(in, kSsmChunk); };
  expect_same_values_and_gradients(long_inputs, f, quadratic, 1e-12, 1e-10, "L 300, chunk 64");
}

// float32 computes in float32, bfloat16 in float32 with the result rounded: each against the float64
// quadratic form on the same (rounded) inputs; the output keeps the input dtype.
TEST(SsmScan, ChunkedKeepsEveryDtypeAndComputesBfloat16InFloat32) {
  const ScanInputs ref = long_inputs(false);
  for (auto [dtype, rel_bound] : {std::pair{at::kFloat, 1e-5}, std::pair{at::kBFloat16, 1e-2}}) {
    ScanInputs low = ref;
    for (at::Tensor* t : {&low.x, &low.dt, &low.A, &low.B, &low.C, &low.D}) *t = t->to(dtype);
    ScanInputs back = low;
    for (at::Tensor* t : {&back.x, &back.dt, &back.A, &back.B, &back.C, &back.D}) *t = t->to(at::kDouble);
    const at::Tensor want = quadratic(back), got = chunked(low, kSsmChunk);
    EXPECT_EQ(got.scalar_type(), dtype);
    const double scale = want.abs().max().item<double>();
    EXPECT_LT(max_abs_diff(got.to(at::kDouble), want) / scale, rel_bound) << dtype;
  }
}

TEST(SsmScan, FlopCountFollowsItsConvention) {
  // Q = 64, P = 16, N = 16: 2·64·16 + 2·64·16 + 4·256 + 2·256/64
  EXPECT_DOUBLE_EQ(ssm_scan_flops(4096, 64, 16, 16), 2048 + 2048 + 1024 + 8);
  EXPECT_DOUBLE_EQ(ssm_scan_flops(10, 64, 16, 16), ssm_scan_flops(10, 10, 16, 16));  // one chunk of the row
}

// The recurrence written out element by element: h[p][n] = exp(dt A) h[p][n] + dt x[p] B[n],
// y[p] = sum_n h[p][n] C[n] + D x[p]; the state restarts where the group changes.
TEST(SsmScan, RecurrenceEqualsAScalarLoop) {
  const ScanInputs in = random_inputs(false);
  const at::Tensor y = recurrence(in);
  const int64_t R = in.x.size(0), L = in.x.size(1), H = in.x.size(2), P = in.x.size(3), G = in.B.size(2),
                N = in.B.size(3);
  double worst = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      std::vector<double> st(static_cast<size_t>(P * N), 0.0);
      for (int64_t t = 0; t < L; ++t) {
        const double dt = in.dt[r][t][h].item<double>(), A = in.A[h].item<double>();
        const bool reset = t == 0 || in.group[r][t].item<int64_t>() != in.group[r][t - 1].item<int64_t>();
        for (int64_t p = 0; p < P; ++p) {
          double out = in.D[h].item<double>() * in.x[r][t][h][p].item<double>();
          for (int64_t n = 0; n < N; ++n) {
            double& s = st[static_cast<size_t>(p * N + n)];
            s = (reset ? 0.0 : std::exp(dt * A) * s) + dt * in.x[r][t][h][p].item<double>() * in.B[r][t][g][n].item<double>();
            out += s * in.C[r][t][g][n].item<double>();
          }
          worst = std::max(worst, std::abs(out - y[r][t][h][p].item<double>()));
        }
      }
    }
  EXPECT_LT(worst, 1e-12);
}

// conv taps: K = 3, row [real, real, pad, real | new document: real, real]. Tap K-1 is the token
// itself, K-2 its previous real token of the same group; pad slots and a new document read zeros.
TEST(SsmPlan, ConvWindowSkipsPadSlotsAndRestartsAtDocuments) {
  TokenMeta m;
  m.pos = at::arange(6).unsqueeze(0);
  m.segment = at::zeros({1, 6}, at::kLong);
  m.doc = at::tensor({0, 0, 0, 0, 1, 1}, at::kLong).unsqueeze(0);
  m.valid = at::tensor({1, 1, 0, 1, 1, 1}, at::kLong).to(at::kBool).unsqueeze(0);
  const ScanPlan doc = make_scan_plan(m, true, 3, at::kDouble, at::kCPU);
  const int64_t Z = 6;  // the zero row of row 0 ([R * (L + 1)] rows)
  const std::vector<int64_t> want = {Z, Z, 0, Z, 0, 1, Z, Z, Z, 0, 1, 3, Z, Z, 4, Z, 4, 5};
  EXPECT_EQ(std::vector<int64_t>(doc.conv_src.data_ptr<int64_t>(), doc.conv_src.data_ptr<int64_t>() + 18), want);
  EXPECT_EQ(doc.group[0][3].item<int64_t>(), doc.group[0][0].item<int64_t>());
  EXPECT_NE(doc.group[0][4].item<int64_t>(), doc.group[0][3].item<int64_t>());
  // A causal mask does not separate documents: the window runs on across the document start.
  const ScanPlan causal = make_scan_plan(m, false, 3, at::kDouble, at::kCPU);
  EXPECT_EQ(causal.conv_src[4 * 3 + 0].item<int64_t>(), 1);
  EXPECT_EQ(causal.conv_src[4 * 3 + 1].item<int64_t>(), 3);
  EXPECT_EQ(causal.group[0][4].item<int64_t>(), causal.group[0][3].item<int64_t>());
}

// The whole SSM part of a layer: under a document mask, the second document's outputs do not depend on
// the first document; pad slots never reach a real token; under a causal mask the state crosses.
TEST(SsmLayer, DocumentStartsResetStateAndPadSlotsDoNotLeak) {
  SsmConfig c;
  c.heads = 2;
  c.head_dim = 4;
  c.state = 3;
  c.groups = 1;
  c.conv = 3;
  const SsmParams p = random_params(c);
  const int64_t L = 16;
  TokenMeta m;
  m.pos = at::arange(L).unsqueeze(0);
  m.segment = at::zeros({1, L}, at::kLong);
  m.doc = at::zeros({1, L}, at::kLong);
  m.doc.narrow(1, 9, L - 9).fill_(1);  // document 1 starts at 9
  m.valid = at::ones({1, L}, at::kBool);
  m.valid.narrow(1, 6, 3).fill_(false);  // pad slots 6..8 end document 0's slot
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor proj = at::normal(0.0, 1.0, {1, L, c.in_proj_width()}, gen, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor y = ssm_layer(proj, p, c, m, true);

  at::Tensor other_doc = proj.clone();
  other_doc.narrow(1, 0, 6).normal_(0.0, 1.0, gen);
  const at::Tensor y_doc = ssm_layer(other_doc, p, c, m, true);
  // Not bit-exact: the scan's decays are differences of one cumulative sum over a chunk (here the
  // whole row), which document 0's dt enters (rounding at 1e-16); under a causal mask (below) it moves
  // by > 1e-6.
  EXPECT_LT(max_abs_diff(y_doc.narrow(1, 9, L - 9), y.narrow(1, 9, L - 9)), 1e-13)
      << "document 1 saw document 0 under a document mask";
  EXPECT_GT(max_abs_diff(ssm_layer(other_doc, p, c, m, false).narrow(1, 9, L - 9),
                         ssm_layer(proj, p, c, m, false).narrow(1, 9, L - 9)),
            1e-6)
      << "under a causal mask the state should carry across the document start";

  at::Tensor other_pads = proj.clone();
  other_pads.narrow(1, 6, 3).normal_(0.0, 5.0, gen);
  for (bool document : {true, false}) {
    const at::Tensor a = ssm_layer(other_pads, p, c, m, document), b = ssm_layer(proj, p, c, m, document);
    EXPECT_EQ(max_abs_diff(a.narrow(1, 0, 6), b.narrow(1, 0, 6)), 0.0);
    EXPECT_EQ(max_abs_diff(a.narrow(1, 9, L - 9), b.narrow(1, 9, L - 9)), 0.0) << "a pad slot leaked into a real token";
  }
}

TEST(SsmConfigTest, CpConstraintsNameBothNumbers) {
  SsmConfig c;  // heads 4, groups 2
  EXPECT_EQ(c.cp_unsupported_reason(1), "");
  EXPECT_EQ(c.cp_unsupported_reason(2), "");
  EXPECT_EQ(c.cp_unsupported_reason(4), "");  // groups replicated 2x
  EXPECT_NE(c.cp_unsupported_reason(3).find("model.ssm.heads 4 is not divisible by cp 3"), std::string::npos);
  c.heads = 12;
  c.groups = 4;
  EXPECT_NE(c.cp_unsupported_reason(6).find("model.ssm.groups 4 and cp 6"), std::string::npos);
  c.groups = 5;
  EXPECT_THROW(c.validate(), UsageError);
}

TEST(SsmConfigTest, MixersAndPresets) {
  ModelConfig m = ModelConfig::preset_named("tiny-hybrid");
  EXPECT_EQ(m.mixers, "MAM");
  EXPECT_TRUE(m.has(mixer_for('M')));
  EXPECT_NO_THROW(m.validate());
  m.mixers = "MA";
  try {
    m.validate();
    FAIL() << "mixers of the wrong length accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model.mixers"), std::string::npos) << e.what();
  }
  m.mixers = "MAX";
  EXPECT_THROW(m.validate(), UsageError);
}

TEST(SsmConfigTest, ScenarioRefusesSsmSizesTheCpCannotSplit) {
  const std::string yaml = "model: {preset: tiny-hybrid, ssm: {heads: 4, groups: 2}}\nsweep: {cp: [2, 3]}\n";
  try {
    (void)parse_scenario(yaml, "x.yaml");
    FAIL() << "cp 3 accepted for 4 SSM heads";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model.ssm.heads 4 is not divisible by cp 3"), std::string::npos) << e.what();
  }
  const ScenarioSpec ok = parse_scenario("model: {mixers: AM, ssm: {heads: 2, head_dim: 8}}\nsweep: {cp: [1, 2]}\n",
                                         "x.yaml");
  EXPECT_EQ(ok.model.mixers, "AM");
  EXPECT_EQ(ok.model.ssm.heads, 2);
  EXPECT_EQ(ok.cases.size(), 2u);
  EXPECT_THROW((void)parse_scenario("model: {mixers: AM, ssm: {head: 2}}\n", "x.yaml"), UsageError);
}

// A model with Mamba layers runs forward and backward on one rank, and every SSM parameter gets a
// gradient.
TEST(SsmLayer, HybridModelGivesEverySsmParameterAGradient) {
  ModelConfig c = ModelConfig::preset_named("tiny-hybrid");
  TinyTransformer model(c, at::kDouble, at::kCPU);
  const int64_t S = 24;
  at::Tensor ids = at::randint(1, c.vocab, {2, S}, at::kLong), pos = at::arange(S).unsqueeze(0).repeat({2, 1});
  TokenMeta m{pos, at::zeros({2, S}, at::kLong), at::zeros({2, S}, at::kLong), at::ones({2, S}, at::kBool)};
  const MixerContexts ctx{{'M', std::make_shared<SsmStepContext>(single_rank_linear_context(
                                     m, MaskSpec::parse("causal"), c.ssm, at::kDouble, at::kCPU))}};
  AttentionFn attn = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor&, const at::Tensor&) {
    return at::scaled_dot_product_attention(q, k.repeat_interleave(q.size(1) / k.size(1), 1),
                                            v.repeat_interleave(q.size(1) / v.size(1), 1), {}, 0.0, true);
  };
  const int64_t built = linear_host_tensors_built();
  ModelOutput out = model->forward(ids, std::nullopt, pos, attn, ctx);
  out.logits.sum().backward();
  // Issue 19: the layers' index tensors come with the step's context, never from the host per layer.
  EXPECT_EQ(linear_host_tensors_built(), built) << "a Mamba layer built a host tensor for the device";
  for (const auto& p : model->named_parameters()) {
    if (p.key().find("layer0_") != 0 && p.key().find("layer2_") != 0) continue;
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
  }
  EXPECT_THROW((void)model->forward(ids, std::nullopt, pos, attn), Error);
}
