// The delta rule's work on one rank under each CP strategy (Google Benchmark; issue 37 item 4), forward,
// float32 on CPU, communication left out (it is the transports' and the all-gather's, timed elsewhere):
//   BM_DeltaRuleCpStep/S/W   a row of S tokens, H = 4 heads of dk = dv = 128, W ranks, GDN's scalar gate
//                            (per_channel = 0) or KDA's per-channel one (1). Each iteration times, on the
//                            same inputs:
//     hp_s        head parallel: gdn_chunk_scan over all S tokens for this rank's H/W heads;
//     sp_s        state passing as the layer runs it now: this rank's S/W tokens for all H heads, the
//                 chunks' factors (delta_rule_chunks), the pair from them (delta_rule_summary), the
//                 outputs from the arriving state (delta_rule_apply);
//     identity_s  the form it replaced: gdn_chunk_scan with dk extra value columns started from [0 | I]
//                 (the transition as columns), then the correction S_in^T r_t.
//   Counters: the three times, sp_over_hp and identity_over_hp (the measured ratios: the same tokens x
//   heads per rank, so time ratios are per-token ratios), flops_sp_over_hp (delta_rule_cp_flops' ratio).
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>

#include "kernels/mixers/gdn/gdn_cp_costs.hpp"
#include "kernels/mixers/gdn/gdn_scan.hpp"

using namespace cpbench;

namespace {

double elapsed(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Row {
  at::Tensor q, k, v, g, beta, group;
};

Row draw(int64_t S, int64_t H, int64_t dk, int64_t dv, bool per_channel) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const auto unit = [](const at::Tensor& x) { return x / x.norm(2, -1, true); };
  Row r;
  r.q = unit(at::randn({1, S, H, dk}, opts)) / std::sqrt(static_cast<double>(dk));
  r.k = unit(at::randn({1, S, H, dk}, opts));
  r.v = at::randn({1, S, H, dv}, opts);
  r.g = per_channel ? -at::softplus(at::randn({1, S, H, dk}, opts) - 3) : -at::softplus(at::randn({1, S, H}, opts) - 3);
  r.beta = at::sigmoid(at::randn({1, S, H}, opts));
  r.group = at::zeros({1, S}, at::kLong);
  return r;
}

void BM_DeltaRuleCpStep(benchmark::State& state) {
  const int64_t S = state.range(0), W = state.range(1), H = 4, dk = 128, dv = 128;
  const bool per_channel = state.range(2) != 0;
  at::manual_seed(0);
  const Row hp = draw(S, H / W, dk, dv, per_channel);  // head parallel: every token, H/W heads
  const Row sp = draw(S / W, H, dk, dv, per_channel);  // state passing: S/W tokens, every head
  const at::Tensor arriving = at::randn({1, H, dk, dv}) * 0.1;
  at::NoGradGuard no_grad;

  double t_hp = 0, t_sp = 0, t_id = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(gdn_chunk_scan(hp.q, hp.k, hp.v, hp.g, hp.beta, hp.group).o.data_ptr());
    t_hp += elapsed(t0);

    t0 = std::chrono::steady_clock::now();
    const DeltaRuleChunks chunks = delta_rule_chunks(sp.q, sp.k, sp.v, sp.g, sp.beta, sp.group);
    const DeltaRuleSummary pair = delta_rule_summary(chunks);
    benchmark::DoNotOptimize(pair.transition.data_ptr());
    benchmark::DoNotOptimize(delta_rule_apply(chunks, arriving).o.data_ptr());
    t_sp += elapsed(t0);

    t0 = std::chrono::steady_clock::now();
    const at::Tensor start = at::cat({at::zeros({1, H, dk, dv}), at::eye(dk).expand({1, H, dk, dk})}, -1);
    const at::Tensor v_aug = at::cat({sp.v, at::zeros({1, S / W, H, dk})}, -1);
    const GdnScanResult res = gdn_chunk_scan(sp.q, sp.k, v_aug, sp.g, sp.beta, sp.group, kGdnChunk, start);
    const at::Tensor o = res.o.narrow(-1, 0, dv) + at::einsum("rthk,rhkv->rthv", {res.o.narrow(-1, dv, dk), arriving});
    benchmark::DoNotOptimize(o.data_ptr());
    t_id += elapsed(t0);
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["hp_s"] = t_hp / iters;
  state.counters["sp_s"] = t_sp / iters;
  state.counters["identity_s"] = t_id / iters;
  state.counters["sp_over_hp"] = t_sp / t_hp;
  state.counters["identity_over_hp"] = t_id / t_hp;
  GdnCpShape shape;
  shape.seq_len = S;
  shape.cp = W;
  shape.key_heads = shape.value_heads = H;
  shape.key_head_dim = dk;
  shape.value_head_dim = dv;
  state.counters["flops_sp_over_hp"] =
      delta_rule_cp_flops(GdnCpStrategy::state_passing, shape, kGdnChunk, per_channel) /
      delta_rule_cp_flops(GdnCpStrategy::head_parallel, shape, kGdnChunk, per_channel);
}

BENCHMARK(BM_DeltaRuleCpStep)
    ->ArgNames({"S", "W", "per_channel"})
    ->Args({2048, 4, 0})
    ->Args({16384, 4, 0})
    ->Args({16384, 4, 1})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
