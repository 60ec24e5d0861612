// The single-block path (kernels/transports/single_block.cpp): a rank that holds the whole sequence
// (W = 1) runs one kernel call, no merge buffers. Every transport's W = 1 form against the plain
// reference attention through ATen autograd (independent maths), forward and every gradient, over the
// masks, GQA and the routes a CPU block takes (cpu_flash, tiled, flash numerics); bf16 inputs come
// back in bf16; the step is counted and timed as one block.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "kernels/attention/reference.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench {
namespace {

TokenMeta docs_meta(int64_t batch, int64_t s) {
  at::Tensor pos = at::arange(s, at::kLong).unsqueeze(0).repeat({batch, 1}).contiguous();
  at::Tensor doc = (at::arange(s, at::kLong) >= s / 3).to(at::kLong).add(at::arange(s, at::kLong) >= s - 20);
  return TokenMeta{pos, at::zeros_like(pos), doc.unsqueeze(0).repeat({batch, 1}).contiguous(),
                   at::ones_like(pos, at::kBool)};
}

struct Grads {
  at::Tensor out, dq, dk, dv;
};

Grads run(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& attend,
          const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& dout) {
  const at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
  const at::Tensor out = attend(q, k, v);
  out.backward(dout);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() /
         std::max(1.0, want.to(at::kDouble).abs().max().item<double>());
}

TEST(SingleBlock, EveryTransportAtWorldOneEqualsThePlainReference) {
  const comm::Communicator one;
  const int64_t B = 2, Hq = 4, Hkv = 2, S = 150, D = 8;
  const TokenMeta m = docs_meta(B, S);
  for (const char* mk : {"causal", "full", "document", "sliding_window:33"}) {
    const MaskSpec mask = MaskSpec::parse(mk);
    at::manual_seed(3);
    const auto o = at::TensorOptions().dtype(at::kDouble);
    const at::Tensor q = at::randn({B, Hq, S, D}, o), k = at::randn({B, Hkv, S, D}, o), v = at::randn({B, Hkv, S, D}, o),
                     dout = at::randn({B, Hq, S, D}, o);
    const Grads want = run([&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
      return local_attention(a, b, c, m, m, mask, 0);
    }, q, k, v, dout);
    for (const char* name : {"allgather", "ring", "a2a", "hybrid"}) {
      for (const bool tiled : {false, true}) {
        const auto t = make_transport(name, TransportOptions{std::string(name) == "hybrid" ? 1 : 0});
        AttentionStats stats;
        AttentionContext ctx{&one, mask, m, m, 0, &stats, "", nullptr, tiled};
        ctx.plans = t->make_plans(mask, m, m, {}, 0, 1, at::kCPU);
        const Grads got = run([&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
          return t->attend(a, b, c, ctx);
        }, q, k, v, dout);
        const std::string what = std::string(name) + " " + mk + (tiled ? " tiled" : " fused");
        EXPECT_LT(rel_err(got.out, want.out), 1e-12) << what << ": out";
        EXPECT_LT(rel_err(got.dq, want.dq), 1e-12) << what << ": dq";
        EXPECT_LT(rel_err(got.dk, want.dk), 1e-12) << what << ": dk";
        EXPECT_LT(rel_err(got.dv, want.dv), 1e-12) << what << ": dv";
        // One block per call, nothing sent.
        int64_t blocks = 0;
        for (const auto& [route, n] : stats.kernel_blocks) blocks += n;
        EXPECT_EQ(blocks, 1) << what;
        EXPECT_EQ(stats.calls, 1) << what;
        EXPECT_EQ(stats.bytes_sent, 0) << what;
        EXPECT_GT(stats.compute_seconds, 0) << what;
      }
    }
  }
}

// bf16 in, bf16 out (and bf16 gradients), within bf16's own rounding of the float64 reference, on the
// fused route and under flash numerics.
TEST(SingleBlock, SixteenBitInputsComeBackInTheirDtype) {
  const comm::Communicator one;
  const int64_t B = 1, H = 2, S = 96, D = 16;
  const TokenMeta m = docs_meta(B, S);
  const MaskSpec mask = MaskSpec::parse("document");
  at::manual_seed(8);
  const at::Tensor q = at::randn({B, H, S, D}).to(at::kBFloat16), k = at::randn({B, H, S, D}).to(at::kBFloat16),
                   v = at::randn({B, H, S, D}).to(at::kBFloat16), dout = at::randn({B, H, S, D}).to(at::kBFloat16);
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const Grads want = run([&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
    return local_attention(a, b, c, m, m, mask, 0);
  }, d(q), d(k), d(v), d(dout));
  for (const bool flash_numerics : {false, true}) {
    AttentionContext ctx{&one, mask, m, m, 0, nullptr, "", nullptr, false};
    ctx.flash_numerics = flash_numerics;
    const Grads got = run([&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
      return make_transport("allgather")->attend(a, b, c, ctx);
    }, q, k, v, dout);
    for (const at::Tensor& t : {got.out, got.dq, got.dk, got.dv}) EXPECT_EQ(t.scalar_type(), at::kBFloat16);
    EXPECT_LT(rel_err(got.out, want.out), 2e-2) << flash_numerics;
    EXPECT_LT(rel_err(got.dq, want.dq), 5e-2) << flash_numerics;
    EXPECT_LT(rel_err(got.dk, want.dk), 5e-2) << flash_numerics;
    EXPECT_LT(rel_err(got.dv, want.dv), 5e-2) << flash_numerics;
  }
}

}  // namespace
}  // namespace cpbench
