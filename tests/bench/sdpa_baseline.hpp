#pragma once
// Which kernels ATen's SDPA may take as the attention benchmark's baselines
// (tests/bench/attention_bench.cpp), as plain functions a CPU unit test checks
// (tests/unit/sdpa_baseline_test.cpp).
//
// x_sdpa compares cpbench's transport at W = 1 with the SDPA a user gets from the same kernels
// cpbench's fused routes call: FlashAttention-2 (`_scaled_dot_product_flash_attention`) for the
// unmasked points and the memory-efficient kernel for the masked ones. Left to itself, torch 2.11 on
// sm90 with cuDNN > 9.15 (the cu130 wheel has 9.19) puts cuDNN's attention first
// (check_prefer_cudnn_attention), typically 1.5-1.8x faster than FA2 on Hopper: x_sdpa would then
// measure cuDNN against FA2, not cpbench's overhead. So the x_sdpa baseline has cuDNN (and FA3) off;
// x_cudnn, SDPA's own choice with torch's defaults, is reported beside it on CUDA.
#include <ATen/Context.h>

namespace cpbench::bench {

struct SdpaBackends {
  bool flash = true, efficient = true, cudnn = true, fa3 = false, math = true;
};

// The x_sdpa baseline: FA2 and the memory-efficient kernel (math stays the last resort SDPA falls to
// when neither takes the inputs, as it does for a user).
[[nodiscard]] inline SdpaBackends flash_baseline() {
  SdpaBackends b;
  b.cudnn = false;
  b.fa3 = false;
  return b;
}

// The backends ATen's context allows now.
[[nodiscard]] inline SdpaBackends current_sdpa_backends() {
  const auto& c = at::globalContext();
  return {c.userEnabledFlashSDP(), c.userEnabledMemEfficientSDP(), c.userEnabledCuDNNSDP(), c.userEnabledFA3SDP(),
          c.userEnabledMathSDP()};
}

inline void set_sdpa_backends(const SdpaBackends& b) {
  auto& c = at::globalContext();
  c.setSDPUseFlash(b.flash);
  c.setSDPUseMemEfficient(b.efficient);
  c.setSDPUseCuDNN(b.cudnn);
  c.setSDPUseFA3(b.fa3);
  c.setSDPUseMath(b.math);
}

// `b` for its lifetime, then what was allowed before.
class ScopedSdpaBackends {
 public:
  explicit ScopedSdpaBackends(const SdpaBackends& b) : before_(current_sdpa_backends()) { set_sdpa_backends(b); }
  ~ScopedSdpaBackends() { set_sdpa_backends(before_); }
  ScopedSdpaBackends(const ScopedSdpaBackends&) = delete;
  ScopedSdpaBackends& operator=(const ScopedSdpaBackends&) = delete;

 private:
  SdpaBackends before_;
};

}  // namespace cpbench::bench
