// Flash numerics (kernels/attention/tiled_kernel.hpp FlashRounding, the `kernels: flash_numerics`
// scenario key): the tiled kernel rounds to bf16 / fp16 where FlashAttention-2 holds 16-bit operands.
// Checked against an independent float64 emulation of FA2's algorithm written here from its paper /
// kernel structure (P rounded before P·V, O written in 16 bits; P rounded before dV, dS rounded before
// dQ and dK, D = rowsum(dO * O) from the 16-bit O, the gradients written in 16 bits). Each rounding
// is shown to matter: the kernel is closer to the emulation than the emulation is to itself with that
// one rounding left out. And the two plain decisions the GPU path takes around it: which single-rank
// run the precision rule compares against, and cuBLAS's reduction setting.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <ATen/Context.h>

#include <string>

#include "harness/runner/device_choice.hpp"
#include "harness/runner/reference_run.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/attention/fused_attention.hpp"
#include "kernels/attention/plan_cache.hpp"
#include "kernels/transports/transport.hpp"
#include "tests/unit/numerics_diagnostics.hpp"

namespace cpbench {
namespace {

using kernels::BlockNumerics;
using kernels::FlashRounding;
using kernels::KernelRoute;

// Which of FA2's roundings the emulation applies.
struct Rounds {
  bool p_fwd = true, out = true, p_dv = true, ds = true, grads = true;
};

at::Tensor round_to(const at::Tensor& t, at::ScalarType dt, bool on) { return on ? t.to(dt).to(t.scalar_type()) : t; }

struct Emulated {
  at::Tensor out, lse, dq, dk, dv;
};

// FA2 on one block in float64 (no GQA: Hq = Hkv), `visible` bool [Sq, Sk]; q, k, v, dout hold
// 16-bit values.
Emulated emulate(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                 const at::Tensor& visible, double scale, at::ScalarType dt, Rounds r) {
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const at::Tensor Q = d(q), K = d(k), V = d(v), dO = d(dout);
  const at::Tensor S = at::matmul(Q, K.transpose(-1, -2)).mul(scale).masked_fill(visible.logical_not(), -INFINITY);
  const at::Tensor m = std::get<0>(S.max(-1, true));
  const at::Tensor P = (S - m).exp();
  const at::Tensor l = P.sum(-1, true);
  Emulated e;
  e.out = round_to(at::matmul(round_to(P, dt, r.p_fwd), V) / l, dt, r.out);
  e.lse = (l.log() + m).squeeze(-1);
  const at::Tensor Pn = (S - e.lse.unsqueeze(-1)).exp();
  const at::Tensor D = (dO * round_to(e.out, dt, true)).sum(-1, true);
  e.dv = round_to(at::matmul(round_to(Pn, dt, r.p_dv).transpose(-1, -2), dO), dt, r.grads);
  const at::Tensor dS = round_to(Pn * (at::matmul(dO, V.transpose(-1, -2)) - D), dt, r.ds);
  e.dq = round_to(at::matmul(dS, K) * scale, dt, r.grads);
  e.dk = round_to(at::matmul(dS.transpose(-1, -2), Q) * scale, dt, r.grads);
  return e;
}

double mean_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().mean().item<double>();
}

bool representable(const at::Tensor& t, at::ScalarType dt) { return t.to(dt).to(t.scalar_type()).equal(t); }

TokenMeta row_meta(int64_t s, const at::Tensor& doc) {
  at::Tensor pos = at::arange(s, at::kLong).unsqueeze(0);
  return TokenMeta{pos, at::zeros_like(pos), doc.unsqueeze(0).contiguous(), at::ones_like(pos, at::kBool)};
}

TEST(FlashNumerics, TiledKernelRoundsWhereFlashAttention2Does) {
  const int64_t H = 2, S = 128, D = 16;
  for (const at::ScalarType dt : {at::kBFloat16, at::kHalf}) {
    for (const char* mk : {"full", "causal", "document"}) {
      const MaskSpec mask = MaskSpec::parse(mk);
      const TokenMeta m = row_meta(S, (at::arange(S, at::kLong) >= 50).to(at::kLong));
      const kernels::BlockPlan plan = make_plan_cache(mask, m, m, 0, 1, at::kCPU)->plan(0);
      const at::Tensor visible = build_mask(mask, m, m)[0];
      at::manual_seed(11);
      // 16-bit values held in float32 (the tiled kernel's compute dtype), as a CP rank holds them.
      const auto gen = [&](at::IntArrayRef shape, double sd) { return (at::randn(shape) * sd).to(dt).to(at::kFloat); };
      const at::Tensor q = gen({1, H, S, D}, 2.0), k = gen({1, H, S, D}, 2.0), v = gen({1, H, S, D}, 1.0),
                       dout = gen({1, H, S, D}, 1.0);
      const double scale = 1.0 / 4.0;
      const BlockNumerics n{FlashRounding{dt}, false};
      const auto got = kernels::routed_forward(q, k, v, plan, scale, KernelRoute::tiled, n);
      const auto g = kernels::routed_backward(dout, q, k, v, got.out, got.lse, at::Tensor(), plan, scale,
                                              KernelRoute::tiled, n);
      const std::string what = std::string(mk) + " " + c10::toString(dt);
      const Emulated e = emulate(q[0], k[0], v[0], dout[0], visible, scale, dt, {});
      // What FA2 writes in 16 bits is representable in 16 bits.
      for (const auto& [name, t] : {std::pair{"out", got.out}, {"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}})
        EXPECT_TRUE(representable(t, dt)) << what << ": " << name << " is not rounded to the input dtype";
      EXPECT_LT(mean_abs(got.lse[0], e.lse), 1e-6) << what << ": lse" << test::numerics_diagnostics(got.lse[0], e.lse);
      // Each rounding matters: leaving one out of the emulation moves it further from the kernel than
      // the kernel is from the full emulation (which differs only where float32 and float64 round a
      // value to different sides of a 16-bit midpoint).
      const auto closer = [&](const char* name, const at::Tensor& kernel, const at::Tensor& full, const at::Tensor& without) {
        const double to_full = mean_abs(kernel, full), gap = mean_abs(full, without);
        EXPECT_GT(gap, 0) << what << ": " << name << ": the left-out rounding changes nothing here";
        EXPECT_LT(to_full, 0.25 * gap) << what << ": " << name << ": kernel vs FA2 " << to_full
                                       << ", FA2 vs FA2 without this rounding " << gap;
      };
      closer("out (P rounded before P·V)", got.out, e.out, emulate(q[0], k[0], v[0], dout[0], visible, scale, dt,
                                                                   {false, true, true, true, true}).out);
      closer("dv (P rounded before dV)", g.dv, e.dv,
             emulate(q[0], k[0], v[0], dout[0], visible, scale, dt, {true, true, false, true, true}).dv);
      const Emulated no_ds = emulate(q[0], k[0], v[0], dout[0], visible, scale, dt, {true, true, true, false, true});
      closer("dq (dS rounded)", g.dq, e.dq, no_ds.dq);
      closer("dk (dS rounded)", g.dk, e.dk, no_ds.dk);
    }
  }
}

// Off (the default, and for float32 / float64 inputs under the policy): the tiled kernel's exact maths.
TEST(FlashNumerics, NoRoundingUnlessSixteenBit) {
  EXPECT_FALSE(FlashRounding{}.on());
  const at::Tensor x = at::randn({64});
  EXPECT_TRUE(FlashRounding{}(x).equal(x));
  EXPECT_FALSE(FlashRounding{at::kBFloat16}(x).equal(x));
}

// The single-rank run the precision rule charges CP against carries the same attention roundings as
// the CP run: through the CP kernels at W = 1 where those round like flash.
TEST(FlashNumerics, SingleRankRunUsesTheCpKernelsWhereTheyRoundLikeFlash) {
  EXPECT_TRUE(single_rank_uses_cp_kernels(AttentionKernels::fused, /*cuda=*/true, at::kBFloat16));
  EXPECT_TRUE(single_rank_uses_cp_kernels(AttentionKernels::fused, true, at::kHalf));
  EXPECT_TRUE(single_rank_uses_cp_kernels(AttentionKernels::flash_numerics, false, at::kBFloat16));
  EXPECT_TRUE(single_rank_uses_cp_kernels(AttentionKernels::flash_numerics, true, at::kBFloat16));
  EXPECT_FALSE(single_rank_uses_cp_kernels(AttentionKernels::fused, false, at::kBFloat16));  // CPU: float32 kernels
  EXPECT_FALSE(single_rank_uses_cp_kernels(AttentionKernels::tiled, true, at::kBFloat16));
  EXPECT_FALSE(single_rank_uses_cp_kernels(AttentionKernels::fused, true, at::kFloat));
  EXPECT_FALSE(single_rank_uses_cp_kernels(AttentionKernels::flash_numerics, false, at::kDouble));
}

TEST(FlashNumerics, CudaGemmsReduceInFullPrecision) {
  at::globalContext().setAllowBF16ReductionCuBLAS(true, true);
  at::globalContext().setAllowFP16ReductionCuBLAS(true, true);
  use_full_precision_gemm_reductions();
  EXPECT_EQ(at::globalContext().allowBF16ReductionCuBLAS(), at::CuBLASReductionOption::DisallowReducedPrecisionAllowSplitK);
  EXPECT_EQ(at::globalContext().allowFP16ReductionCuBLAS(), at::CuBLASReductionOption::DisallowReducedPrecisionAllowSplitK);
}

TEST(FlashNumerics, ScenarioKey) {
  const std::string base = "name: k\nmodel: {preset: tiny}\nbatch: {batch_size: 1, seq_len: 64}\n";
  EXPECT_EQ(parse_scenario(base, "k.yaml").kernels, AttentionKernels::fused);
  EXPECT_EQ(parse_scenario(base + "kernels: flash_numerics\n", "k.yaml").kernels, AttentionKernels::flash_numerics);
  EXPECT_EQ(parse_scenario(base + "kernels: tiled\n", "k.yaml").kernels, AttentionKernels::tiled);
  try {
    (void)parse_scenario(base + "kernels: flash\n", "k.yaml");
    FAIL() << "an unknown kernels value was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("kernels"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("flash_numerics"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cpbench
