// Kimi Delta Attention CP (kernels/mixers/kda/kda.hpp): the layer's delta-rule part on W ranks as threads
// over a real Gloo group against the single-rank layer over the same stream, values and every gradient,
// both strategies on every layout that takes them (state passing on the five whose ranks own chunks,
// head parallel on all six), W = 2, 3, 4, float64 and bfloat16, causal and document masks (documents
// that start inside a rank's chunk), two rows of different documents (thd: pads between documents);
// each rank's byte count against kda_cp_costs; no host-built tensor inside a layer; the negative control
// that drops a rank's incoming state. (The transports are attention's: scenarios/kda.yaml runs the model
// under allgather, ring and a2a.)
#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/mixers/kda/kda.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/kda_test_util.hpp"

using namespace cpbench;
using namespace cpbench::kda_test;

namespace {

using linear_test::Compared;
using linear_test::tolerance;
using LayerCase = linear_test::LayerCase<GdnCpStrategy>;

// Kimi Linear's proportions at test size: dk = dv, conv 4, a chunk of 8 so every rank's stretch spans
// several chunks of the chunked form; heads divisible by W for head parallel (4 at W = 2, 4; 3 at W = 3).
KdaConfig test_config(int64_t W) { return KdaConfig{W == 3 ? 3 : 4, 8, 8, 4, 8, 8}; }

Compared check_layer(const LayerCase& k, const KdaConfig& c, bool drop_state = false) {
  return linear_test::check_mixer(kMixer, k, c, draw_params(c, 5), drop_state);
}

void expect_match(const LayerCase& k, const KdaConfig& c) {
  const Compared d = check_layer(k, c);
  EXPECT_LT(d.worst(), tolerance(k.dtype)) << linear_test::case_label(k) << ": y " << d.y << " dL/dproj "
                                           << d.proj_grad << " dL/dparams " << d.param_grad;
}

void every_layout(GdnCpStrategy strategy, at::ScalarType dtype) {
  const std::vector<const char*> layouts =
      strategy == GdnCpStrategy::state_passing
          ? std::vector<const char*>{"contiguous", "load_balanced", "thd", "sdpa_wrap", "workload_balanced"}
          : std::vector<const char*>{"contiguous", "load_balanced", "striped", "thd", "sdpa_wrap", "workload_balanced"};
  int i = 0;
  for (const auto* layout : layouts)
    for (int64_t W : {2, 3, 4}) expect_match({layout, W, i++ % 2 == 0 ? "document" : "causal", dtype, strategy}, test_config(W));
}

}  // namespace

TEST(KdaCp, StatePassingMatchesTheSingleRankOnEveryChunkedLayout) {
  every_layout(GdnCpStrategy::state_passing, at::kDouble);
}

TEST(KdaCp, HeadParallelMatchesTheSingleRankOnEveryLayout) {
  every_layout(GdnCpStrategy::head_parallel, at::kDouble);
}

TEST(KdaCp, Bfloat16BothStrategiesOnEveryLayout) {
  every_layout(GdnCpStrategy::state_passing, at::kBFloat16);
  every_layout(GdnCpStrategy::head_parallel, at::kBFloat16);
}

TEST(KdaCp, DkDiffersFromDvAndAConvOfOne) {
  for (const auto strategy : {GdnCpStrategy::state_passing, GdnCpStrategy::head_parallel}) {
    expect_match({"load_balanced", 2, "document", at::kDouble, strategy}, KdaConfig{2, 8, 4, 4, 8, 4});
    expect_match({"thd", 2, "document", at::kDouble, strategy}, KdaConfig{2, 4, 8, 1, 8, 4});
  }
}

// The negative control: the last rank ignores the state arriving at its chunks.
TEST(KdaCp, DroppedIncomingStateIsCaught) {
  linear_test::expect_dropped_state_caught<GdnCpStrategy>(
      [](const LayerCase& k) { return check_layer(k, test_config(k.W), /*drop_state=*/true); });
}

TEST(KdaCp, BytesFollowTheFormulasAndHeadsThatDoNotSplitAreRefused) {
  // H = 4, dk = dv = 8, W = 2, R = 1, S = 64, bfloat16: head parallel receives 2 (3*8 + 8 + 1) = 66
  // channels and returns 16: (W-1) * 32 tokens * 82 * 2 bytes each way.
  const GdnCpShape s = kda_cp_shape(KdaConfig{4, 8, 8, 4, 8, 8}, linear_cp_shape(1, 64, 2, 4, 2));
  EXPECT_EQ(kda_head_parallel_channels(s), 66);
  EXPECT_EQ(linear_cp_bytes(kda_cp_terms, GdnCpStrategy::head_parallel, s).forward, 32 * 82 * 2);
  EXPECT_EQ(linear_cp_bytes(kda_cp_terms, GdnCpStrategy::state_passing, s).total(),
            linear_cp_bytes(gdn_cp_terms, GdnCpStrategy::state_passing, s).total());
  EXPECT_EQ(KdaConfig{}.cp_unsupported_reason(4), "");
  const std::string why = KdaConfig{6, 8, 8, 4, 8, 8}.cp_unsupported_reason(4);
  EXPECT_NE(why.find("model.kda.heads 6 is not divisible by cp 4"), std::string::npos) << why;
  EXPECT_THROW(KdaConfig({4, 8, 8, 4, 8, 0}).validate(), UsageError);
}
