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

// Intra-op threads for the first rank of a CP group of `cp` ranks while it alone runs the single-rank
// references: the group's other ranks on this machine (at most local_ranks - 1 of them) only wait, so
// it takes their share too. threads_per_rank(local_ranks) * min(cp, local_ranks), at most
// usable_cores(); with dp > 1, each group's first rank takes its own group's share.
[[nodiscard]] int64_t reference_threads(int64_t local_ranks, int64_t cp);

// Sets at::set_num_threads for its lifetime and restores the previous count.
class ScopedIntraOpThreads {
 public:
  explicit ScopedIntraOpThreads(int64_t threads);
  ~ScopedIntraOpThreads();
  ScopedIntraOpThreads(const ScopedIntraOpThreads&) = delete;
  ScopedIntraOpThreads& operator=(const ScopedIntraOpThreads&) = delete;

 private:
  int previous_;
};

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
