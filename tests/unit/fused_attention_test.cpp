// The fused block routes (kernels/attention/fused_attention.hpp) against the tiled kernel, their CPU
// twin: every route a CPU block can take (diagonal causal with is_causal, fully visible, a rectangle of
// full cells, masked with rows that see nothing, trimmed plans, GQA), forward (out, lse) and backward
// (dq, dk, dv), in float64 and float32; a long block of many documents band by band. Then both transports at W = 1 through their autograd nodes,
// fused against tiled, and which route each block took.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention/fused_attention.hpp"
#include "kernels/attention/plan_cache.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/transports/transport.hpp"
#include "kernels/transports/head_parallel.hpp"
#include "kernels/transports/transport_common.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/numerics_diagnostics.hpp"

namespace cpbench {
namespace {

using kernels::BlockKind;
using kernels::BlockPlan;
using kernels::KernelPolicy;
using kernels::KernelRoute;

TokenMeta meta(const at::Tensor& pos_row, int64_t batch) {
  at::Tensor pos = pos_row.to(at::kLong).unsqueeze(0).repeat({batch, 1}).contiguous();
  return TokenMeta{pos, at::zeros_like(pos), at::zeros_like(pos), at::ones_like(pos, at::kBool)};
}

struct Block {
  std::string name;
  MaskSpec mask;
  TokenMeta q, k;
  bool diagonal = false;  // plan through PlanCache (sets BlockPlan::causal) rather than plan_block
  bool trimmed = false;   // plan_block of the built mask (rows / cols trimming)
};

std::vector<Block> blocks() {
  const int64_t B = 2, S = 200, c = S / 2;
  const MaskSpec causal = MaskSpec::parse("causal");
  std::vector<Block> v;
  v.push_back({"diagonal causal", causal, meta(at::arange(S), B), meta(at::arange(S), B), true});
  // load_balanced, W = 2: rank 0 owns chunks 0 and 3, rank 1 chunks 1 and 2 (chunks of h = 128
  // tokens: whole tiles, so the off-diagonal blocks are rectangles of full cells).
  const int64_t h = 128;
  const at::Tensor r0 = at::cat({at::arange(0, h), at::arange(3 * h, 4 * h)});
  const at::Tensor r1 = at::cat({at::arange(h, 2 * h), at::arange(2 * h, 3 * h)});
  v.push_back({"head-tail diagonal", causal, meta(r0, B), meta(r0, B), true});
  v.push_back({"head-tail off-diagonal (rectangle)", causal, meta(r1, B), meta(r0, B)});
  v.push_back({"head-tail off-diagonal (rows)", causal, meta(r0, B), meta(r1, B)});
  // Every other query row sees all the keys, the others none: rows trimmed (plan_block of the mask).
  const at::Tensor alternating = at::arange(S) + (at::arange(S) % 2) * 10000;
  v.push_back({"trimmed rows", causal, meta(alternating, B), meta(at::arange(S) + 5000, B), false, true});
  v.push_back({"full", MaskSpec::parse("full"), meta(at::arange(S), B), meta(at::arange(S) + 7, B)});
  // striped, W = 2: rank 1 against rank 0's keys: j <= i (a triangle including its diagonal) ...
  v.push_back({"striped", causal, meta(at::arange(S) * 2 + 1, B), meta(at::arange(S) * 2, B)});
  // ... and rank 0 against rank 1's: row 0 sees nothing.
  v.push_back({"striped, a row sees nothing", causal, meta(at::arange(S) * 2, B), meta(at::arange(S) * 2 + 1, B)});
  v.push_back({"keys after: half the rows see nothing", causal, meta(at::arange(S), B), meta(at::arange(S) + c, B)});
  v.push_back({"sliding window", MaskSpec::parse("sliding_window:37"), meta(at::arange(S), B), meta(at::arange(S), B),
               true});
  {
    TokenMeta m = meta(at::arange(S), B);
    m.doc.narrow(1, 70, S - 70).fill_(1);
    m.doc[1].narrow(0, 150, S - 150).fill_(2);
    v.push_back({"documents", MaskSpec::parse("document"), m, m, true});
  }
  {
    TokenMeta m = meta(at::arange(S), B);
    m.valid.narrow(1, S - 30, 30).fill_(false);
    v.push_back({"padding", causal, m, m, true});
  }
  return v;
}

BlockPlan plan_of(const Block& b) {
  if (b.trimmed) return kernels::plan_block(build_mask(b.mask, b.q, b.k));
  if (b.diagonal) return make_plan_cache(b.mask, b.q, b.k, 0, 1, at::kCPU)->plan(0);
  return kernels::plan_block(b.mask, b.q, b.k);
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.sizes().equals(want.sizes())) << what << ": " << got.sizes() << " vs " << want.sizes();
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  const at::Tensor inf_g = at::isinf(got), inf_w = at::isinf(want);
  EXPECT_TRUE(inf_g.equal(inf_w)) << what << ": -inf in different places";
  EXPECT_FALSE(at::isnan(got).any().item<bool>()) << what << ": NaN";
  const at::Tensor g = got.masked_fill(inf_g, 0).to(at::kDouble), w = want.masked_fill(inf_w, 0).to(at::kDouble);
  const double err = (g - w).abs().max().item<double>(), scale = std::max(1.0, w.abs().max().item<double>());
  EXPECT_LE(err / scale, tol) << what << test::numerics_diagnostics(g, w);
}

class FusedBlock : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(FusedBlock, EveryCpuRouteEqualsTheTiledKernel) {
  const at::ScalarType dt = GetParam();
  const double tol = dt == at::kDouble ? 1e-10 : 2e-5;
  const int64_t D = 16;
  int64_t n_causal = 0, n_rect = 0, n_mask = 0, n_full = 0, n_trim = 0;
  for (const Block& b : blocks()) {
    const BlockPlan plan = plan_of(b);
    ASSERT_NE(plan.kind, BlockKind::empty) << b.name;
    const KernelRoute route = kernels::block_route(plan, dt, at::kCPU, D, KernelPolicy::fused);
    ASSERT_EQ(route, KernelRoute::cpu_flash) << b.name;
    EXPECT_EQ(kernels::block_route(plan, dt, at::kCPU, D, KernelPolicy::tiled), KernelRoute::tiled) << b.name;
    if (plan.causal) {  // the classification itself, against the rule's dense mask
      const at::Tensor dense = build_mask(b.mask, b.q, b.k);
      EXPECT_TRUE(dense.equal(at::ones_like(dense).tril())) << b.name << ": planned causal, but the mask is not the triangle";
    }
    n_causal += plan.causal;
    n_full += plan.kind == BlockKind::full;
    n_trim += plan.rows.defined() || plan.cols.defined();
    if (plan.kind == BlockKind::masked && !plan.causal) {
      bool rect = true;  // does the test set reach both masked sub-routes?
      for (auto k : plan.tiles.kind) rect = rect && k != BlockKind::masked;
      (rect ? n_rect : n_mask) += 1;
    }
    at::manual_seed(11);
    const int64_t B = b.q.batch(), sq = b.q.tokens(), sk = b.k.tokens();
    const auto o = at::TensorOptions().dtype(dt);
    const at::Tensor q = at::randn({B, 4, sq, D}, o), k = at::randn({B, 2, sk, D}, o), v = at::randn({B, 2, sk, D}, o);
    const at::Tensor dout = at::randn({B, 4, sq, D}, o);
    const double scale = 0.3;
    const auto want = kernels::block_forward(q, k, v, plan, scale);
    const auto got = kernels::routed_forward(q, k, v, plan, scale, route);
    expect_close(got.out, want.out, tol, b.name + " out");
    expect_close(got.lse, want.lse, tol, b.name + " lse");
    // One block is the whole attention here: its (out, lse) are the merged ones the backward takes.
    const at::Tensor dsum = (dout * want.out).sum(-1);
    const auto gw = kernels::block_backward(dout, q, k, v, want.lse, dsum, plan, scale);
    const auto gg = kernels::routed_backward(dout, q, k, v, want.out, want.lse, dsum, plan, scale, route);
    expect_close(gg.dq, gw.dq, tol, b.name + " dq");
    expect_close(gg.dk, gw.dk, tol, b.name + " dk");
    expect_close(gg.dv, gw.dv, tol, b.name + " dv");
  }
  // The set reaches every route a CPU block can take.
  EXPECT_GE(n_causal, 2);
  EXPECT_GE(n_full, 1);
  EXPECT_GE(n_rect, 1);
  EXPECT_GE(n_mask, 3);
  EXPECT_GE(n_trim, 1);
}

// A head dim the CUDA 16-bit kernels cannot take (12) runs zero-padded to 16 and sliced back
// (fused_head_dim): the padding itself, proven on cpu_flash called with 16 columns, equals the tiled
// kernel on the 12 true ones, forward and backward, with the true head dim's scale 1/sqrt(12).
TEST_P(FusedBlock, PaddedHeadDimEqualsTheTiledKernel) {
  const at::ScalarType dt = GetParam();
  const double tol = dt == at::kDouble ? 1e-10 : 2e-5;
  const int64_t D = 12, padded = 16;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (const Block& b : blocks()) {
    const BlockPlan plan = plan_of(b);
    at::manual_seed(5);
    const int64_t B = b.q.batch(), sq = b.q.tokens(), sk = b.k.tokens();
    const auto o = at::TensorOptions().dtype(dt);
    const at::Tensor q = at::randn({B, 4, sq, D}, o), k = at::randn({B, 2, sk, D}, o), v = at::randn({B, 2, sk, D}, o);
    const at::Tensor dout = at::randn({B, 4, sq, D}, o);
    const auto want = kernels::block_forward(q, k, v, plan, scale);
    const auto got = kernels::routed_forward(q, k, v, plan, scale, KernelRoute::cpu_flash,
                                             kernels::BlockNumerics{{}, false, padded});
    ASSERT_EQ(got.out.sizes(), want.out.sizes()) << b.name;
    expect_close(got.out, want.out, tol, b.name + " out (padded)");
    expect_close(got.lse, want.lse, tol, b.name + " lse (padded)");
    const at::Tensor dsum = (dout * want.out).sum(-1);
    const auto gw = kernels::block_backward(dout, q, k, v, want.lse, dsum, plan, scale);
    const auto gg =
        kernels::routed_backward(dout, q, k, v, want.out, want.lse, dsum, plan, scale, KernelRoute::cpu_flash,
                                 kernels::BlockNumerics{{}, false, padded});
    ASSERT_EQ(gg.dk.sizes(), gw.dk.sizes()) << b.name;
    expect_close(gg.dq, gw.dq, tol, b.name + " dq (padded)");
    expect_close(gg.dk, gw.dk, tol, b.name + " dk (padded)");
    expect_close(gg.dv, gw.dv, tol, b.name + " dv (padded)");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedBlock, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// A long block of many documents (and a sliding window): the masked route runs band by band, the
// bands' windows cover the non-empty cells within 2x their area (never the Sq x Sk block), the plan
// keeps no whole mask, and forward and backward equal the tiled kernel.
TEST(FusedBlock, ManyDocumentsRunBandByBandWithoutTheWholeMask) {
  const int64_t B = 2, S = 1500, D = 8;
  TokenMeta docs = meta(at::arange(S), B);
  // Row 0: 9 documents of uneven lengths; row 1: 5 others; a few padded keys at the end.
  const std::vector<int64_t> ends0{90, 300, 333, 600, 790, 1000, 1200, 1390, S}, ends1{250, 640, 700, 1100, S};
  for (const auto& [row, ends] : {std::pair{0, ends0}, std::pair{1, ends1}}) {
    int64_t start = 0, d = 0;
    for (int64_t e : ends) {
      docs.doc[row].narrow(0, start, e - start).fill_(d++);
      start = e;
    }
  }
  docs.valid.narrow(1, S - 7, 7).fill_(false);
  for (const char* mk : {"document", "sliding_window:100"}) {
    const MaskSpec mask = MaskSpec::parse(mk);
    const BlockPlan plan = kernels::plan_block(mask, docs, docs);
    ASSERT_EQ(plan.kind, BlockKind::masked) << mk;
    EXPECT_FALSE(plan.mask.defined()) << mk << ": the plan built the whole [B, S, S] mask";
    const auto bands = kernels::mask_bands(plan.tiles);
    EXPECT_EQ(plan.bands.size(), bands.size()) << mk << ": the plan's bands are not its tiles' bands";
    int64_t band_area = 0, covered_rows = 0;
    for (const auto& b : bands) {
      band_area += (b.r1 - b.r0) * (b.c1 - b.c0);
      covered_rows += b.r1 - b.r0;
    }
    EXPECT_GE(bands.size(), 4u) << mk;
    EXPECT_LE(B * band_area, 2 * plan.computed_pairs) << mk;
    EXPECT_LT(band_area * 3, S * S) << mk << ": the bands cover most of the block";
    EXPECT_EQ(covered_rows, S) << mk << ": every query tile has a visible key here";
    const at::Tensor dense = build_mask(mask, docs, docs);
    EXPECT_TRUE(kernels::plan_mask(plan, B, 0, S, 0, S, at::kCPU).equal(dense)) << mk;
    for (const at::ScalarType dt : {at::kDouble, at::kFloat}) {
      const double tol = dt == at::kDouble ? 1e-10 : 2e-5;
      const auto route = kernels::block_route(plan, dt, at::kCPU, D, KernelPolicy::fused);
      ASSERT_EQ(route, KernelRoute::cpu_flash) << mk;
      at::manual_seed(5);
      const auto o = at::TensorOptions().dtype(dt);
      const at::Tensor q = at::randn({B, 2, S, D}, o), k = at::randn({B, 1, S, D}, o), v = at::randn({B, 1, S, D}, o);
      const at::Tensor dout = at::randn({B, 2, S, D}, o);
      const std::string what = std::string(mk) + " " + c10::toString(dt);
      const auto want = kernels::block_forward(q, k, v, plan, 0.4);
      const auto got = kernels::routed_forward(q, k, v, plan, 0.4, route);
      expect_close(got.out, want.out, tol, what + " out");
      expect_close(got.lse, want.lse, tol, what + " lse");
      const at::Tensor dsum = (dout * want.out).sum(-1);
      const auto gw = kernels::block_backward(dout, q, k, v, want.lse, dsum, plan, 0.4);
      const auto gg = kernels::routed_backward(dout, q, k, v, want.out, want.lse, dsum, plan, 0.4, route);
      expect_close(gg.dq, gw.dq, tol, what + " dq");
      expect_close(gg.dk, gw.dk, tol, what + " dk");
      expect_close(gg.dv, gw.dv, tol, what + " dv");
    }
  }
}

TEST(FusedBlock, DiagonalCausalOnlyWhenTheMaskIsTheTriangle) {
  const MaskSpec causal = MaskSpec::parse("causal");
  TokenMeta m = meta(at::arange(100), 2);
  EXPECT_TRUE(kernels::diagonal_is_causal(causal, m));
  EXPECT_FALSE(kernels::diagonal_is_causal(MaskSpec::parse("full"), m));
  EXPECT_FALSE(kernels::diagonal_is_causal(MaskSpec::parse("sliding_window:10"), m));
  TokenMeta pad = meta(at::arange(100), 2);
  pad.valid[1][99] = false;
  EXPECT_FALSE(kernels::diagonal_is_causal(causal, pad));
  TokenMeta rev = meta(at::arange(100).flip(0), 2);
  EXPECT_FALSE(kernels::diagonal_is_causal(causal, rev));
  TokenMeta docs = meta(at::arange(100), 2);
  docs.doc[0][50] = 1;
  EXPECT_TRUE(kernels::diagonal_is_causal(causal, docs));
  EXPECT_FALSE(kernels::diagonal_is_causal(MaskSpec::parse("document"), docs));
  TokenMeta segs = meta(at::arange(100), 2);
  segs.segment[1][10] = 1;
  EXPECT_FALSE(kernels::diagonal_is_causal(causal, segs));
}

// Both transports at W = 1 (a world of one), fused against tiled, through autograd; and the routes.
TEST(FusedTransport, WorldOfOneFusedEqualsTiledAndReportsRoutes) {
  const comm::Communicator one;
  for (const char* name : {"allgather", "ring"}) {
    for (const at::ScalarType dt : {at::kDouble, at::kFloat}) {
      for (const char* mk : {"causal", "full", "document", "sliding_window:33"}) {
        const MaskSpec mask = MaskSpec::parse(mk);
        TokenMeta m = meta(at::arange(150), 2);
        m.doc.narrow(1, 90, 60).fill_(1);
        at::manual_seed(5);
        const auto o = at::TensorOptions().dtype(dt);
        const at::Tensor q0 = at::randn({2, 4, 150, 8}, o), k0 = at::randn({2, 2, 150, 8}, o),
                         v0 = at::randn({2, 2, 150, 8}, o), dout = at::randn({2, 4, 150, 8}, o);
        std::vector<at::Tensor> res[2];
        AttentionStats stats[2];
        for (int tiled = 0; tiled < 2; ++tiled) {
          const at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
                           v = v0.clone().requires_grad_();
          AttentionContext ctx{&one, mask, m, m, 0, &stats[tiled], "", nullptr, false};
          ctx.tiled_kernels = tiled == 1;
          const at::Tensor out = make_transport(name)->attend(q, k, v, ctx);
          out.backward(dout);
          res[tiled] = {out.detach(), q.grad(), k.grad(), v.grad()};
        }
        const std::string what = std::string(name) + " " + mk + " " + c10::toString(dt);
        for (size_t i = 0; i < 4; ++i) expect_close(res[0][i], res[1][i], dt == at::kDouble ? 1e-10 : 2e-5, what);
        EXPECT_EQ(stats[0].kernel_blocks, (std::map<std::string, int64_t>{{"cpu_flash", 1}})) << what;
        EXPECT_EQ(stats[1].kernel_blocks, (std::map<std::string, int64_t>{{"tiled", 1}})) << what;
      }
    }
  }
}

// 16-bit inputs on the CPU compute in float32: the fused route reads float32 and equals the tiled one.
TEST(FusedTransport, BFloat16OnCpuComputesInFloat32) {
  EXPECT_EQ(kernels::kernel_dtype(at::kBFloat16, at::kCPU, KernelPolicy::fused), at::kFloat);
  EXPECT_EQ(kernels::kernel_dtype(at::kBFloat16, at::Device(at::kCUDA, 0), KernelPolicy::fused), at::kBFloat16);
  EXPECT_EQ(kernels::kernel_dtype(at::kBFloat16, at::Device(at::kCUDA, 0), KernelPolicy::tiled), at::kFloat);
  EXPECT_EQ(kernels::kernel_dtype(at::kDouble, at::Device(at::kCUDA, 0), KernelPolicy::fused), at::kDouble);
}

// CUDA routes are chosen by rule (run in the gpu tests): flash for unmasked 16-bit blocks, efficient
// for masked or float32 ones, tiled for float64.
TEST(FusedTransport, CudaRouteRule) {
  const at::Device cuda(at::kCUDA, 0);
  const MaskSpec causal = MaskSpec::parse("causal");
  const TokenMeta m = meta(at::arange(128), 1);
  const BlockPlan diag = make_plan_cache(causal, m, m, 0, 1, at::kCPU)->plan(0);
  ASSERT_TRUE(diag.causal);
  EXPECT_EQ(kernels::block_route(diag, at::kBFloat16, cuda, 128, KernelPolicy::fused), KernelRoute::cuda_flash);
  // 16-bit head dims that are no multiple of 8 run padded to one (issue 28): flash while <= 256 padded.
  EXPECT_EQ(kernels::block_route(diag, at::kBFloat16, cuda, 12, KernelPolicy::fused), KernelRoute::cuda_flash);
  EXPECT_EQ(kernels::block_route(diag, at::kHalf, cuda, 250, KernelPolicy::fused), KernelRoute::cuda_flash);
  EXPECT_EQ(kernels::block_route(diag, at::kBFloat16, cuda, 260, KernelPolicy::fused), KernelRoute::cuda_efficient);
  EXPECT_EQ(kernels::fused_head_dim(KernelRoute::cuda_flash, at::kBFloat16, 12), 16);
  EXPECT_EQ(kernels::fused_head_dim(KernelRoute::cuda_efficient, at::kHalf, 20), 24);
  EXPECT_EQ(kernels::fused_head_dim(KernelRoute::cuda_flash_varlen, at::kBFloat16, 64), 64);
  EXPECT_EQ(kernels::fused_head_dim(KernelRoute::cuda_efficient, at::kFloat, 12), 12) << "float32 has unaligned kernels";
  EXPECT_EQ(kernels::fused_head_dim(KernelRoute::cpu_flash, at::kBFloat16, 12), 12);
  EXPECT_EQ(kernels::fused_head_dim(KernelRoute::tiled, at::kBFloat16, 12), 12);
  EXPECT_EQ(kernels::block_route(diag, at::kFloat, cuda, 128, KernelPolicy::fused), KernelRoute::cuda_efficient);
  EXPECT_EQ(kernels::block_route(diag, at::kDouble, cuda, 128, KernelPolicy::fused), KernelRoute::tiled);
  const BlockPlan striped = kernels::plan_block(causal, meta(at::arange(128) * 2, 1), meta(at::arange(128) * 2 + 1, 1));
  ASSERT_EQ(striped.kind, BlockKind::masked);
  EXPECT_EQ(kernels::block_route(striped, at::kHalf, cuda, 64, KernelPolicy::fused), KernelRoute::cuda_efficient);
}

}  // namespace
}  // namespace cpbench

namespace cpbench {
namespace {

// Plans are built once per step from host metadata: attend() calls given the step's PlanCache (every
// layer, forward and backward) build none; without one, each call plans for itself.
TEST(PlanReuse, LayersOfAStepShareOnePlanCache) {
  const comm::Communicator one;
  const MaskSpec mask = MaskSpec::parse("causal");
  const TokenMeta m = meta(at::arange(96), 2);
  at::manual_seed(2);
  const auto run_layers = [&](const AttentionContext& ctx, const char* transport) {
    at::Tensor x = at::randn({2, 4, 96, 8}, at::kFloat).requires_grad_();
    at::Tensor h = x;
    for (int layer = 0; layer < 3; ++layer) {
      const at::Tensor kv = h.narrow(1, 0, 2);
      h = make_transport(transport)->attend(h, kv, kv, ctx);
    }
    h.sum().backward();
  };
  for (const char* transport : {"allgather", "ring"}) {
    AttentionContext ctx{&one, mask, m, m, 0, nullptr, "", nullptr, false};
    ctx.plans = make_plan_cache(mask, m, m, 0, 1, at::kCPU);
    const int64_t before = metadata_plans_built();
    run_layers(ctx, transport);
    EXPECT_EQ(metadata_plans_built(), before) << transport << ": a layer planned again despite the step's plans";
    ctx.plans = nullptr;
    run_layers(ctx, transport);
    EXPECT_EQ(metadata_plans_built(), before + 3) << transport << ": one plan per attend() call without a cache";
  }
}

TEST(PlanReuse, PlansOfAnotherStepShapeAreRefused) {
  const comm::Communicator one;
  const TokenMeta m = meta(at::arange(64), 1);
  AttentionContext ctx{&one, MaskSpec::parse("causal"), m, m, 0, nullptr, "", nullptr, false};
  ctx.plans = make_plan_cache(MaskSpec::parse("full"), m, m, 0, 1, at::kCPU);
  const at::Tensor q = at::randn({1, 2, 64, 8});
  EXPECT_THROW((void)make_transport("ring")->attend(q, q, q, ctx), Error);
}

}  // namespace
}  // namespace cpbench

namespace cpbench {
namespace {

// Masked plans carry their band masks, built once with the step's plans on the plans' device: a step
// (one make_plans, then three layers forward and backward, as the runner runs it) builds one
// PlanCache, and its layers build no mask window (plan_mask) and plan nothing. Documents, a sliding
// window and padding (masked bands), every transport's W = 1 form; each band's bias is made once,
// [B, 1, n, w] for all heads.
TEST(PlanReuse, AStepBuildsOnePlanCacheAndItsLayersBuildNoMask) {
  const comm::Communicator one;
  const int64_t S = 300;
  TokenMeta docs = meta(at::arange(S), 2);
  docs.doc = (at::arange(S, at::kLong) >= 130).to(at::kLong).add(at::arange(S, at::kLong) >= 210).unsqueeze(0).repeat({2, 1});
  TokenMeta padded = meta(at::arange(S), 2);
  padded.valid = (at::arange(S) < 280).unsqueeze(0).repeat({2, 1});
  struct Case {
    const char* name;
    MaskSpec mask;
    TokenMeta m;
  };
  const std::vector<Case> cases = {{"document", MaskSpec::parse("document"), docs},
                                   {"sliding_window:70", MaskSpec::parse("sliding_window:70"), meta(at::arange(S), 2)},
                                   {"causal with padding", MaskSpec::parse("causal"), padded}};
  for (const Case& c : cases) {
    for (const char* transport : {"allgather", "ring", "a2a"}) {
      const auto t = make_transport(transport);
      const int64_t caches0 = kernels::PlanCache::caches_built();
      AttentionContext ctx{&one, c.mask, c.m, c.m, 0, nullptr, "", nullptr, false};
      ctx.plans = t->make_plans(c.mask, c.m, c.m, {}, 0, 1, at::kCPU);
      ASSERT_EQ(ctx.plans->plan(0).kind, BlockKind::masked) << c.name;
      const int64_t windows0 = kernels::mask_windows_built(), plans0 = metadata_plans_built();
      at::manual_seed(4);
      at::Tensor x = at::randn({2, 4, S, 8}, at::kFloat).requires_grad_();
      at::Tensor h = x;
      for (int layer = 0; layer < 3; ++layer) h = t->attend(h, h.narrow(1, 0, 2), h.narrow(1, 0, 2), ctx);
      h.sum().backward();
      EXPECT_TRUE(x.grad().isfinite().all().item<bool>()) << c.name << " " << transport;
      EXPECT_EQ(kernels::PlanCache::caches_built() - caches0, 1) << c.name << " " << transport << ": plan caches per step";
      EXPECT_EQ(metadata_plans_built(), plans0) << c.name << " " << transport << ": a layer planned";
      EXPECT_EQ(kernels::mask_windows_built(), windows0) << c.name << " " << transport << ": a layer built a mask";
      // Each masked band's bias was made once, for all heads ([B, 1, n, w]), and kept with the plan.
      int64_t masked_bands = 0;
      for (const auto& band : ctx.plans->plan(0).bands) {
        if (!band.masked) continue;
        ++masked_bands;
        ASSERT_TRUE(band.bias.defined()) << c.name << " " << transport;
        EXPECT_EQ(band.bias.size(1), 1) << c.name << " " << transport << ": a bias per head";
        EXPECT_EQ(band.bias.size(2), band.r1 - band.r0) << c.name << " " << transport;
      }
      EXPECT_GT(masked_bands, 0) << c.name << " " << transport;
    }
  }
}

// The flash route evaluates no mask: a masked call sent there is an error, not an unmasked result
// (checked before any CUDA call, so on the CPU too).
TEST(FusedBlock, FlashRouteRefusesAMask) {
  const BlockPlan striped = kernels::plan_block(MaskSpec::parse("causal"), meta(at::arange(128) * 2, 1),
                                                meta(at::arange(128) * 2 + 1, 1));
  ASSERT_EQ(striped.kind, BlockKind::masked);
  const at::Tensor q = at::randn({1, 2, 128, 64}).to(at::kBFloat16);
  EXPECT_THROW((void)kernels::routed_forward(q, q, q, striped, 0.125, KernelRoute::cuda_flash), Error);
}

// a2a and hybrid put the gathered tokens in global order with the layout's map: per Ulysses group,
// the arrival index of its tokens sorted by global position; a2a's one block is then the causal
// triangle (planned without a mask), where rank order (load_balanced) leaves it masked.
TEST(HeadParallelOrder, GlobalOrderMakesTheDiagonalOneCausalBlock) {
  // load_balanced, W = 2, 4 chunks of 64: rank 0 owns chunks 0 and 3, rank 1 chunks 1 and 2.
  const at::Tensor c = at::arange(64, at::kLong);
  const at::Tensor rank_order = at::cat({c, c + 192, c + 64, c + 128});
  const TokenMeta all = meta(rank_order, 1);
  const MaskSpec causal = MaskSpec::parse("causal");
  const auto a2a = make_transport("a2a");
  const auto in_rank_order = a2a->make_plans(causal, all.narrow(1, 0, 128), all, {}, 0, 2, at::kCPU);
  EXPECT_FALSE(in_rank_order->plan(0).causal);
  EXPECT_FALSE(in_rank_order->gathered_order().defined());
  const auto in_global_order = a2a->make_plans(causal, all.narrow(1, 0, 128), all, rank_order, 0, 2, at::kCPU);
  EXPECT_TRUE(in_global_order->plan(0).causal);
  const at::Tensor order = in_global_order->gathered_order();
  ASSERT_TRUE(order.defined());
  EXPECT_TRUE(rank_order.index_select(0, order).equal(at::arange(256, at::kLong)));
  EXPECT_TRUE(order.index_select(0, in_global_order->gathered_inverse()).equal(at::arange(256, at::kLong)));
  // hybrid, W = 4, U = 2: each group of 2 ranks sorted on its own.
  const at::Tensor g = kernels::gathered_global_order(at::tensor({7, 0, 6, 1, 2, 5, 3, 4}, at::kLong), 4);
  EXPECT_TRUE(g.equal(at::tensor({1, 3, 2, 0, 0, 2, 3, 1}, at::kLong).view({2, 4})));
  // The negative control keeps rank order (its bug must stay planted).
  const auto control = make_transport("a2a_rank_order");
  EXPECT_FALSE(control->make_plans(causal, all.narrow(1, 0, 128), all, rank_order, 0, 2, at::kCPU)
                   ->gathered_order()
                   .defined());
}

}  // namespace
}  // namespace cpbench
