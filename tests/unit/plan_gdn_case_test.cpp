// The planner's per-case Gated DeltaNet numbers, read from the plan a user gets (PlanCase::ssm, what
// `cpbench plan --json` prints), against numbers worked out by hand from qwen3-next-80b-a3b's config.json
// (36 GDN layers of 48; Hk 16, Hv 32, dk = dv = 128, conv 4, hidden 2048, chunk Q 64; bf16: activations 2
// bytes, the delta rule's state 4) at S = 131072 on h100-nvlink, for a training step and a forward pass, at
// W = 2 and 8, both GDN CP strategies. The formulas are docs/planner.md's ("Gated DeltaNet layers"); the
// literals below are the arithmetic done outside the code (issue 39: a backward dropped from the bytes and
// the W dropped from state passing's composition FLOPs both passed every test that read only the byte
// formula).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "harness/planner/plan.hpp"

using namespace cpbench;

namespace {

constexpr double kLayers = 36;
constexpr double kSsmRate = 150e12, kDenseRate = 600e12, kBandwidth = 400e9, kLatency = 5e-6,  // h100-nvlink
                 kHbm = 3.0e12;

plan::Plan qwen3_next(plan::Pass pass) {
  plan::PlanRequest r;
  r.model = plan::model_preset("qwen3-next-80b-a3b");
  r.seq_len = 131072;
  r.cps = {2, 8};
  r.cluster = plan::cluster_preset("h100-nvlink");
  r.sharders = {"contiguous"};  // one run of the stream per rank: chunks_per_rank 1
  r.transports = {"allgather"};
  r.pass = pass;
  return plan::make_plan(r);
}

const plan::SsmCase& gdn_of(const plan::Plan& p, int64_t W, const std::string& strategy) {
  for (const auto& c : p.cases)
    if (c.cp == W && c.ssm.strategy == strategy) return c.ssm;
  throw std::runtime_error("no GDN case " + strategy + " at cp " + std::to_string(W));
}

// One rank, one layer, worked by hand (the chunked delta rule per token and value head,
// gdn_scan_flops(S, Q, dk, dv) = Q (5 dk + 3 dv) + 6 dk dv):
//   projections and conv, s tokens: s (2 d in_proj_width + 2 Hv dv d + 2 K conv_channels)
//     with conv_channels = 2*16*128 + 32*128 = 8192, in_proj_width = 8192 + 4096 + 64 = 12352
//     -> s * 67878912 = 4419521347584 (s 65536), 1104880336896 (s 16384)
//   head_parallel delta: (64*1024 + 98304) * 131072 * 32 / W  (dv = 128: 163840 per token-head)
//     -> 343597383680 (W 2), 85899345920 (W 8)
//   state_passing delta: (gdn_scan_flops(s, 64, 128, 128) + 4 dk (dk + dv)) s Hv + W * 2 dk^2 dv Hv
//     per token-head 163840 + 131072 = 294912; composition W * 2 * 128^3 * 32 = W * 134217728
//     -> 294912 * 65536 * 32 + 2 * 134217728 = 618743726080 (W 2)
//     -> 294912 * 16384 * 32 + 8 * 134217728 = 155692564480 (W 8)
constexpr double kOtherW2 = 4419521347584.0, kOtherW8 = 1104880336896.0;
constexpr double kHpDeltaW2 = 343597383680.0, kHpDeltaW8 = 85899345920.0;
constexpr double kSpDeltaW2 = 618743726080.0, kSpDeltaW8 = 155692564480.0;

// The delta rule's passes through HBM, forward (delta_rule_pass_bytes; the FLOPs above then run at the dense
// rate): per token and value head 2 (6*128 + 6*128 + 64 + 2*128*128/64) = 4224 bytes; state passing's summary
// pass adds 2 (2*128 + 128) = 768 -> 4992.
//   head_parallel: 4224 * 131072 * 32 / W -> 8858370048 (W 2), 2214592512 (W 8)
//   state_passing: 4992 * (131072 / W) * 32 -> 10468982784 (W 2), 2617245696 (W 8)
// head_parallel's all-to-all copies, forward: 2 * forward bytes * W / (W-1) (below's kHpFwd):
//   W 2: 2 * 809500672 * 2 = 3238002688; W 8: 2 * 354156544 * 8 / 7 = 809500672
constexpr double kHpHbmW2 = 8858370048.0, kHpHbmW8 = 2214592512.0, kSpHbmW2 = 10468982784.0, kSpHbmW8 = 2617245696.0;
constexpr double kHpCopyW2 = 3238002688.0, kHpCopyW8 = 809500672.0;

// Bytes one rank sends per layer, forward (the backward sends the same again):
//   head_parallel: (W-1) s (2 hk dk + hv dv + 2 hv + hv dv) 2 bytes, hk = max(1, 16/W), hv = 32/W
//     W 2: 1 * 65536 * (2048 + 2048 + 32 + 2048) * 2 = 809500672
//     W 8: 7 * 16384 * (512 + 512 + 8 + 512) * 2 = 354156544
//   state_passing: (W-1) (Hv dk (dk + dv) 4 + (K-1) conv_channels 2) = (W-1) (4194304 + 49152)
//     W 2: 4243456, W 8: 29704192
constexpr int64_t kHpFwdW2 = 809500672, kHpFwdW8 = 354156544, kSpFwdW2 = 4243456, kSpFwdW8 = 29704192;

void expect_case(const plan::SsmCase& c, double delta, double hbm, double copies, double other, int64_t forward_bytes,
                 int64_t calls_per_pass, int64_t W, bool train) {
  SCOPED_TRACE(c.strategy + " W=" + std::to_string(W) + (train ? " train" : " forward"));
  EXPECT_EQ(c.mixer, "GDN");
  // flops_per_rank: the forward's FLOPs in both passes (plan_types.hpp); compute_s triples them to train.
  EXPECT_NEAR(c.flops_per_rank, kLayers * (delta + other), 1e-12 * c.flops_per_rank);
  const double factor = train ? 3 : 1;
  EXPECT_NEAR(c.compute_s, kLayers * factor * (delta / kDenseRate + hbm / kHbm + other / kDenseRate), 1e-12 * c.compute_s);
  EXPECT_NEAR(c.core_compute_s, kLayers * factor * (delta / kDenseRate + hbm / kHbm), 1e-12 * c.core_compute_s);
  const int64_t sent = (train ? 2 : 1) * forward_bytes;
  EXPECT_EQ(c.bytes_per_rank, 36 * sent);
  const double calls = static_cast<double>((train ? 2 : 1) * calls_per_pass * (W - 1));
  const double copy_s = (train ? 2 : 1) * copies / kHbm;
  EXPECT_NEAR(c.comm_s, kLayers * (static_cast<double>(sent) / kBandwidth + calls * kLatency + copy_s), 1e-12 * c.comm_s);
  EXPECT_NEAR(c.step_s, c.compute_s + c.comm_s, 1e-12 * c.step_s);
}

}  // namespace

TEST(PlanGdnCase, PresetSizesTheHandNumbersAssume) {
  const plan::ModelShape m = plan::model_preset("qwen3-next-80b-a3b");
  EXPECT_EQ(m.layers_of('G'), 36);
  EXPECT_EQ(m.hidden, 2048);
  const plan::Cluster c = plan::cluster_preset("h100-nvlink");
  EXPECT_EQ(c.ssm_flops, kSsmRate);
  EXPECT_EQ(c.attention_flops, kDenseRate);
  EXPECT_EQ(c.kernel.hbm_bandwidth, kHbm);
  EXPECT_EQ(c.intra_bandwidth, kBandwidth);
  EXPECT_EQ(c.latency_s, kLatency);
  EXPECT_EQ(c.gpus_per_node, 8);
}

TEST(PlanGdnCase, TrainingStepBytesAndFlopsAtTwoAndEightRanks) {
  const plan::Plan p = qwen3_next(plan::Pass::train);
  expect_case(gdn_of(p, 2, "head_parallel"), kHpDeltaW2, kHpHbmW2, kHpCopyW2, kOtherW2, kHpFwdW2, 2, 2, true);
  expect_case(gdn_of(p, 8, "head_parallel"), kHpDeltaW8, kHpHbmW8, kHpCopyW8, kOtherW8, kHpFwdW8, 2, 8, true);
  expect_case(gdn_of(p, 2, "state_passing"), kSpDeltaW2, kSpHbmW2, 0, kOtherW2, kSpFwdW2, 2, 2, true);
  expect_case(gdn_of(p, 8, "state_passing"), kSpDeltaW8, kSpHbmW8, 0, kOtherW8, kSpFwdW8, 2, 8, true);
  // The reading: 23.7 GiB head-parallel at cp 8 for a training step (forward + backward).
  EXPECT_NEAR(static_cast<double>(gdn_of(p, 8, "head_parallel").bytes_per_rank) / (1u << 30), 23.748, 0.001);
}

TEST(PlanGdnCase, ForwardPassBytesAndFlopsAtTwoAndEightRanks) {
  const plan::Plan p = qwen3_next(plan::Pass::forward);
  expect_case(gdn_of(p, 2, "head_parallel"), kHpDeltaW2, kHpHbmW2, kHpCopyW2, kOtherW2, kHpFwdW2, 2, 2, false);
  expect_case(gdn_of(p, 8, "head_parallel"), kHpDeltaW8, kHpHbmW8, kHpCopyW8, kOtherW8, kHpFwdW8, 2, 8, false);
  expect_case(gdn_of(p, 2, "state_passing"), kSpDeltaW2, kSpHbmW2, 0, kOtherW2, kSpFwdW2, 2, 2, false);
  expect_case(gdn_of(p, 8, "state_passing"), kSpDeltaW8, kSpHbmW8, 0, kOtherW8, kSpFwdW8, 2, 8, false);
}
