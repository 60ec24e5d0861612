// The planner (harness/planner/plan.hpp): per-rank FLOPs equal what the transports count on the runner's own
// metadata, the analytic bounds of peers-and-limits §9.2, the transports' byte formulas, the memory of
// allgather, and a2a's win with many heads and short local sequences.
#include "tests/unit/plan_test_util.hpp"

using namespace cpbench;
using namespace cpbench::plan_test;


// ---------------------------------------------------------------------------------------------------
// Per-rank work: the same layout code and the transports' mask semantics
// ---------------------------------------------------------------------------------------------------

TEST(PlanFlops, PredictedRankFlopsEqualWhatTheTransportsCountOnTheRunnersMetadata) {
  struct Row {
    int64_t S;
    std::vector<int64_t> docs;
  };
  const std::vector<Row> rows = {{37, {}}, {37, {10, 3, 17, 5}}, {24, {12, 9}}, {40, {1, 13, 7, 19}}};
  for (const std::string sharder : {"contiguous", "load_balanced", "striped", "thd", "workload_balanced"})
    for (const std::string mask : {"causal", "full", "document", "sliding_window:5"})
      for (const auto& row : rows)
        for (int64_t W = 1; W <= 4; ++W) {
          SCOPED_TRACE(
              cpbench::detail::concat(sharder, " W=", W, " S=", row.S, " docs=", shape_str(row.docs), " ", mask));
          const auto expected = runner_visible_pairs(sharder, W, row.S, row.docs, mask);
          const auto flops = plan::predicted_rank_flops(sharder, W, row.S, row.docs, mask, 3, 8);
          ASSERT_EQ(flops.size(), expected.size());
          for (size_t r = 0; r < flops.size(); ++r)
            EXPECT_EQ(flops[r], 4.0 * 3 * 8 * static_cast<double>(expected[r])) << "rank " << r;
        }
}

TEST(PlanFlops, BlocksKernelCountsNonEmptyRankBlocks) {
  // Contiguous, causal: rank r's queries see the key blocks of ranks 0..r.
  const auto f = plan::predicted_rank_flops("contiguous", 4, 64, {}, "causal", 1, 1, plan::Kernel::blocks);
  EXPECT_EQ(f, (std::vector<double>{4.0 * 1 * 256, 4.0 * 2 * 256, 4.0 * 3 * 256, 4.0 * 4 * 256}));
  // Head-tail: every rank needs every block.
  for (double x : plan::predicted_rank_flops("load_balanced", 4, 64, {}, "causal", 1, 1, plan::Kernel::blocks))
    EXPECT_EQ(x, 4.0 * 4 * 256);
  // Sliding window of 16 over 16-token rank blocks: blocks r-1 and r only.
  const auto w = plan::predicted_rank_flops("contiguous", 4, 64, {}, "sliding_window:16", 1, 1, plan::Kernel::blocks);
  EXPECT_EQ(w, (std::vector<double>{4.0 * 256, 4.0 * 2 * 256, 4.0 * 2 * 256, 4.0 * 2 * 256}));
}

// ---------------------------------------------------------------------------------------------------
// Analytic bounds (peers-and-limits §9.2)
// ---------------------------------------------------------------------------------------------------

TEST(PlanBounds, ContiguousCausalImbalanceIsTwoWMinusOneOverW) {
  for (int64_t W : {2, 4, 8, 16}) {
    const int64_t s = 1024, S = W * s;
    const auto f = plan::predicted_rank_flops("contiguous", W, S, {}, "causal");
    // A_r = s^2 (r + 1/2) + s/2 exactly, so max/mean = (s(2W-1) + 1) / (sW + 1) -> (2W-1)/W.
    const double exact = static_cast<double>(s * (2 * W - 1) + 1) / static_cast<double>(s * W + 1);
    EXPECT_NEAR(max_over_mean(f), exact, 1e-12) << "W=" << W;
    EXPECT_NEAR(max_over_mean(f), static_cast<double>(2 * W - 1) / static_cast<double>(W), 1e-3) << "W=" << W;
  }
}

TEST(PlanBounds, HeadTailIsExactlyBalanced) {
  for (int64_t W : {2, 4, 8, 16})
    for (const std::string sharder : {"load_balanced", "thd"}) {
      const auto f = plan::predicted_rank_flops(sharder, W, W * 2 * 300, {}, "causal");
      for (double x : f) EXPECT_EQ(x, f[0]) << sharder << " W=" << W;
    }
}

TEST(PlanBounds, ContiguousRingEfficiencyIsWOver2WMinusOne) {
  plan::PlanRequest r = request("llama3-8b", 8 * 8192, {8});
  r.kernel = plan::Kernel::pairs;  // the bound of an ideal kernel: time ~ visible pairs
  r.sharders = {"contiguous", "load_balanced"};
  r.transports = {"ring"};
  const plan::Plan p = plan::make_plan(r);
  EXPECT_NEAR(find_case(p, "contiguous", "ring", 8).efficiency, 8.0 / 15.0, 1e-3);
  EXPECT_NEAR(find_case(p, "load_balanced", "ring", 8).efficiency, 1.0, 1e-3);
}

// ring-flash-attention's benchmark (§3.2): 8 x H800, Llama-3-8B attention shape, 8K tokens per GPU,
// causal, bf16, one attention call, ring transport. The h800-nvlink preset's kernel model is fitted on
// the fwd + bwd column (docs/planner.md, "The kernel model"); the forward column is held out.
TEST(PlanComm, BytesFollowTheTransportFormulas) {
  plan::PlanRequest r = request("llama3-8b", 131072, {8, 16});
  r.sharders = {"load_balanced"};
  const plan::Plan p = plan::make_plan(r);
  for (int64_t W : {8, 16}) {
    const int64_t s = 131072 / W;
    const int64_t kv = 2 * 8 * s * 128 * 2, dkv = 2 * 8 * s * 128 * 4;
    EXPECT_EQ(find_case(p, "load_balanced", "ring", W).bytes_per_rank, 32 * (W - 1) * (2 * kv + dkv));
    EXPECT_EQ(find_case(p, "load_balanced", "allgather", W).bytes_per_rank, 32 * (W - 1) * (kv + dkv));
    EXPECT_EQ(find_case(p, "load_balanced", "ring", W).bytes_per_rank,
              32 * make_transport("ring")->bytes_per_call(CallShape{W, 1, 32, 8, s, 128, 2}));
  }
  // peers-and-limits §9.5: S = 128K, P = 8: 16,384 tokens per rank, ring forward K/V 7 x 64 MiB = 448 MiB.
  EXPECT_EQ(find_case(p, "load_balanced", "ring", 8).local_tokens, 16384);
}

TEST(PlanComm, ExposedCommunicationModel) {
  // Ring: hidden when each hop is shorter than the slowest rank's step; exposed hop by hop otherwise.
  const auto hidden = plan::call_time("ring", 4, 4.0, 3e9, 9e9, 1e12, 0);
  EXPECT_EQ(hidden.exposed_s, 0.0);
  EXPECT_DOUBLE_EQ(hidden.step_s, 14.0);
  const auto exposed = plan::call_time("ring", 4, 4.0, 3e9, 9e9, 1e9, 0);
  // hops: fwd 1 s vs 1 s of compute (hidden), bwd 3 s vs 2.5 s -> 3 x 0.5 s exposed
  EXPECT_DOUBLE_EQ(exposed.exposed_s, 1.5);
  EXPECT_DOUBLE_EQ(exposed.transfer_s, 12.0);
  // Allgather: the gather overlaps the local block only; the reduce-scatter is exposed.
  const auto ag = plan::call_time("allgather", 4, 4.0, 3e9, 6e9, 1e9, 0, {4.0, 4.0, 4.0, 4.0}, {1.0, 1.0, 1.0, 1.0});
  EXPECT_DOUBLE_EQ(ag.step_s, 3.0 + 3.0 + 10.0 + 6.0);
  EXPECT_DOUBLE_EQ(ag.exposed_s, 8.0);
  // Past the node the inter-node link is used.
  plan::PlanRequest r = request("llama3-8b", 131072, {8, 16});
  r.cluster = plan::cluster_preset("h100-ib400");
  r.sharders = {"load_balanced"};
  r.transports = {"allgather"};
  const plan::Plan p = plan::make_plan(r);
  EXPECT_GT(find_case(p, "load_balanced", "allgather", 16).exposed_comm_s,
            4 * find_case(p, "load_balanced", "allgather", 8).exposed_comm_s);
}

TEST(PlanMemory, AllgatherKeepsTheGatheredKeysAndValues) {
  plan::PlanRequest r = request("llama3-8b", 131072, {8});
  r.sharders = {"load_balanced"};
  const plan::Plan p = plan::make_plan(r);
  const int64_t s = 16384;
  const int64_t per_layer = s * (2 * 4096 * 2 + 2 * 32 * 128 * 2 + 2 * 8 * 128 * 2 + 4 * 32);
  const int64_t kv = 2 * 8 * s * 128 * 2, dkv = 2 * 8 * s * 128 * 4;
  EXPECT_EQ(find_case(p, "load_balanced", "ring", 8).peak_activation_bytes, 32 * per_layer + 2 * kv + 2 * dkv);
  EXPECT_EQ(find_case(p, "load_balanced", "allgather", 8).peak_activation_bytes,
            32 * per_layer + 32 * 7 * kv + 8 * dkv);
}

// ---------------------------------------------------------------------------------------------------
// The planner asks the transports: their formulas, every registered one, no names of its own
// ---------------------------------------------------------------------------------------------------

// Every case's bytes, time and memory are what its transport's own formulas give for the case's
// shapes and compute, recomputed here from the transport interface and the layout's work: a planner
// that priced a case any other way (its own byte split, time model or buffer sizes) fails this.
TEST(PlanHeadParallel, A2aWinsWithManyHeadsAndShortLocalSequences) {
  plan::PlanRequest r = request("llama3-8b", 131072, {8});
  r.cluster = plan::cluster_preset("h100-ib400");
  const plan::Plan p = plan::make_plan(r);
  ASSERT_FALSE(p.recommendation.per_cp.empty());
  EXPECT_EQ(p.recommendation.per_cp[0].transport, "a2a");
  // Shorter local sequences: a head-parallel transport (a2a or hybrid) still ranks first.
  const plan::Plan shorter = plan::make_plan(request("llama3-8b", 16384, {8}));
  const std::string best = shorter.recommendation.per_cp[0].transport;
  EXPECT_TRUE(best == "a2a" || best.rfind("hybrid-u", 0) == 0) << best;
  EXPECT_LT(find_case(p, "load_balanced", "a2a", 8).predicted_step_s,
            find_case(p, "load_balanced", "ring", 8).predicted_step_s);
  // a2a evens the work out over heads whatever the layout: contiguous is no longer imbalanced.
  EXPECT_DOUBLE_EQ(find_case(p, "contiguous", "a2a", 8).imbalance, 1.0);
  EXPECT_GT(find_case(p, "contiguous", "ring", 8).imbalance, 1.5);

  plan::PlanRequest q = request("llama3-8b", 16384, {64});  // 32 heads do not split over 64 ranks
  const plan::Plan pq = plan::make_plan(q);
  for (const auto& c : pq.cases) EXPECT_NE(c.transport, "a2a");
  bool noted = false;
  for (const auto& n : pq.notes) noted = noted || n.find("32 query heads are not divisible by") != std::string::npos;
  EXPECT_TRUE(noted);
  // hybrid is planned for the Ulysses degrees that divide both W and the heads.
  EXPECT_EQ(find_case(pq, "load_balanced", "hybrid-u8", 64).ulysses, 8);
}

// ---------------------------------------------------------------------------------------------------
// SSM layers: hybrid models from their config files, both SSM CP strategies
// ---------------------------------------------------------------------------------------------------
