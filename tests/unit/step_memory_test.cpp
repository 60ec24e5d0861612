// Memory per GPU against a hand count (harness/planner/step/memory.hpp): model states by ZeRO stage and
// offload, activations under each recompute policy, pipeline micro-batches in flight, logits.
#include "harness/planner/step/memory.hpp"

#include "harness/planner/step/embedding.hpp"
#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepMemory, StatesActivationsAndLogitsByHand) {
  const ModelShape m = small_moe();
  const Cluster c = h100();
  Parallel p;
  p.tp = 2, p.cp = 2, p.dp = 2, p.ep = 4, p.zero = 3;
  const std::vector<LayerKind> kinds = {{"full_attention", 4, "causal", 0, 'A'}};
  const std::vector<KindPrice> prices(1);  // cp buffers of allgather at cp 2
  std::vector<KindPrice> ag = prices;
  ag[0].transport = "allgather";
  const CaseShape s = shape(m, c, p);
  const GpuParams g = gpu_params(s);
  const double sharded = g.dense / 4 + g.expert;  // dense over dp x cp 4, experts over 4 / ep 4 = 1
  const Memory z3 = gpu_memory(s, g, kinds, ag);
  EXPECT_DOUBLE_EQ(z3.params, 2 * sharded);
  EXPECT_DOUBLE_EQ(z3.grads, 2 * sharded);
  EXPECT_DOUBLE_EQ(z3.optimizer, 12 * sharded);
  EXPECT_DOUBLE_EQ(z3.gathered, 2 * g.largest_layer * 6);
  // Per token (e = 2): attention 2 (2h + 2 hq d + 2 hkv d) + 4 hq = 656, dense MLP (384 wide)
  // 2 (2h + 3 x 384) = 2560, MoE 2 (2h + 3 (h + 3 x 128)) + 4 x 8 = 2976; 256 tokens per GPU (S 1024 /
  // cp 2 / tp 2), 4 attention layers, 2 dense MLPs, 2 MoE layers.
  const double none = 256.0 * (4 * 656 + 2 * 2560 + 2 * 2976);
  EXPECT_DOUBLE_EQ(z3.activations, none);
  EXPECT_DOUBLE_EQ(z3.logits, 512.0 * 500 * 12);
  EXPECT_DOUBLE_EQ(attention_activation_per_token(m, Recompute::selective), 656 - 128);
  // Full recompute keeps each layer's input (2h per token) and brings back one layer's whole activations
  // (attention + MoE, 929,792 B) after the logits (2.56 MB) are freed: the logits are the peak.
  const Memory full = gpu_memory(shape(m, c, p, Recompute::full), g, kinds, ag);
  EXPECT_DOUBLE_EQ(full.activations, 256.0 * 4 * 128);
  ModelShape few = m;  // a 10-token vocab: logits 512 x 5 x 12 B = 30.7 KB, the recomputed layer is the peak
  few.vocab = 10;
  const Memory full_few = gpu_memory(shape(few, c, p, Recompute::full), gpu_params(shape(few, c, p)), kinds, ag);
  EXPECT_DOUBLE_EQ(full_few.activations + full_few.logits, 256.0 * 4 * 128 + 256.0 * (656 + 2976));
  // ZeRO 1 shards only the optimizer states; the offload takes them off the GPU.
  p.zero = 1;
  CaseShape s1 = shape(m, c, p);
  const Memory z1 = gpu_memory(s1, g, kinds, ag);
  EXPECT_DOUBLE_EQ(z1.params, 2 * (g.dense + g.expert));
  EXPECT_DOUBLE_EQ(z1.grads, 2 * (g.dense + g.expert));
  EXPECT_DOUBLE_EQ(z1.optimizer, 12 * sharded);
  EXPECT_DOUBLE_EQ(z1.gathered, 0);
  s1.train.offload = Offload::optimizer;
  EXPECT_DOUBLE_EQ(gpu_memory(s1, g, kinds, ag).optimizer, 0);
  EXPECT_DOUBLE_EQ(gpu_memory(s1, g, kinds, ag).grads, (14.6 - 2) * (g.dense + g.expert));
  // CP buffers are the transport's own formula (allgather holds the gathered K/V).
  EXPECT_GT(z3.cp_buffers, 0);
  // Pipeline: 1F1B's first stage holds min(m, pp) micro-batches of its half of the layers.
  p.pp = 2, p.zero = 3;
  const CaseShape s2 = shape(m, c, p, Recompute::none, 1024, 8);
  EXPECT_DOUBLE_EQ(in_flight(s2), 2);
  const Memory pp2 = gpu_memory(s2, gpu_params(s2), kinds, ag);
  // The last stage (one micro-batch + the logits) is the peak here: none / 2 + 3.07 MB > 2 x none / 2.
  EXPECT_DOUBLE_EQ(pp2.activations, none / 2);
  EXPECT_DOUBLE_EQ(pp2.logits, logits_bytes(s2));
  p.vp = 2;
  EXPECT_DOUBLE_EQ(in_flight(shape(m, c, p, Recompute::none, 1024, 8)), 2 * (1 + 1.0 / 4));
  EXPECT_DOUBLE_EQ(z3.overhead, constants().allocator_overhead * (z3.total() - z3.overhead));
}

}  // namespace cpbench::step_test
