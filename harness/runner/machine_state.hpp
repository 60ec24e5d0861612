#pragma once
// The machine around a measurement: how many cores this process may use, how many threads each rank
// should run, and whether anything outside this run competes for the cores while it measures.
#include <cstdint>
#include <string>

#include "reports/result.hpp"

namespace cpbench {

// Cores this process may run on (its CPU affinity mask; hardware_concurrency where unreadable), >= 1.
[[nodiscard]] int64_t usable_cores();

// Intra-op threads per rank so that `local_ranks` ranks on this machine never oversubscribe it:
// usable_cores() / local_ranks, at least 1.
[[nodiscard]] int64_t threads_per_rank(int64_t local_ranks);

// OMP_WAIT_POLICY as this process sees it ("" when unset).
[[nodiscard]] std::string omp_wait_policy();

// Runnable threads (state R) of processes outside this process's process group, excluding the parent
// (the launcher). A spawned run's ranks share one process group, so this counts what competes with it.
[[nodiscard]] int64_t others_runnable();

// /proc/loadavg's 1-minute average (0 where unreadable).
[[nodiscard]] double load_average_1m();

// CPU 0's current frequency in MHz (0 where unreadable, e.g. in most VMs).
[[nodiscard]] double cpu_mhz();

// Accumulates samples of others_runnable() into a MachineState.
class MachineMonitor {
 public:
  MachineMonitor();
  void sample();
  [[nodiscard]] MachineState finish() const;

 private:
  MachineState state_;
  int64_t sum_ = 0;
};

// The noise verdict of a measurement: noisy when other runnable threads averaged at least half a core
// while it ran, or when the median's noise stayed above max_noise at the stop. Sets verdict and
// verdict_reason.
void judge_noise(MeasurementRecord& m);

}  // namespace cpbench
