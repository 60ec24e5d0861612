#pragma once
// The points of BM_AttentionW1 (tests/bench/attention_bench.cpp), as plain data a CPU unit test reads
// too (tests/unit/gpu_check_test.cpp holds scripts/gpu-check.sh's throughput budget against them).
#include <cstdint>
#include <vector>

namespace cpbench::bench {

// One point: {S, H, D, KV, doc, bf16} (the benchmark's ArgNames).
using AttentionPoint = std::vector<int64_t>;

// On a GPU: the Llama-3-8B attention (32 query heads, 8 kv heads of 128, bf16); causal up to 32K,
// document where SDPA's whole bool mask still fits (16K: 256 MiB). No 128K point: at 4.9e14 FLOP per
// forward + backward (1.5-2 s on FlashAttention-2) it is a measurement (scenarios/gpu_throughput.yaml),
// not a check that has to fit in gpu-check.sh's budget.
[[nodiscard]] inline std::vector<AttentionPoint> gpu_attention_points() {
  std::vector<AttentionPoint> p;
  for (int64_t s : {4096, 8192, 16384, 32768}) p.push_back({s, 32, 128, 8, 0, 1});
  for (int64_t s : {8192, 16384}) p.push_back({s, 32, 128, 8, 1, 1});
  return p;
}
// Timed iterations per point on a GPU (each after one untimed warm-up of every side).
inline constexpr int64_t kGpuIterations = 4;

// On the CPU: float32 and bf16 (computed in float32 by the CPU kernels, as in a CP step), causal
// 4K-32K and documents 4K and 16K, heads shrunk so one iteration stays within seconds on 2 cores; the
// smoke run (tests/CMakeLists.txt) keeps only the 4K points.
[[nodiscard]] inline std::vector<AttentionPoint> cpu_attention_points() {
  std::vector<AttentionPoint> p;
  for (int64_t bf16 : {0, 1}) {
    p.push_back({4096, 4, 32, 4, 0, bf16});
    p.push_back({16384, 1, 32, 1, 0, bf16});
    p.push_back({32768, 1, 32, 1, 0, bf16});
    p.push_back({4096, 4, 32, 4, 1, bf16});
    p.push_back({16384, 1, 32, 1, 1, bf16});
  }
  return p;
}
inline constexpr int64_t kCpuIterations = 2;

// The transports BM_AttentionW1 runs (one BENCHMARK_CAPTURE each in attention_bench.cpp).
[[nodiscard]] inline std::vector<const char*> attention_bench_transports() { return {"allgather", "ring", "a2a"}; }

}  // namespace cpbench::bench
