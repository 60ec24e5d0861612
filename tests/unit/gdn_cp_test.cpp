// Gated DeltaNet CP (kernels/mixers/gdn/gdn.hpp, gdn_state_passing.hpp): the layer on W ranks as threads over
// a real Gloo group against the single-rank layer over the same stream, values and every gradient, both
// strategies on every layout (state passing on every layout whose ranks own chunks; head parallel on all
// six), W = 2, 3, 4, causal and document masks (documents that start inside a rank's chunk), pads inside
// a thd stream and at a row's end, two rows, a key head replicated over ranks, float64 / float32 /
// bfloat16; each rank's byte count against gdn_cp_costs; no host-built tensor inside a layer; and the
// negative control that drops a rank's incoming state.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/mixers/gdn/gdn.hpp"
#include "harness/runner/scenario.hpp"  // dtype_name
#include "sharders/core/check.hpp"
#include "tests/unit/gdn_test_util.hpp"

using namespace cpbench;
using namespace cpbench::gdn_test;

namespace {

using linear_test::Compared;
using linear_test::tolerance;

using LayerCase = linear_test::LayerCase<GdnCpStrategy>;

// Qwen3-Next's proportions at test size: 2 key heads, 4 value heads (two per key head), conv 4, and a
// chunk of 8 so every rank's stretch spans several chunks of the chunked form.
GdnConfig test_config() { return GdnConfig{2, 4, 8, 8, 4, 8}; }

Compared check_layer(const LayerCase& k, const GdnConfig& c, bool drop_state = false) {
  return linear_test::check_mixer(kMixer, k, c, draw_params(c, 5), drop_state);
}

std::string label(const LayerCase& k) { return linear_test::case_label(k); }

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
  linear_test::expect_dropped_state_caught<GdnCpStrategy>(
      [](const LayerCase& k) { return check_layer(k, test_config(), /*drop_state=*/true); });
}

TEST(GdnCp, HeadParallelRefusesHeadsThatDoNotSplit) {
  EXPECT_EQ(GdnConfig{}.cp_unsupported_reason(4), "");
  const std::string v = GdnConfig{2, 6, 8, 8, 4, 8}.cp_unsupported_reason(4);
  EXPECT_NE(v.find("model.gdn.value_heads 6 is not divisible by cp 4"), std::string::npos) << v;
  const std::string k = GdnConfig{3, 6, 8, 8, 4, 8}.cp_unsupported_reason(2);
  EXPECT_NE(k.find("model.gdn.key_heads 3 and cp 2"), std::string::npos) << k;
  const Laid st = make_stream("load_balanced", 3, {{60}});
  EXPECT_THROW((void)linear_test::run_single_mixer(kMixer, st.meta, GdnConfig{2, 4, 8, 8, 4, 8},
                                                   draw_params(GdnConfig{2, 4, 8, 8, 4, 8}, 1), at::zeros({1, 1, 3}),
                                                   at::zeros({1, 1, 32}), MaskSpec::parse("causal"), at::kDouble),
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
