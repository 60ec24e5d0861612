// Embeddings, LM head and loss against a hand count (harness/planner/step/embedding.hpp).
#include "harness/planner/step/embedding.hpp"

#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepEmbedding, HeadFlopsAndLogitsByHand) {
  ModelShape m = small_dense();
  EXPECT_DOUBLE_EQ(embedding_params(m), 1000.0 * 64);
  EXPECT_DOUBLE_EQ(head_params(m), 1000.0 * 64);
  m.tied_embeddings = true;
  EXPECT_DOUBLE_EQ(head_params(m), 0);  // the head is the embedding
  const Cluster c = h100();
  Parallel p;
  p.tp = 2, p.cp = 2;
  const CaseShape s = shape(m, c, p);
  const Component head = head_component(s);
  // 512 tokens x vocab 500 per TP rank x 2 h FLOPs, x 3 (fwd + bwd), in bf16.
  EXPECT_DOUBLE_EQ(head.flops, 512.0 * 2 * 500 * 64 * 3);
  EXPECT_DOUBLE_EQ(head.bytes, 512.0 * 500 * 4 * 3);  // fp32 logits: 3 passes of the loss
  EXPECT_DOUBLE_EQ(head.time_s, head.flops / (c.bf16_flops * constants().gemm_efficiency_bf16) + head.bytes / c.kernel.hbm_bandwidth);
  // Logits of the micro-batch: 512 x 500 x logit_bytes (the fp32 log-softmax backward: output, its gradient, the input gradient, 4 B each).
  EXPECT_DOUBLE_EQ(logits_bytes(s), 512.0 * 500 * 12);
}

}  // namespace cpbench::step_test
