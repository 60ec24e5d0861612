// The dense MLP of the whole step against a hand count (harness/planner/step/mlp.hpp).
#include "harness/planner/step/mlp.hpp"

#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepMlp, ParamsFlopsAndActivationsByHand) {
  const ModelShape dense = small_dense();
  EXPECT_DOUBLE_EQ(mlp_layer_params(dense), 3.0 * 64 * 128);  // gate, up, down
  EXPECT_DOUBLE_EQ(dense_mlp_layers(dense), 4);
  // An MoE model's dense layers are (top-k + shared) experts wide: 3 x 128 = 384.
  EXPECT_DOUBLE_EQ(mlp_layer_params(small_moe()), 3.0 * 64 * 384);
  EXPECT_DOUBLE_EQ(dense_mlp_layers(small_moe()), 2);
  // tp 2, cp 2, S 1024: each GPU computes its CP shard's 512 tokens through half of each matrix;
  // forward 2 x params / 2 per token, x 3 for forward + backward, x 4 layers.
  const Cluster c = h100();
  Parallel p;
  p.tp = 2, p.cp = 2;
  const Component none = mlp_component(shape(dense, c, p));
  EXPECT_DOUBLE_EQ(none.flops, 4 * 512 * (2.0 * 24576 / 2) * 3);
  EXPECT_DOUBLE_EQ(none.time_s, none.flops / (c.bf16_flops * constants().gemm_efficiency_bf16));
  // Full recompute runs the forward again: 4 passes.
  EXPECT_DOUBLE_EQ(mlp_component(shape(dense, c, p, Recompute::full)).flops, none.flops * 4 / 3);
  // Saved per token (e = 2): norm input, GEMM input (2h), gate and up (2f), activation output (f).
  EXPECT_DOUBLE_EQ(mlp_activation_per_token(dense, Recompute::none), 2.0 * (2 * 64 + 3 * 128));
  EXPECT_DOUBLE_EQ(mlp_activation_per_token(dense, Recompute::selective), 2.0 * (64 + 2 * 128));
  EXPECT_DOUBLE_EQ(mlp_activation_per_token(dense, Recompute::full), 0);
  // Pipeline parallelism: a stage holds half the layers at pp 2.
  p.pp = 2;
  EXPECT_DOUBLE_EQ(mlp_component(shape(dense, c, p)).flops, none.flops / 2);
}

}  // namespace cpbench::step_test
