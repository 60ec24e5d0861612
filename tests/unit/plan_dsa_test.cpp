// DeepSeek Sparse Attention in the plan (harness/planner/dsa_stages.hpp): the indexer and the sparse core
// priced as two stages per rank with their own balance, the key-side wire, in the plain plan and in the
// whole step, checked against a hand count on a small DSA model.
#include <gtest/gtest.h>

#include "harness/planner/dsa_stages.hpp"
#include "harness/planner/plan.hpp"
#include "harness/planner/step/attention.hpp"

namespace cpbench {

namespace {
// 1 layer, 2 heads, MLA r 4, dr 2, dn 2, dv 2; DSA 1 index head of 3, top-3. Per query that sees n keys
// (dsa_costs.hpp): indexer 2 x 1 x (3 + 1) n = 8 n; sparse core 2 x 2 x (2 x 4 + 2) min(3, n) + 2 x 2 x 4 x
// (2 + 2) = 40 min(3, n) + 64; wire 4 + 2 + 3 = 9 values per token.
plan::ModelShape tiny_dsa() {
  plan::ModelShape m;
  m.name = "tiny-dsa";
  m.layers = 1, m.hidden = 16, m.heads = 2, m.kv_heads = 2, m.head_dim = 3;
  m.attention.mla = MlaDims{4, 2, 2, 2};
  m.attention.dsa.index_heads = 1, m.attention.dsa.index_head_dim = 3, m.attention.dsa.topk = 3;
  return m;
}

const plan::PlanCase& case_of(const plan::Plan& p, const std::string& sharder) {
  for (const auto& c : p.cases)
    if (c.sharder == sharder && c.transport == "allgather") return c;
  throw std::runtime_error("no case for " + sharder);
}
}  // namespace

TEST(PlanDsa, TwoStagesPerLayoutByHand) {
  plan::PlanRequest r;
  r.model = tiny_dsa();
  r.seq_len = 8;
  r.cps = {2};
  r.sharders = {"contiguous", "load_balanced"};
  r.cluster = plan::cluster_preset("h100-nvlink");
  const plan::Plan p = plan::make_plan(r);
  // The transports dsa_key_side_transports() lists (allgather, ring: the same key-side bytes), nothing else.
  for (const auto& c : p.cases) EXPECT_TRUE(c.transport == "allgather" || c.transport == "ring") << c.transport;
  // contiguous: rank 0 holds positions 0..3 (n = 1..4), rank 1 4..7 (n = 5..8).
  const plan::DsaCase& contiguous = case_of(p, "contiguous").dsa;
  ASSERT_TRUE(contiguous.enabled);
  EXPECT_DOUBLE_EQ(contiguous.indexer_flops_max, 8.0 * (5 + 6 + 7 + 8));                       // 208
  EXPECT_DOUBLE_EQ(contiguous.indexer_balance, 208.0 / ((80.0 + 208.0) / 2));                  // rank 0: 8 x 10
  EXPECT_DOUBLE_EQ(contiguous.sparse_flops_max, 40.0 * 12 + 4 * 64);                           // 736: min(3, n) = 3
  EXPECT_DOUBLE_EQ(contiguous.sparse_balance, 736.0 / ((40.0 * (1 + 2 + 3 + 3) + 4 * 64 + 736.0) / 2));
  // load_balanced (head-tail chunks of 2): rank 0 holds 0, 1, 6, 7 (n = 1, 2, 7, 8), rank 1 2..5 (n = 3..6):
  // the indexer evens out, the sparse core does not need to (flat past k) and is as uneven as contiguous's.
  const plan::DsaCase& lb = case_of(p, "load_balanced").dsa;
  EXPECT_DOUBLE_EQ(lb.indexer_flops_max, 8.0 * 18);
  EXPECT_DOUBLE_EQ(lb.indexer_balance, 1.0);
  EXPECT_DOUBLE_EQ(lb.sparse_flops_max, 736.0);
  EXPECT_DOUBLE_EQ(lb.sparse_balance, contiguous.sparse_balance);
  // Wire per rank: (W - 1) x 4 tokens x 9 values, bf16 forward and fp32 backward.
  EXPECT_DOUBLE_EQ(lb.wire_bytes, 4.0 * 9 * 2 + 4.0 * 9 * 4);
  // Time: each stage's slowest rank at the attention rate, x 3.5 for the training step; the wire exposed.
  const double F = r.cluster.attention_flops;
  EXPECT_DOUBLE_EQ(contiguous.indexer_s, 208.0 * 3.5 / F);
  EXPECT_DOUBLE_EQ(case_of(p, "contiguous").predicted_step_s, contiguous.indexer_s + contiguous.sparse_s + contiguous.wire_s);
  EXPECT_GT(case_of(p, "contiguous").predicted_step_s, case_of(p, "load_balanced").predicted_step_s);
}

TEST(PlanDsa, TheWholeStepPricesTheDsaKindAndCountsItsFlops) {
  plan::PlanRequest r;
  r.model = plan::model_preset("deepseek-v3.2");
  r.seq_len = 131072;
  r.cluster = plan::cluster_preset("h100-ib400");
  plan::step::AttentionPricer pricer(r);
  ASSERT_EQ(pricer.kinds().size(), 1u);
  EXPECT_EQ(pricer.kinds()[0].kind, "dsa");
  const auto& at = pricer.at(1, 8);
  ASSERT_TRUE(at.count("load_balanced"));
  EXPECT_EQ(at.at("load_balanced")[0].transport, "allgather");
  // Model FLOPs per token and layer: dsa_costs' indexer + sparse core means over a causal 128K row
  // (1.08 + 0.60 GFLOP at V3.2's dims), not the dense MLA core (5.37).
  const double f = plan::step::attention_core_flops_per_token(r.model, 131072, "causal");
  const dsa_costs::DsaDims d = plan::dsa_dims(r.model);
  EXPECT_DOUBLE_EQ(f, dsa_costs::indexer_flops_per_token(d, 131072) + dsa_costs::sparse_core_flops_per_token(d, 131072));
  EXPECT_NEAR(f / 1e9, 1.08 + 0.60, 0.02);
}

}  // namespace cpbench
