#include "kernels/attention/intra_op_warmup.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

// at::parallel_for's OpenMP backend is a pragma compiled here: without -fopenmp every range would run on
// the calling thread (CMakeLists.txt, CPBENCH_OPENMP_SOURCES).
#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error "this file must be compiled with -fopenmp (CMakeLists.txt: CPBENCH_OPENMP_SOURCES)"
#endif

namespace cpbench::kernels {

namespace {

// One call of each function at::vml hands to MKL (ATen/cpu/vml.h, IMPLEMENT_VML_MKL), in float and
// double, on tensors far below the grain size (so on this thread only).
void touch_vml() {
  for (const at::ScalarType dt : {at::kFloat, at::kDouble}) {
    const at::Tensor x = at::full({64}, 0.5, at::TensorOptions().dtype(dt));
    (void)x.exp(), (void)x.log(), (void)x.log10(), (void)x.log2(), (void)x.sqrt(), (void)x.tanh();
    (void)x.erf(), (void)x.erfc(), (void)x.erfinv(), (void)x.sin(), (void)x.cos(), (void)x.tan();
    (void)x.acos(), (void)x.asin(), (void)x.atan(), (void)x.trunc();
  }
}

std::atomic<int64_t> warmed_threads{0};

}  // namespace

bool intra_op_warmup_skipped() {
  static const bool skip = [] {
    const char* v = std::getenv("CPBENCH_SKIP_MATH_WARMUP");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return skip;
}

int64_t warm_intra_op_math() {
  const int64_t n = at::get_num_threads();
  if (intra_op_warmup_skipped() || n <= warmed_threads.load(std::memory_order_acquire)) return n;
  touch_vml();
  // Grain 1 over n indices: one index, hence one first call, per intra-op thread.
  at::parallel_for(0, n, 1, [](int64_t, int64_t) { touch_vml(); });
  warmed_threads.store(n, std::memory_order_release);
  return n;
}

}  // namespace cpbench::kernels
