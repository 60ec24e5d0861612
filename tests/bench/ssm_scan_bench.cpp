// Selective-scan micro-benchmark (Google Benchmark): the Mamba layer's chunked SSD scan against the
// quadratic form it replaced (kernels/mixers/mamba/mamba.hpp), forward pass, float32 on CPU.
//   BM_SsmScan/S   one row of S tokens, one head (P = 16, N = 16, G = 1), one document reset at S/3
//                  and a run of pad slots (dt = 0) at S/2. Each iteration times the chunked scan
//                  (chunk kSsmChunk) and, where its [S, S] matrices fit (S <= 16384: ~1 GiB each in
//                  float32, a few alive at once), the quadratic form on the same inputs.
//                  Counters: chunked_s, quadratic_s (per iteration), x_quadratic = quadratic /
//                  chunked time (target >= 20 at S = 16384), rel_diff = max |chunked - quadratic| /
//                  max |quadratic| (float32 rounding; float64 equality is tests/unit/mamba_test.cpp's),
//                  GFLOPs = chunked FLOPs / s (ssm_scan_flops).
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <chrono>

#include "kernels/mixers/mamba/mamba.hpp"

using namespace cpbench;

namespace {

constexpr int64_t kQuadraticMaxS = 16384;

double seconds(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_SsmScan(benchmark::State& state) {
  const int64_t S = state.range(0), R = 1, H = 1, P = 16, G = 1, N = 16;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  at::manual_seed(0);
  const at::Tensor x = at::randn({R, S, H, P}, opts);
  at::Tensor dt = at::softplus(at::randn({R, S, H}, opts) - 2);
  dt.narrow(1, S / 2, 16).zero_();
  const at::Tensor A = -at::exp(at::randn({H}, opts) * 0.5);
  const at::Tensor B = at::randn({R, S, G, N}, opts), C = at::randn({R, S, G, N}, opts);
  const at::Tensor D = at::ones({H}, opts);
  at::Tensor group = at::zeros({R, S}, at::kLong);
  group.narrow(1, S / 3, S - S / 3).fill_(1);
  const bool quadratic = S <= kQuadraticMaxS;

  double t_chunked = 0, t_quadratic = 0, rel_diff = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    const at::Tensor y = ssm_scan(x, dt, A, B, C, D, group);
    t_chunked += seconds(t0);
    if (quadratic) {
      t0 = std::chrono::steady_clock::now();
      const at::Tensor yq = ssm_scan_quadratic(x, dt, A, B, C, D, group);
      t_quadratic += seconds(t0);
      rel_diff = ((y - yq).abs().max() / yq.abs().max()).item<double>();
    }
    benchmark::DoNotOptimize(y.data_ptr());
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["chunked_s"] = t_chunked / iters;
  state.counters["GFLOPs"] = ssm_scan_flops(S, kSsmChunk, P, N) * static_cast<double>(S * H * R) * iters /
                             t_chunked / 1e9;
  if (quadratic) {
    state.counters["quadratic_s"] = t_quadratic / iters;
    state.counters["x_quadratic"] = t_quadratic / t_chunked;
    state.counters["rel_diff"] = rel_diff;
  }
}

BENCHMARK(BM_SsmScan)
    ->ArgName("S")
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Arg(8192)
    ->Arg(16384)
    ->Arg(32768)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

}  // namespace
