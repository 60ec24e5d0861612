// Mamba CP strategies (kernels/mixers/mamba/mamba_cp_costs.hpp, ssm_state_passing.hpp, mamba.hpp):
//  - the bytes and memory formulas against numbers worked out by hand, and their S dependence;
//  - the layout rule of state passing (striped refused, every chunked layout accepted) and the
//    scenario's ssm_cp axis;
//  - the layer itself, W ranks as threads over a real Gloo group: state passing (and hidden-parallel)
//    against the single-rank layer over the same stream, values and every gradient, on each layout
//    whose ranks own chunks, at W = 2, 3, 4, causal and document masks, pads inside a thd stream and at
//    a row's end, two rows, float64 / float32 / bfloat16; the bytes each rank counted against the
//    formula; no host-built tensor inside a layer; and the negative control dropping a rank's state.
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernels/mixers/mamba/mamba.hpp"
#include "kernels/mixers/mamba/mamba_cp_costs.hpp"
#include "kernels/mixers/linear/state_passing.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/comm/process_group.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/linear_costs_test_util.hpp"
#include "sharders/registry.hpp"
#include "tests/unit/mixer_under_test.hpp"

using namespace cpbench;

namespace {

// 2 rows of 64 tokens over 4 ranks, 4 heads x 16 in 2 groups, state 8, conv 4, float64, 2 chunks a rank.
SsmCpShape shape_for_hand_numbers() {
  return ssm_cp_shape(SsmConfig{4, 16, 8, 2, 4, kSsmChunk, ""}, linear_cp_shape(/*rows=*/2, /*seq_len=*/64, /*cp=*/4, /*conv=*/4,
                                                                /*elem_bytes=*/8, /*chunks_per_rank=*/2));
}

}  // namespace

TEST(SsmCpCosts, BytesAndMemoryMatchHandWorkedNumbers) {
  const SsmCpShape s = shape_for_hand_numbers();
  // hidden_parallel: 1 head per rank (16 x channels + 1 dt), groups 2 < W 4: one group of B and C per
  // rank (2 x 8): 33 channels in, 16 back, 16 tokens per rank, 3 peers, 2 rows, 8 bytes.
  EXPECT_EQ(s.hidden_parallel_channels(), 33);
  const LinearCpBytes hp = linear_cp_bytes(ssm_cp_terms, SsmCpStrategy::hidden_parallel, s);
  linear_test::expect_each_way(hp, 3 * 2 * 16 * (33 + 16) * 8, 2);
  // state_passing: per chunk and row 4 heads x (16 x 8 + 1) summary numbers and 3 x 96 halo inputs.
  const LinearCpBytes sp = linear_cp_bytes(ssm_cp_terms, SsmCpStrategy::state_passing, s);
  EXPECT_EQ(s.conv_channels(), 96);
  linear_test::expect_each_way(sp, 3 * (2 * 2 * 4 * 129 * 8 + 2 * 2 * 3 * 96 * 8), 2);
  EXPECT_EQ(linear_cp_extra_memory_bytes(ssm_cp_terms, SsmCpStrategy::hidden_parallel, s), 2 * 64 * 49 * 8);
  EXPECT_EQ(linear_cp_extra_memory_bytes(ssm_cp_terms, SsmCpStrategy::state_passing, s),
            4 * (2 * 2 * 4 * 129 * 8 + 2 * 2 * 3 * 96 * 8) + 2 * 2 * 4 * 16 * 8 * 8);

  // S x 4: hidden-parallel's bytes x 4, state passing's unchanged. bfloat16 activations, float32 state.
  SsmCpShape longer = s;
  longer.seq_len *= 4;
  EXPECT_EQ(linear_cp_bytes(ssm_cp_terms, SsmCpStrategy::hidden_parallel, longer).total(), 4 * hp.total());
  EXPECT_EQ(linear_cp_bytes(ssm_cp_terms, SsmCpStrategy::state_passing, longer).total(), sp.total());
  SsmCpShape bf16 = s;
  bf16.elem_bytes = 2;
  bf16.state_elem_bytes = 4;
  EXPECT_EQ(linear_cp_bytes(ssm_cp_terms, SsmCpStrategy::state_passing, bf16).forward,
            3 * (2 * 2 * 4 * 129 * 4 + 2 * 2 * 3 * 96 * 2));
  SsmCpShape k1 = s;
  k1.conv = 1;
  EXPECT_EQ(linear_cp_bytes(ssm_cp_terms, SsmCpStrategy::state_passing, k1).forward, 3 * 2 * 2 * 4 * 129 * 8);
  linear_test::expect_shared_byte_rules(s, ssm_cp_terms, SsmCpStrategy::hidden_parallel);
}

TEST(SsmCpCosts, StrategyNamesRoundTrip) {
  linear_test::expect_names_round_trip(known_cp_strategies<SsmCpStrategy>(), parse_cp_strategy<SsmCpStrategy>, "ring");
}

TEST(SsmCpCosts, ContiguousRunsOfALayout) {
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(contiguous_runs({0, 1, 2, 7, 8, 3}), (Runs{{0, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(contiguous_runs({}), Runs{});
  LayoutRequest req;
  req.cp = 4;
  req.seq_len = 64;
  EXPECT_EQ(max_runs_per_rank(make_layout("contiguous")->compute(req)), 1);
  EXPECT_EQ(max_runs_per_rank(make_layout("load_balanced")->compute(req)), 2);
  EXPECT_EQ(max_runs_per_rank(make_layout("striped")->compute(req)), 16);
  req.doc_lens = {16, 24};
  // thd: two head-tail pieces per document; rank 0's tail of document 0 touches its head of document 1.
  EXPECT_EQ(max_runs_per_rank(make_layout("thd")->compute(req)), 4);
  EXPECT_EQ(contiguous_runs(make_layout("thd")->compute(req).ranks[0]).size(), 3u);
}

TEST(SsmCpCosts, StatePassingRefusesOnlyLayoutsWithoutChunks) {
  for (int64_t W : {2, 3, 4}) {
    for (const auto& name : {"contiguous", "load_balanced", "thd", "sdpa_wrap", "workload_balanced"})
      EXPECT_EQ(state_passing_unsupported_reason(*make_layout(name), W, "ssm_cp"), "") << name << " W " << W;
    const std::string why = state_passing_unsupported_reason(*make_layout("striped"), W, "ssm_cp");
    EXPECT_NE(why.find("layout striped"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << "one line";
  }
  EXPECT_EQ(state_passing_unsupported_reason(*make_layout("striped"), 1, "ssm_cp"), "");
}

TEST(SsmCpScenario, AxisParsedOnceIntoTheCase) {
  const std::string model = "model: {preset: tiny-hybrid, ssm: {heads: 4, groups: 2}}\n";
  const ScenarioSpec s = parse_scenario(
      model + "sweep: {sharder: [load_balanced, thd], cp: [2, 3], ssm_cp: [state_passing]}\n", "x.yaml");
  ASSERT_EQ(s.cases.size(), 4u) << "cp 3 runs under state passing (no head split)";
  for (const auto& c : s.cases) {
    EXPECT_EQ(c.mixer_strategy(mixer_for('M')), "state_passing");
    EXPECT_NE(c.name().find("/state_passing"), std::string::npos) << c.name();
  }
  const ScenarioSpec both =
      parse_scenario(model + "sweep: {cp: 2, ssm_cp: [hidden_parallel, state_passing]}\n", "x.yaml");
  ASSERT_EQ(both.cases.size(), 2u);
  EXPECT_EQ(both.cases[0].mixer_strategy(mixer_for('M')), "hidden_parallel");
  EXPECT_EQ(both.cases[0].name().find("state_passing"), std::string::npos) << "the default keeps its old name";
  const ScenarioSpec dflt = parse_scenario(model + "sweep: {cp: 2}\n", "x.yaml");
  EXPECT_EQ(dflt.cases[0].mixer_strategy(mixer_for('M')), "hidden_parallel");
  const ScenarioSpec over = parse_scenario(model + "sweep: {cp: 2}\n", "x.yaml", {"ssm_cp=state_passing"});
  EXPECT_EQ(over.cases[0].mixer_strategy(mixer_for('M')), "state_passing");

  const auto refusal = [&](const std::string& yaml) {
    try {
      (void)parse_scenario(yaml, "x.yaml");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string striped = refusal(model + "sweep: {sharder: striped, cp: 2, ssm_cp: state_passing}\n");
  EXPECT_NE(striped.find("x.yaml: striped/allgather/cp2/causal/float64/state_passing: ssm_cp state_passing: layout "
                         "striped"),
            std::string::npos)
      << striped;
  EXPECT_NE(refusal(model + "sweep: {cp: 2, ssm_cp: ring}\n").find("sweep.ssm_cp"), std::string::npos);
  EXPECT_NE(refusal("sweep: {cp: 2, ssm_cp: state_passing}\n").find("needs a model with Mamba layers"),
            std::string::npos);
  EXPECT_NE(refusal(model + "sweep: {cp: 3}\n").find("not divisible by cp 3"), std::string::npos);
}

// ---- the layer, W ranks as threads over Gloo ----

namespace {

using Stream = linear_test::Laid;
using linear_test::LayerRun;
using linear_test::make_stream;
using linear_test::rel_error;

SsmParams draw_params(const SsmConfig& c, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  SsmParams p;
  p.conv_w = at::normal(0.0, 0.5, {c.conv_channels(), c.conv}, gen, o);
  p.conv_b = at::normal(0.0, 0.1, {c.conv_channels()}, gen, o);
  p.dt_bias = at::normal(-1.0, 0.5, {c.heads}, gen, o);
  p.A_log = at::normal(0.0, 0.5, {c.heads}, gen, o);
  p.D = at::normal(1.0, 0.1, {c.heads}, gen, o);
  return p;
}

std::vector<at::Tensor> leaves(const SsmParams& p) { return {p.conv_w, p.conv_b, p.dt_bias, p.A_log, p.D}; }

SsmParams as_leaves(const SsmParams& p, at::ScalarType dtype) {
  const auto f = [&](const at::Tensor& t) { return t.to(dtype).detach().requires_grad_(true); };
  return {f(p.conv_w), f(p.conv_b), f(p.dt_bias), f(p.A_log), f(p.D)};
}

// The Mamba layer's SSM part under test (mixer_under_test.hpp).
const linear_test::MixerUnderTest<SsmConfig, SsmParams, SsmStepContext> kMixer{
    linear_forward<SsmParams, SsmConfig, SsmStepContext>, leaves, as_leaves, [](const SsmConfig& c) { return c.in_proj_width(); },
    [](const SsmConfig& c) { return c.d_inner(); }};

using linear_test::Compared;
using linear_test::tolerance;

using LayerCase = linear_test::LayerCase<SsmCpStrategy>;

// Runs one case; returns the comparison, checks the bytes and the host-tensor count.
Compared check_layer(const LayerCase& k, const SsmConfig& c, bool drop_state = false) {
  return linear_test::check_mixer(kMixer, k, c, draw_params(c, 5), drop_state);
}

std::string label(const LayerCase& k) { return linear_test::case_label(k); }

// Nemotron-H-like proportions at test size: 4 heads in 2 groups, conv 4.
SsmConfig test_config() { return SsmConfig{4, 8, 8, 2, 4, kSsmChunk, ""}; }

}  // namespace

TEST(SsmStatePassing, MatchesTheSingleRankLayerOnEveryChunkedLayout) {
  const SsmConfig c = test_config();
  // Each layout at W = 2, 3, 4, alternating the mask (both masks at every W over the layouts).
  int i = 0;
  for (const auto& layout : {"contiguous", "load_balanced", "thd", "sdpa_wrap", "workload_balanced"})
    for (int64_t W : {2, 3, 4}) {
      const LayerCase k{layout, W, i++ % 2 == 0 ? "document" : "causal", at::kDouble};
      const Compared d = check_layer(k, c);
      EXPECT_LT(d.worst(), tolerance(k.dtype))
          << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad << " dL/dparams " << d.param_grad;
    }
}

TEST(SsmStatePassing, LowPrecisionAndAConvOfOne) {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const LayerCase k{"load_balanced", 4, "document", dtype};
    const Compared d = check_layer(k, test_config());
    EXPECT_LT(d.worst(), tolerance(dtype)) << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad
                                           << " dL/dparams " << d.param_grad;
  }
  const LayerCase k{"thd", 3, "document", at::kDouble};
  const Compared d = check_layer(k, SsmConfig{3, 8, 4, 1, 1, kSsmChunk, ""});
  EXPECT_LT(d.worst(), tolerance(at::kDouble)) << "conv 1 (no halo): " << label(k);
}

TEST(SsmStatePassing, HiddenParallelThroughTheSameHarness) {
  for (const auto& layout : {"load_balanced", "thd"})
    for (int64_t W : {2, 4}) {
      const LayerCase k{layout, W, "document", at::kDouble, SsmCpStrategy::hidden_parallel};
      const Compared d = check_layer(k, test_config());
      EXPECT_LT(d.worst(), tolerance(k.dtype)) << label(k);
    }
}

// The negative control: the last rank ignores the state arriving at its chunks. The outputs and the
// gradients must differ from the reference far beyond the tolerance.
TEST(SsmStatePassing, DroppedIncomingStateIsCaught) {
  linear_test::expect_dropped_state_caught<SsmCpStrategy>(
      [](const LayerCase& k) { return check_layer(k, test_config(), /*drop_state=*/true); });
}
