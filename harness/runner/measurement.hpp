#pragma once
// How a case's step is timed, apart from what the step does (as nvbench keeps `state` and `measure`
// apart from the benchmark): warm-up, timed steps until the median is known well enough or the time is
// up, every sample kept, the machine watched meanwhile. The case runner hands it a step and a way to
// agree with the other ranks; it hands back a MeasurementRecord.
#include <cstdint>
#include <functional>

#include "reports/result.hpp"

namespace cpbench {

struct MeasureSpec {
  int64_t warmup = 0;        // untimed steps first
  int64_t iters = 1;         // the minimum of timed steps
  double max_noise = 0.05;   // stop once the median's relative noise (stats::median_noise) is below this
  double max_time_s = 0.5;   // ... or once this many seconds of timed steps have passed
  int64_t max_iters = 1000;  // ... or after this many timed steps
  double peak_flops = 0;     // FLOP/s per rank overriding the device table / CPU probe (0: none)
  bool collectives = true;   // time the step's largest collectives alone (comm_bench.hpp) after the case
};
// The noise rule needs this many samples before it may stop a measurement (fewer: too few to judge).
inline constexpr int64_t kMinSamplesForNoise = 5;
// A timed measurement (max_time_s > 0) keeps at least this many samples even when the time is up: the
// regression gate's exact Mann-Whitney test can reach p = 2/252 = 0.008 on 5 against 5 (3 against 3
// cannot go below 0.1; docs/measurement.md). max_time_s = 0 (a correctness sweep) times exactly iters.
inline constexpr int64_t kMinSamplesForGate = 5;

// One step on this rank; returns its seconds (iteration < 0: a warm-up step).
using TimedStep = std::function<double(int64_t iteration)>;
// The CP group's maximum of a value: a collective, every rank of the group calls it once per step.
using GroupMax = std::function<double(double)>;

struct MeasureHooks {
  double slowdown = 0;   // the CPBENCH_FAULT=slow hook: each timed step is lengthened by this fraction of itself
  bool monitor = false;  // sample the machine (machine_state.hpp) before and after every timed step
};

// Runs spec.warmup untimed steps, then timed steps until (after at least spec.iters, and at least
// kMinSamplesForNoise) the noise rule holds, or spec.max_time_s of the group's step time has passed
// (after at least kMinSamplesForGate), or spec.max_iters. A sample is the CP group's step time (its slowest rank's), so every rank sees the
// same samples and stops after the same step. Fills step_s, noise, stopped_by, the spec's values, the
// slowdown and (with monitor) the machine state and verdict; threads and wait policy are the caller's.
[[nodiscard]] MeasurementRecord measure_steps(const MeasureSpec& spec, const TimedStep& step, const GroupMax& group_max,
                                              const MeasureHooks& hooks);

// This process's CPU seconds so far (CLOCK_PROCESS_CPUTIME_ID: every thread, intra-op threads
// included). Around a step it measures the rank's work, not the time other processes held the cores.
[[nodiscard]] double process_cpu_seconds();

}  // namespace cpbench
