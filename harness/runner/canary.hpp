#pragma once
// The canary: a small fixed workload every rank times right after a case's timed steps, on the cores
// those steps ran on (MongoDB's performance CI runs such canaries beside its tests and discounts the runs
// whose canaries moved). Its code never changes with cpbench's, so a canary that slows down says the
// machine slowed down: a neighbour's memory traffic, a throttled or stolen vCPU. Two parts, because a
// shared VM can slow one without the other (issue 39: the GEMM peak probe read the same while every case
// slowed 5x):
//   memory   one pass summing a 32 MiB buffer (allocated and touched once per process): memory-bound
//            beyond a core's L2 share, it sees bandwidth and last-level-cache contention
//   compute  8 independent multiply-add chains of 2^20 steps each, in registers: it sees the core's
//            speed and any time the hypervisor takes away
// Each is timed `repeats` times and the median kept (a few ms each; ~30 ms per case in all). The reading
// goes into the case's MeasurementRecord (report.json measurement.canary) and, through it, into the run
// history (metrics canary_memory_s, canary_compute_s), where `history check` and `compare` use it to
// tell the machine from a change (docs/measurement.md, "The canary").
#include <cstdint>

#include "reports/result.hpp"

namespace cpbench {

inline constexpr int64_t kCanaryRepeats = 3;

// Times both parts `repeats` times (>= 1) on the calling thread; medians in seconds.
[[nodiscard]] CanaryReading read_canary(int64_t repeats = kCanaryRepeats);

}  // namespace cpbench
