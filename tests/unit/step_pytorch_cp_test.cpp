// --stack pytorch-cp (harness/planner/step/pytorch_cp.hpp): PyTorch's context_parallel priced term by
// term, checked against a hand count on a small layer (calls, HBM bytes of the merges / copies /
// accumulations, wire bytes and what of it is exposed), and the stack's refusals.
#include "harness/planner/step/pytorch_cp.hpp"

#include "harness/planner/step/attention.hpp"
#include "harness/planner/step/constants.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

namespace {
// A cluster whose every rate is round: 1 TFLOP/s attention, the kernel model without launch, row overhead
// or causal penalty, HBM 1 GB/s, links 1 GB/s, no latency.
Cluster round_cluster() {
  Cluster c = h100();
  c.attention_flops = 1e12;
  c.kernel = neutral_kernel_model();
  c.kernel.hbm_bandwidth = 1e9;
  c.intra_bandwidth = c.inter_bandwidth = 1e9;
  c.latency_s = 0;
  return c;
}
}  // namespace

TEST(StepPytorchCp, ALayerByHand) {
  // W = 2, s = 8 local tokens (chunks of c = 4), 2 heads (K/V expanded: 2) of d = 4, bf16: E = K = 8
  // elements per row. Rank 1 runs step 1 on all its 8 query rows against the first chunk of rank 0's keys
  // (i <= r), rank 0 its second chunk of 4 rows against all 8 keys: rank 1 is the slowest (more merge rows).
  TorchCpQuery q;
  q.cp = 2, q.local_tokens = 8, q.heads = 2, q.kv_heads = 2, q.head_dim = 4, q.elem_bytes = 2;
  const TorchCpLayer t = pytorch_cp_layer(round_cluster(), q);
  const double rho = constants().pytorch_cp_remote_call_efficiency;
  // Calls: 4 H d = 32 FLOPs per pair; the local call 2 triangles of 4 + a 4 x 4 block = 36 pairs, the
  // remote one 8 x 4 = 32 pairs at rho; backward 2.5 x.
  EXPECT_NEAR(t.fwd_calls_s, (32.0 * 36 + 32.0 * 32 / rho) / 1e12, 1e-18);
  EXPECT_NEAR(t.bwd_calls_s, 2.5 * (32.0 * 36 + 32.0 * 32 / rho) / 1e12, 1e-18);
  // Forward HBM bytes, rank 1: k, v contiguous + cat at step 0 (2 x 4 x 256-byte [k, v]) = 1024; step 0's
  // out -> fp32 and the result -> bf16, 6 B x 64 each = 768; step 1's merge over 8 rows, (2 + 4 + 32) x 64
  // = 2432.
  EXPECT_DOUBLE_EQ(t.fwd_hbm_bytes, 1024.0 + 768 + 2432);
  // Backward, rank 1: copies 1024; fp32 zeros of dq, dk, dv 4 x 192 = 768; casts back 6 x 192 = 1152;
  // fp32 cat of [dk, dv] each step 2 x 8 x 128 = 2048; step 0's += 10 x 192 = 1920; FlashAttention-2's own
  // dO.O / dQ passes 14 x 64 per call (both calls run 8 rows) = 1792; step 1 (i <= r): dk, dv += on the
  // first chunk (10 x 32 each) and a cat of each whole buffer (8 x 64 each) = 1664, dq += 10 x 64 = 640.
  EXPECT_DOUBLE_EQ(t.bwd_hbm_bytes, 1024.0 + 768 + 1152 + 2048 + 1920 + 1792 + 1664 + 640);
  EXPECT_NEAR(t.fwd_hbm_s, t.fwd_hbm_bytes / 1e9, 1e-15);
  EXPECT_NEAR(t.bwd_hbm_s, t.bwd_hbm_bytes / 1e9, 1e-15);
  // Wire: the [k, v] all-gathered once per pass (256 B from the other rank), fp32 [dk, dv] on W = 2 ring
  // hops of 512 B.
  EXPECT_DOUBLE_EQ(t.bytes, 2 * 256.0 + 2 * 512.0);
  // Exposed: each all-gather (256 ns) less the local call it hides behind; the first dk/dv hop (512 ns)
  // less step 1's backward call, the last hop all.
  const double local_f = 32.0 * 36 / 1e12, remote_b = 2.5 * 32.0 * 32 / rho / 1e12;
  EXPECT_NEAR(t.fwd_exposed_s, 256e-9 - local_f, 1e-15);
  EXPECT_NEAR(t.bwd_exposed_s, (256e-9 - 2.5 * local_f) + std::max(0.0, 512e-9 - remote_b) + 512e-9, 1e-15);
  EXPECT_NEAR(t.step_s(), t.compute_s() + t.fwd_exposed_s + t.bwd_exposed_s, 1e-18);
}

TEST(StepPytorchCp, TheRingRotateHidesEachHopBehindThePreviousStep) {
  TorchCpQuery q;
  q.cp = 4, q.local_tokens = 8, q.heads = 2, q.kv_heads = 2, q.head_dim = 4, q.elem_bytes = 2, q.ring_rotate = true;
  const TorchCpLayer ring = pytorch_cp_layer(round_cluster(), q);
  q.ring_rotate = false;
  const TorchCpLayer ag = pytorch_cp_layer(round_cluster(), q);
  // The same bytes (3 x 256 per pass, 4 x 512 of gradients), the same calls and HBM passes.
  EXPECT_DOUBLE_EQ(ring.bytes, 2 * 3 * 256.0 + 4 * 512.0);
  EXPECT_DOUBLE_EQ(ag.bytes, ring.bytes);
  EXPECT_DOUBLE_EQ(ring.fwd_calls_s, ag.fwd_calls_s);
  EXPECT_DOUBLE_EQ(ring.fwd_hbm_bytes, ag.fwd_hbm_bytes);
  // On a 1 GB/s link the hops (256 ns each) outlast these tiny calls: the ring exposes three hops less
  // three steps' calls, the all-gather (768 ns) less the local call once.
  EXPECT_GT(ring.fwd_exposed_s, 0);
  EXPECT_NE(ring.fwd_exposed_s, ag.fwd_exposed_s);
}

TEST(StepPytorchCp, RefusesWhatItDoesNotRun) {
  PlanRequest r;
  r.model = small_dense();
  r.seq_len = 4096;
  r.cluster = h100();
  EXPECT_NO_THROW(AttentionPricer(r, Stack::pytorch_cp));
  PlanRequest a2a = r;
  a2a.transports = {"a2a"};
  EXPECT_THROW(AttentionPricer(a2a, Stack::pytorch_cp), UsageError);
  PlanRequest striped = r;
  striped.sharders = {"striped"};
  EXPECT_THROW(AttentionPricer(striped, Stack::pytorch_cp), UsageError);
  PlanRequest docs = r;
  docs.mask = "document";
  EXPECT_THROW(AttentionPricer(docs, Stack::pytorch_cp), UsageError);
  PlanRequest oss = r;
  oss.model = model_preset("gpt-oss-120b");
  EXPECT_THROW(AttentionPricer(oss, Stack::pytorch_cp), UsageError);
  EXPECT_THROW(parse_stack("megatron"), UsageError);
}

TEST(StepPytorchCp, CpOneIsTheCpbenchPriceAndCpTwoIsTheStacks) {
  PlanRequest r;
  r.model = small_dense();
  r.seq_len = 4096;
  r.cluster = h100();
  r.transports = {"allgather"};
  r.sharders = {"load_balanced"};
  AttentionPricer cpbench(r), torch(r, Stack::pytorch_cp);
  // No CP: one SDPA call either way.
  EXPECT_DOUBLE_EQ(torch.at(1, 1).at("load_balanced")[0].step_s, cpbench.at(1, 1).at("load_balanced")[0].step_s);
  // CP 2: the stack's own price, labelled as such.
  const KindPrice& kp = torch.at(1, 2).at("load_balanced")[0];
  EXPECT_EQ(kp.label, "pytorch-allgather");
  TorchCpQuery q;
  q.cp = 2, q.local_tokens = 2048, q.heads = 4, q.kv_heads = 4, q.head_dim = 16, q.elem_bytes = 2;
  EXPECT_DOUBLE_EQ(kp.step_s, pytorch_cp_layer(r.cluster, q).step_s());
  EXPECT_GT(kp.step_s, cpbench.at(1, 2).at("load_balanced")[0].step_s);
}

}  // namespace cpbench::step_test
