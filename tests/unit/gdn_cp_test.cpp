// Gated DeltaNet CP (harness/model/gdn.hpp, gdn_state_passing.hpp): the layer on W ranks as threads over
// a real Gloo group against the single-rank layer over the same stream, values and every gradient, both
// strategies on every layout (state passing on every layout whose ranks own chunks; head parallel on all
// six), W = 2, 3, 4, causal and document masks (documents that start inside a rank's chunk), pads inside
// a thd stream and at a row's end, two rows, a key head replicated over ranks, float64 / float32 /
// bfloat16; each rank's byte count against gdn_cp_costs; no host-built tensor inside a layer; and the
// negative control that drops a rank's incoming state.
#include <gtest/gtest.h>

#include <cstdlib>

#include "harness/model/gdn_state_passing.hpp"
#include "harness/runner/scenario.hpp"  // dtype_name
#include "sharders/core/check.hpp"
#include "tests/unit/gdn_test_util.hpp"

using namespace cpbench;
using namespace cpbench::gdn_test;

namespace {

double tolerance(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-10 : dtype == at::kFloat ? 1e-4 : 3e-2; }

struct Compared {
  double y = 0, proj_grad = 0, param_grad = 0;
  [[nodiscard]] double worst() const { return std::max({y, proj_grad, param_grad}); }
};

struct LayerCase {
  std::string layout;
  int64_t W;
  std::string mask;
  at::ScalarType dtype;
  GdnCpStrategy strategy = GdnCpStrategy::state_passing;
};

std::vector<std::vector<int64_t>> docs_for(const std::string& layout) {
  if (make_layout(layout)->packed()) return {{29, 7, 40, 13}};
  return {{37, 11, 30, 17}, {52, 20, 23}};
}

// Qwen3-Next's proportions at test size: 2 key heads, 4 value heads (two per key head), conv 4, and a
// chunk of 8 so every rank's stretch spans several chunks of the chunked form.
GdnConfig test_config() { return GdnConfig{2, 4, 8, 8, 4, 8}; }

Compared check_layer(const LayerCase& k, const GdnConfig& c, bool drop_state = false) {
  const Laid st = make_stream(k.layout, k.W, docs_for(k.layout));
  const int64_t R = st.meta.batch(), P = st.g.padded_seq_len;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor proj = at::normal(0.0, 1.0, {R, P, c.in_proj_width()}, gen, o);
  const at::Tensor wy = at::normal(0.0, 1.0, {R, P, c.value_dim()}, gen, o);
  const GdnParams p = draw_params(c, 5);
  const MaskSpec mask = MaskSpec::parse(k.mask);
  GdnCpOptions opt;
  opt.strategy = k.strategy;
  opt.drop_incoming_state = drop_state;
  const LayerRun got = run_cp(st, c, p, proj, wy, mask, k.dtype, opt);
  const LayerRun ref = run_single(st.meta, c, p, proj, wy, mask, k.dtype);
  for (int64_t r = 0; r < k.W; ++r)
    EXPECT_EQ(got.bytes[static_cast<size_t>(r)], got.expected_bytes[static_cast<size_t>(r)])
        << "rank " << r << ": the layer's count against gdn_cp_costs";
  EXPECT_GT(got.bytes[0], 0);
  EXPECT_EQ(got.host_tensors_in_layers, 0) << "a layer built a host tensor (index map or plan) for the device";
  Compared d;
  d.y = rel_error(got.y, ref.y);
  d.proj_grad = rel_error(got.proj_grad, ref.proj_grad);
  for (size_t i = 0; i < ref.param_grads.size(); ++i)
    d.param_grad = std::max(d.param_grad, rel_error(got.param_grads[i], ref.param_grads[i]));
  return d;
}

std::string label(const LayerCase& k) {
  return k.layout + "/W" + std::to_string(k.W) + "/" + k.mask + "/" + dtype_name(k.dtype) + "/" + to_string(k.strategy);
}

}  // namespace

TEST(GdnCp, StatePassingMatchesTheSingleRankLayerOnEveryChunkedLayout) {
  int i = 0;
  for (const auto& layout : {"contiguous", "load_balanced", "thd", "sdpa_wrap", "workload_balanced"})
    for (int64_t W : {2, 3, 4}) {
      const LayerCase k{layout, W, i++ % 2 == 0 ? "document" : "causal", at::kDouble};
      const Compared d = check_layer(k, test_config());
      EXPECT_LT(d.worst(), tolerance(k.dtype))
          << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad << " dL/dparams " << d.param_grad;
    }
}

TEST(GdnCp, HeadParallelMatchesTheSingleRankLayerOnEveryLayout) {
  // W = 4 > 2 key heads: each key head replicated on two ranks.
  int i = 0;
  for (const auto& layout : {"contiguous", "load_balanced", "striped", "thd", "sdpa_wrap", "workload_balanced"})
    for (int64_t W : {2, 4}) {
      const LayerCase k{layout, W, i++ % 2 == 0 ? "document" : "causal", at::kDouble, GdnCpStrategy::head_parallel};
      const Compared d = check_layer(k, test_config());
      EXPECT_LT(d.worst(), tolerance(k.dtype)) << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad
                                               << " dL/dparams " << d.param_grad;
    }
}

TEST(GdnCp, LowPrecisionAndAConvOfOne) {
  for (const auto strategy : {GdnCpStrategy::state_passing, GdnCpStrategy::head_parallel})
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      const LayerCase k{"load_balanced", 4, "document", dtype, strategy};
      const Compared d = check_layer(k, test_config());
      EXPECT_LT(d.worst(), tolerance(dtype)) << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad
                                             << " dL/dparams " << d.param_grad;
    }
  const LayerCase k{"thd", 3, "document", at::kDouble};
  const Compared d = check_layer(k, GdnConfig{1, 3, 8, 4, 1, 8});
  EXPECT_LT(d.worst(), tolerance(at::kDouble)) << "conv 1 (no halo): " << label(k);
}

// The negative control: the last rank ignores the state arriving at its chunks.
TEST(GdnCp, DroppedIncomingStateIsCaught) {
  for (int64_t W : {2, 4}) {
    const LayerCase k{"load_balanced", W, "causal", at::kDouble};
    const Compared d = check_layer(k, test_config(), /*drop_state=*/true);
    EXPECT_GT(d.y, 1e3 * tolerance(k.dtype)) << label(k);
    EXPECT_GT(d.param_grad, 1e3 * tolerance(k.dtype)) << label(k);
  }
}

TEST(GdnCp, HeadParallelRefusesHeadsThatDoNotSplit) {
  EXPECT_EQ(GdnConfig{}.cp_unsupported_reason(4), "");
  const std::string v = GdnConfig{2, 6, 8, 8, 4, 8}.cp_unsupported_reason(4);
  EXPECT_NE(v.find("model.gdn.value_heads 6 is not divisible by cp 4"), std::string::npos) << v;
  const std::string k = GdnConfig{3, 6, 8, 8, 4, 8}.cp_unsupported_reason(2);
  EXPECT_NE(k.find("model.gdn.key_heads 3 and cp 2"), std::string::npos) << k;
  const Laid st = make_stream("load_balanced", 3, {{60}});
  EXPECT_THROW((void)run_single(st.meta, GdnConfig{2, 4, 8, 8, 4, 8}, draw_params(GdnConfig{2, 4, 8, 8, 4, 8}, 1),
                                at::zeros({1, 1, 3}), at::zeros({1, 1, 32}), MaskSpec::parse("causal"), at::kDouble),
               Error)
      << "a proj of the wrong width";
}

// W = 8 (nightly: CPBENCH_NIGHTLY=1, ctest label nightly): eight rank threads. Both strategies on every
// layout that takes them, 8 value heads over 2 key heads (each replicated on 4 ranks), float64 and bf16.
TEST(GdnCp, EightRanksNightly) {
  if (!std::getenv("CPBENCH_NIGHTLY")) GTEST_SKIP() << "nightly only (CPBENCH_NIGHTLY=1): eight rank threads";
  const GdnConfig c{2, 8, 8, 8, 4, 8};
  for (const auto dtype : {at::kDouble, at::kBFloat16}) {
    for (const auto& layout : {"contiguous", "load_balanced", "thd", "sdpa_wrap", "workload_balanced"}) {
      const LayerCase k{layout, 8, "document", dtype};
      const Compared d = check_layer(k, c);
      EXPECT_LT(d.worst(), tolerance(dtype)) << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad
                                             << " dL/dparams " << d.param_grad;
    }
    for (const auto& layout : {"contiguous", "load_balanced", "striped", "thd", "sdpa_wrap", "workload_balanced"}) {
      const LayerCase k{layout, 8, "causal", dtype, GdnCpStrategy::head_parallel};
      const Compared d = check_layer(k, c);
      EXPECT_LT(d.worst(), tolerance(dtype)) << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad
                                             << " dL/dparams " << d.param_grad;
    }
  }
  const Compared d = check_layer(LayerCase{"load_balanced", 8, "causal", at::kDouble}, c, /*drop_state=*/true);
  EXPECT_GT(d.y, 1e3 * tolerance(at::kDouble)) << "the control at W = 8";
}
