// The planner's numbers for linear mixers' cores and for MLA layers, worked by hand through the public
// entry points (make_plan; Plan::per_kind from plan_layer_kinds), so the checks hold wherever the code
// pricing them lives (issue 52, section 1):
//  - MixerCoreComm (harness/planner/mixer_cost.cpp): a linear mixer's core communication is its own
//    collectives' alone (state passing: the all-gather of the chunk summaries, not the conv halo's).
//  - MlaKindByHand (harness/planner/layer_kinds.cpp): the MLA kind's step at W = 1 under --pass forward and
//    train, with MLA's FLOPs per pair and head 2 (dqk + dv) (plain attention's 4 d at d = (dqk + dv) / 2)
//    and the up-projection's 2 r H (dn + dv) per token.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "harness/model/hf_config.hpp"
#include "harness/planner/plan.hpp"
#include "tests/test_paths.hpp"

using namespace cpbench;

namespace {

const plan::SsmCase& mixer_of(const plan::Plan& p, const std::string& strategy) {
  for (const auto& c : p.cases)
    if (c.ssm.strategy == strategy) return c.ssm;
  throw std::runtime_error("no case " + strategy);
}

}  // namespace

// flash-linear-attention #691's layer (tests/data/fla691-gdn-layer.json): one GDN layer, 64 value heads of
// dk = dv = 128, conv 4, bf16, 32K tokens, contiguous over cp 4 (one chunk per rank). State passing
// all-gathers each rank's summary, 64 heads x dk x (dk + dv) float32 = 64 x 128 x 256 x 4 = 8 388 608 B, to
// the 3 others (25 165 824 B a pass, one call of 3 messages; the backward's reduce-scatter the same). The
// conv halo's all-gather (3 tokens x 24 576 channels x 2 B to 3 ranks = 442 368 B a pass, one more call) is
// the layer's, not the core's.
TEST(MixerCoreComm, StatePassingsCoreIsTheSummariesAllGatherAlone) {
  for (const plan::Pass pass : {plan::Pass::train, plan::Pass::forward}) {
    plan::PlanRequest r;
    r.model = plan::model_shape(model_from_config_or_name(std::string(CPBENCH_SOURCE_DIR) +
                                                          "/tests/data/fla691-gdn-layer.json"));
    r.seq_len = 32768;
    r.cps = {4};
    r.cluster = plan::cluster_preset("h800-nvlink");
    r.sharders = {"contiguous"};
    r.pass = pass;
    const plan::Plan p = plan::make_plan(r);
    const plan::SsmCase& sp = mixer_of(p, "state_passing");
    const double passes = pass == plan::Pass::train ? 2 : 1;
    const double B = r.cluster.intra_bandwidth, a = r.cluster.latency_s;
    const double core = passes * (25165824.0 / B + 3 * a);
    const double halo = passes * (442368.0 / B + 3 * a);
    const std::string what = pass == plan::Pass::train ? "train" : "forward";
    EXPECT_NEAR(sp.core_comm_s / core, 1.0, 1e-9) << what << ": core " << sp.core_comm_s << " s, by hand " << core;
    EXPECT_NEAR(sp.comm_s / (core + halo), 1.0, 1e-9) << what << ": layer " << sp.comm_s << " s, by hand " << core + halo;
    EXPECT_EQ(sp.bytes_per_rank, static_cast<int64_t>(passes) * (25165824 + 442368)) << what;
  }
}

// DeepSeek-V3's 61 MLA layers at W = 1 (nothing moves; either wire up-projects the S local tokens once), 4096
// tokens, causal: S (S + 1) / 2 = 8 390 656 visible pairs, --kernel pairs (FLOPs at the cluster's rate).
// Per layer: attention's forward 2 H (dqk + dv) per pair and head = 2 x 128 x (192 + 128) = 81 920 FLOPs per
// pair; the up-projection u = 2 r H (dn + dv) = 2 x 512 x 128 x 256 = 33 554 432 FLOPs per token. Forward:
// attention + u; a training step: 3.5 x attention (the backward 2.5 x) + 3 u (fwd u, bwd 2 u).
TEST(MlaKindByHand, StepAtWorldOneUnderForwardAndTrainIsMlasFlops) {
  for (const plan::Pass pass : {plan::Pass::forward, plan::Pass::train}) {
    plan::PlanRequest r;
    r.model = plan::model_preset("deepseek-v3");
    r.seq_len = 4096;
    r.cps = {1};
    r.cluster = plan::cluster_preset("h100-nvlink");
    r.kernel = plan::Kernel::pairs;
    r.pass = pass;
    const plan::Plan p = plan::make_plan(r);
    ASSERT_EQ(p.per_kind.size(), 1u);
    const plan::KindChoice& k = p.per_kind[0];
    EXPECT_EQ(k.kind, "mla");
    EXPECT_EQ(k.layers, 61);
    const double F = r.cluster.attention_flops, pairs = 4096.0 * 4097 / 2;
    const double attention = 81920.0 * pairs / F, up = 33554432.0 * 4096 / F;
    const double want = 61 * (pass == plan::Pass::train ? 3.5 * attention + 3 * up : attention + up);
    EXPECT_NEAR(k.step_s / want, 1.0, 1e-9) << (pass == plan::Pass::train ? "train" : "forward") << ": step "
                                            << k.step_s << " s, by hand " << want << " s";
  }
}
