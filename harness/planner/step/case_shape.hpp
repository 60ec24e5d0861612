#pragma once
// What every component of a case reads (internal to harness/planner/step/): the model, the cluster, the
// degrees and the training options, and the per-GPU sizes derived from them once.
#include <algorithm>
#include <cstdint>

#include "harness/planner/presets.hpp"
#include "harness/planner/step/constants.hpp"
#include "harness/planner/step/step_types.hpp"

namespace cpbench::plan::step {

struct CaseShape {
  const ModelShape& model;
  const Cluster& cluster;
  Parallel par;
  Training train;
  int64_t seq_len = 0;
  const StepConstants& k = constants();

  // Tokens of one micro-batch a CP rank holds (b S / cp); sequence parallel splits them by tp again.
  [[nodiscard]] double row_tokens() const {
    return static_cast<double>(train.micro_batch) * static_cast<double>(seq_len) / static_cast<double>(par.cp);
  }
  [[nodiscard]] double sp_tokens() const { return row_tokens() / static_cast<double>(par.tp); }
  // A GPU's share of `layers` (its pipeline stage).
  [[nodiscard]] double stage(double layers) const { return layers / static_cast<double>(par.pp); }
  [[nodiscard]] double microbatches() const { return static_cast<double>(train.microbatches); }
  // Forward-pass equivalents of a GEMM per step: forward 1 + backward 2 (+ 1 when fully recomputed).
  [[nodiscard]] double gemm_passes() const { return train.recompute == Recompute::full ? 4.0 : 3.0; }
  // Forward passes (1, or 2 under full recompute): what forward-only communication repeats.
  [[nodiscard]] double forward_passes() const { return train.recompute == Recompute::full ? 2.0 : 1.0; }
  // Achieved dense GEMM FLOP/s of the precision (FP8 GEMMs; bf16 on a GPU without FP8 is refused earlier).
  [[nodiscard]] double gemm_rate() const {
    return train.precision == Precision::fp8 ? cluster.fp8_flops * k.gemm_efficiency_fp8 : bf16_gemm_rate();
  }
  [[nodiscard]] double bf16_gemm_rate() const {
    const bool ampere = cluster.name.rfind("a100", 0) == 0;
    return cluster.bf16_flops * (ampere ? k.gemm_efficiency_bf16_a100 : k.gemm_efficiency_bf16);
  }
  [[nodiscard]] double hbm() const { return cluster.kernel.hbm_bandwidth > 0 ? cluster.kernel.hbm_bandwidth : 2e12; }
};

// Exposed part of a transfer of t seconds that a stack hides `overlap` of behind `window` seconds of
// compute: max((1 - overlap) t, t - window), never below 0.
[[nodiscard]] inline double exposed(double t, double overlap, double window) {
  const double e = std::max((1 - overlap) * t, t - window);
  return e > 0 ? e : 0.0;
}

}  // namespace cpbench::plan::step
