// The first attention maths of a fresh process equal their repeat (issue 38 item 6; the cause and the
// fix: kernels/attention/intra_op_warmup.hpp). ctest runs this suite in its own process, so the ops
// below are the process's first: the shapes of unit.FlashNumerics' first block (2 heads x 128 x 128
// scores, exp on both intra-op threads), op by op, each repeated on the same inputs; a differing op
// is named with how many elements and where. Without the warm-up (CPBENCH_SKIP_MATH_WARMUP=1) the
// first exp differed on the worker thread's half in a few per cent of fresh processes under load.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "kernels/attention/intra_op_warmup.hpp"

namespace cpbench {
namespace {

void expect_same(const std::string& name, const at::Tensor& first, const at::Tensor& again) {
  if (first.equal(again)) return;
  const at::Tensor d = (first.to(at::kDouble) - again.to(at::kDouble)).abs().flatten();
  const at::Tensor off = (d > 0).nonzero().flatten();
  ADD_FAILURE() << name << ": the process's first call differs from its repeat in " << off.size(0) << " of "
                << first.numel() << " elements (flat " << off[0].item<int64_t>() << " .. "
                << off[-1].item<int64_t>() << "), max " << d.max().item<double>() << "; intra-op threads "
                << at::get_num_threads() << ", warm-up skipped: " << kernels::intra_op_warmup_skipped();
}

TEST(FirstAttention, EveryOpEqualsItsRepeatInAFreshProcess) {
  const int64_t H = 2, S = 128, D = 16;
  at::manual_seed(11);
  const auto gen = [&](double sd) { return (at::randn({H, S, D}) * sd).to(at::kBFloat16).to(at::kFloat); };
  const at::Tensor q = gen(2.0).mul(0.25), k = gen(2.0), v = gen(1.0);
  const at::Tensor s = at::bmm(q, k.transpose(1, 2));
  const at::Tensor shift = s.amax(-1, true);
  const at::Tensor sub = s.sub(shift);
  const at::Tensor p = sub.exp();
  const at::Tensor sum = p.sum(-1, true);
  const at::Tensor out = at::bmm(p, v);
  const at::Tensor lse = sum.log();
  const at::Tensor sub64 = sub.to(at::kDouble), p64 = sub64.exp();
  expect_same("bmm (scores)", s, at::bmm(q, k.transpose(1, 2)));
  expect_same("amax", shift, s.amax(-1, true));
  expect_same("sub", sub, s.sub(shift));
  expect_same("exp (float)", p, sub.exp());
  expect_same("sum", sum, p.sum(-1, true));
  expect_same("bmm (out)", out, at::bmm(p, v));
  expect_same("log", lse, sum.log());
  expect_same("exp (double)", p64, sub64.exp());
}

}  // namespace
}  // namespace cpbench
