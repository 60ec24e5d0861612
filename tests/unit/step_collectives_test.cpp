// FSDP / ZeRO, TP, PP collectives and the pipeline bubble against a hand count
// (harness/planner/step/collectives.hpp, step.hpp).
#include "harness/planner/step/collectives.hpp"

#include "harness/planner/step/attention.hpp"
#include "harness/planner/step/step.hpp"
#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepCollectives, ShardTpAndPpBytesByHand) {
  const ModelShape m = small_moe();
  const Cluster c = h100();
  Parallel p;
  p.tp = 2, p.cp = 2, p.dp = 2, p.ep = 4, p.zero = 3;
  const CaseShape s = shape(m, c, p);
  const GpuParams g = gpu_params(s);
  const double dense = g.dense * 3 / 4;  // ring over dp x cp = 4; experts over 4 / ep = 1: nothing moves
  // FSDP: all-gather forward and backward (bf16) + reduce-scatter (fp32), per micro-batch.
  EXPECT_DOUBLE_EQ(shard_component(s, g).bytes, 2 * dense * 2 + dense * 4);
  EXPECT_EQ(shard_component(s, g).name, "comm:fsdp");
  EXPECT_DOUBLE_EQ(shard_component(shape(m, c, p, Recompute::none, 1024, 3), g).bytes, 3 * (2 * dense * 2 + dense * 4));
  p.zero = 1;  // once per step: reduce-scatter + all-gather
  EXPECT_DOUBLE_EQ(shard_component(shape(m, c, p, Recompute::none, 1024, 3), g).bytes, dense * 4 + dense * 2);
  p.zero = 0;  // DDP: all-reduce = 2 x reduce-scatter
  EXPECT_DOUBLE_EQ(shard_component(shape(m, c, p), g).bytes, 2 * dense * 4);
  EXPECT_EQ(shard_component(shape(m, c, p), g).name, "comm:dp");
  // TP + SP: per sub-block (4 attention + 4 MLP) and pass an all-gather and a reduce-scatter of
  // 512 tokens x 64 x 2 B, half of it sent; forward + backward.
  const double X = 512.0 * 64 * 2;
  EXPECT_DOUBLE_EQ(tp_component(s).bytes, 2 * 8 * 2 * (X / 2));
  EXPECT_DOUBLE_EQ(tp_component(shape(m, c, p, Recompute::full)).bytes, 3 * 8 * 2 * (X / 2));
  // PP: per micro-batch and virtual stage the activations forward and their gradient back (/ tp: SP).
  p.pp = 2, p.vp = 2;
  EXPECT_DOUBLE_EQ(pp_component(shape(m, c, p, Recompute::none, 1024, 4)).bytes, 4 * 2 * 2 * (X / 2));
}

// The 1F1B bubble: (pp - 1) / (vp m) of the stage's compute and exposed communication.
TEST(StepCollectives, BubbleByHand) {
  const ModelShape m = small_dense();
  const Cluster c = h100();
  PlanRequest r;
  r.model = m;
  r.seq_len = 1024;
  r.cluster = c;
  r.sharders = {"load_balanced"};
  r.transports = {"allgather"};
  AttentionPricer pricer(r);
  const auto& prices = pricer.at(1, 2).at("load_balanced");
  const auto bubble_of = [&](int64_t pp, int64_t vp, int64_t micro) {
    CaseInputs in;
    in.parallel.pp = pp, in.parallel.vp = vp, in.parallel.cp = 2, in.parallel.zero = 1;
    in.training.microbatches = micro;
    in.training.recompute = Recompute::full;
    in.global_batch = micro;
    in.sharder = "load_balanced";
    in.kinds = &pricer.kinds();
    in.prices = &prices;
    in.memory_budget = 1e12;
    const StepCase sc = price_case(m, c, 1024, in);
    double busy = 0;  // compute + exposed cp / tp / ep
    for (const auto& x : sc.components)
      if (x.name != "bubble" && x.name != "optimizer" && x.name != "comm:pp" && x.name != "comm:dp") busy += x.time_s;
    return std::make_pair(sc.component_s("bubble"), busy);
  };
  const auto [b1, busy1] = bubble_of(2, 1, 8);
  EXPECT_NEAR(b1, 1.0 / 8 * busy1, 1e-12 * busy1);
  const auto [b2, busy2] = bubble_of(2, 2, 8);
  EXPECT_NEAR(b2, 1.0 / 16 * busy2, 1e-12 * busy2);  // interleaved: / vp
  EXPECT_EQ(bubble_of(1, 1, 8).first, 0);
}

}  // namespace cpbench::step_test
