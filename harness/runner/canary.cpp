#include "harness/runner/canary.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "reports/statistics.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

constexpr size_t kMemoryFloats = size_t{8} << 20;  // 32 MiB
constexpr int64_t kComputeSteps = int64_t{1} << 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The buffer lives as long as the rank process: allocating and first-touching it per case would time the
// kernel's page faults, not the machine's memory.
const std::vector<float>& memory_buffer() {
  static const std::vector<float> buffer = [] {
    std::vector<float> b(kMemoryFloats);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 1024) * 0.001f;
    return b;
  }();
  return buffer;
}

double memory_pass() {
  const std::vector<float>& b = memory_buffer();
  const auto t0 = std::chrono::steady_clock::now();
  // Four partial sums so the adds are not one serial chain (the pass stays bound by the loads).
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 3 < b.size(); i += 4) {
    s0 += b[i];
    s1 += b[i + 1];
    s2 += b[i + 2];
    s3 += b[i + 3];
  }
  volatile float sink = s0 + s1 + s2 + s3;
  (void)sink;
  return seconds_since(t0);
}

double compute_pass() {
  const auto t0 = std::chrono::steady_clock::now();
  volatile double seed = 1.0000001;  // read once: the compiler cannot fold the chains
  double x[8];
  for (int k = 0; k < 8; ++k) x[k] = seed + k * 1e-9;
  const double a = seed * 0.9999999, c = 1e-7;
  for (int64_t i = 0; i < kComputeSteps; ++i)
    for (double& v : x) v = v * a + c;
  volatile double sink = x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
  (void)sink;
  return seconds_since(t0);
}

}  // namespace

CanaryReading read_canary(int64_t repeats) {
  CP_CHECK(repeats >= 1, "canary: repeats must be >= 1, got ", repeats);
  (void)memory_buffer();  // the first call pays for the allocation outside the timing
  std::vector<double> memory, compute;
  for (int64_t r = 0; r < repeats; ++r) {
    memory.push_back(memory_pass());
    compute.push_back(compute_pass());
  }
  CanaryReading out;
  out.memory_s = stats::median(memory);
  out.compute_s = stats::median(compute);
  out.repeats = repeats;
  return out;
}

}  // namespace cpbench
