// The planner per attention layer kind (harness/planner/layer_kinds.hpp): gpt-oss's sliding layers are
// planned under their window (and take the windowed ring, whose bytes the window sets) apart from its full
// layers; DeepSeek-V3's MLA layers get a wire, the latent across nodes, its bytes the transport's formula
// at 576 values per token; models of one plain kind get no per-kind section (their plans unchanged).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness/planner/layer_kinds.hpp"
#include "harness/planner/plan.hpp"
#include "kernels/transports/transport.hpp"

using namespace cpbench;

namespace {

plan::PlanRequest request(const std::string& model, int64_t S, std::vector<int64_t> cps, const std::string& cluster) {
  plan::PlanRequest r;
  r.model = plan::model_preset(model);
  r.seq_len = S;
  r.cps = std::move(cps);
  r.cluster = plan::cluster_preset(cluster);
  return r;
}

TEST(PlanLayerKinds, GptOssSlidingLayersArePlannedUnderTheirWindowApartFromTheFullOnes) {
  // Two nodes of 8 joined at 50 GB/s: cp 8 inside a node, cp 16 across.
  const plan::Plan p = plan::make_plan(request("gpt-oss-120b", 32768, {8, 16}, "h100-ib400"));
  ASSERT_EQ(p.per_kind.size(), 4u);  // sliding at cp 8, 16, then full at cp 8, 16
  for (const auto& k : p.per_kind)
    std::printf("cp %lld %s x%lld (%s): %s/%s %.3g ms, %lld B; %s\n", static_cast<long long>(k.cp), k.kind.c_str(),
                static_cast<long long>(k.layers), k.mask.c_str(), k.sharder.c_str(), k.transport.c_str(),
                1e3 * k.step_s, static_cast<long long>(k.bytes_per_rank), k.why.c_str());
  for (int i = 0; i < 2; ++i) {
    const plan::KindChoice& sliding = p.per_kind[static_cast<size_t>(i)];
    const plan::KindChoice& full = p.per_kind[static_cast<size_t>(i + 2)];
    SCOPED_TRACE("cp " + std::to_string(sliding.cp));
    EXPECT_EQ(sliding.cp, full.cp);
    EXPECT_EQ(sliding.kind, "sliding_attention");
    EXPECT_EQ(sliding.layers, 18);
    EXPECT_EQ(sliding.mask, "sliding_window:128");
    EXPECT_EQ(full.kind, "full_attention");
    EXPECT_EQ(full.layers, 18);
    EXPECT_EQ(full.mask, "causal");
    EXPECT_NE(full.transport, "ring_window");
    // 128 keys per query against up to 32K: the sliding layers' step is a small fraction of the full ones'.
    EXPECT_LT(5 * sliding.step_s, full.step_s);
  }
  const plan::KindChoice& across = p.per_kind[1];
  ASSERT_EQ(across.cp, 16);
  // A window of 128 against 2048 local tokens across nodes: the halo of 127 keys, not the (W - 1) x 2048 a
  // full-sequence transport moves.
  EXPECT_EQ(across.transport, "ring_window") << across.why;
  // Upper bound: 18 layers x (K, V out + dK, dV back) x 127 tokens x 8 kv heads x 64 x 4 B, from both
  // neighbours (35.7 MiB); the full layers move far more.
  EXPECT_LE(across.bytes_per_rank, int64_t{18} * 2 * 2 * 127 * 8 * 64 * 4 * 2);
  EXPECT_GT(across.bytes_per_rank, 0);
  EXPECT_GT(p.per_kind[3].bytes_per_rank, 20 * across.bytes_per_rank);
}

TEST(PlanLayerKinds, DeepSeekV3MlaLayersTakeTheLatentWireAcrossNodes) {
  const plan::Plan p = plan::make_plan(request("deepseek-v3", 65536, {8, 16}, "h100-ib400"));
  ASSERT_EQ(p.per_kind.size(), 2u);
  for (const auto& k : p.per_kind) {
    std::printf("cp %lld %s x%lld: %s/%s + %s %.3g ms, %lld B; %s\n", static_cast<long long>(k.cp), k.kind.c_str(),
                static_cast<long long>(k.layers), k.sharder.c_str(), k.transport.c_str(), k.wire.c_str(),
                1e3 * k.step_s, static_cast<long long>(k.bytes_per_rank), k.why.c_str());
    EXPECT_EQ(k.kind, "mla");
    EXPECT_EQ(k.layers, 61);
    // Any transport that carries MLA (allgather, ring, a2a, hybrid: Transport::unsupported_mla).
    EXPECT_TRUE(make_transport(k.transport)->unsupported_mla(MlaWire::latent).empty()) << k.transport;
  }
  const plan::KindChoice& across = p.per_kind[1];
  ASSERT_EQ(across.cp, 16);
  // 16 ranks over two nodes joined at 50 GB/s: the latent's fewer bytes (71x on allgather / ring, the K/V
  // part of a2a's) outweigh the up-projection.
  EXPECT_EQ(across.wire, "latent") << across.why;
  // Its bytes: the transport's own formula at r + dr = 576 values per token (v head dim 128 for the
  // head-parallel transports' q / output exchanges), 61 layers.
  CallShape call{16, 1, 128, 128, 65536 / 16, 192, 2};
  call.kv_token_elements = 576;
  call.v_head_dim = 128;
  call.latent_wire = true;
  EXPECT_EQ(across.bytes_per_rank, 61 * make_transport(across.transport)->bytes_per_call(call));
}

// The MLA kind's wire price uses the same ring formula as the plan's own cases (mla_wire_query: the case's
// compute, its link, the cluster's contention w = 0.59 with --kernel fitted). DeepSeek-V3's expanded wire
// sends H (dn + dr + dv) = 40960 values per token, exactly plain attention's 2 Hkv d at 128 kv heads of
// d = 160: the sub-plan's ring case at that shape. At 32K over cp 4 on NVLink its hops hide behind the
// compute (x_f = 8192 * 40960 * 2 B / 400 GB/s = 1.678 ms per hop against ~7 ms of forward per step; the
// backward hop carries K/V and fp32 dK/dV, x_b = 3 x_f), so both prices are compute + 3 hops * w * (x_f +
// x_b) = 3 * 0.59 * 4 * 1.678 ms = 11.88 ms per call; the expanded wire adds only its own up-projection,
// 3 S u / F = 1.374 ms (fwd u, bwd 2u per token, u = 2 r H (dn + dv)). Without w in the price (the bug
// this guards) the expanded wire was those 11.88 ms per call cheaper than the same ring's case.
TEST(PlanLayerKinds, MlaExpandedWireOnTheRingCostsTheSameRingCasePlusItsUpProjection) {
  plan::PlanRequest r = request("deepseek-v3", 32768, {4}, "h100-nvlink");
  r.sharders = {"load_balanced"};
  r.transports = {"ring"};
  const plan::Plan full = plan::make_plan(r);
  plan::PlanRequest k = full.request;  // the MLA layers alone as plain attention at d = (192 + 128) / 2
  plan::ModelShape m;
  m.name = "deepseek-v3 mla as plain";
  m.layers = 61;
  m.hidden = k.model.hidden;
  m.heads = m.kv_heads = 128;
  m.head_dim = 160;
  k.model = m;
  const plan::Plan sub = plan::make_plan(k);
  ASSERT_EQ(sub.cases.size(), 1u);
  const plan::PlanCase& c = sub.cases[0];
  const plan::MlaWireQuery q = plan::mla_wire_query(full.request, c, 61);
  EXPECT_DOUBLE_EQ(q.contention, 0.59);
  const plan::MlaWirePrice p = plan::price_mla_wires(*make_transport("ring"), q);
  EXPECT_EQ(p.bytes_expanded, c.bytes_per_rank / 61);
  const double S = 8192, up = 3 * S * 2.0 * 512 * 128 * 256 / 600e12;  // 3 S u / F = 1.374 ms
  EXPECT_NEAR(p.expanded.step_s - up, c.predicted_step_s / 61, 1e-9);
  EXPECT_NEAR(p.expanded.exposed_s, c.exposed_comm_s / 61, 1e-9);
  EXPECT_NEAR(p.expanded.exposed_s, 3 * 0.59 * 4 * 8192 * 40960 * 2 / 400e9, 1e-9);  // 3 hops, w (x_f + x_b)
  std::printf("ring case %.4g ms/layer (exposed %.4g); expanded wire %.4g ms (exposed %.4g), latent %.4g ms\n",
              1e3 * c.predicted_step_s / 61, 1e3 * c.exposed_comm_s / 61, 1e3 * p.expanded.step_s,
              1e3 * p.expanded.exposed_s, 1e3 * p.latent.step_s);
  plan::PlanRequest pairs = full.request;  // --kernel pairs: no contention, as its cases
  pairs.kernel = plan::Kernel::pairs;
  EXPECT_EQ(plan::mla_wire_query(pairs, c, 61).contention, 0.0);
}

TEST(PlanLayerKinds, ModelsOfOnePlainKindKeepTheirPlan) {
  for (const char* name : {"llama3-8b", "kimi-linear-48b-a3b", "qwen2.5-7b"}) {
    const plan::Plan p = plan::make_plan(request(name, 16384, {8}, "h100-nvlink"));
    EXPECT_TRUE(p.per_kind.empty()) << name;
  }
}

}  // namespace
