#pragma once
// Which cores a rank's timed steps run on, when cpbench spawned its ranks itself.
//
// Why: two ranks that exchange messages every step, on a machine where something else also runs, can
// end up on one core, taking turns there, while the other core runs the neighbour (most likely the
// scheduler's wake-affine placement: the waker pulls the wakee to its own core; inferred, not traced).
// Measured on the 2-core VM beside a build: rounds of one case landed in two regimes, 20-30 ms a step
// with the ranks' CPU seconds above the wall (two cores) or 45-70 ms with them equal to it (one core),
// drawn afresh in every process.
// One core share per rank makes every round run the way a deployment runs (each rank its own cores).
//
// The launcher gives rank r of n the r-th of n equal contiguous shares of its own affinity mask
// (mask size / n cores each; the remainder unused) in CPBENCH_RANK_CPUS, a Linux cpu list ("0", "2-3").
// n above the mask's size C: rank r shares core r * C / n with its rank-order neighbours (the same
// placement in every invocation, instead of the scheduler's draw).
// Ranks a launcher (torchrun, SLURM) spawned keep the binding their launcher gave them.
#include <sched.h>
#include <sys/types.h>

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace cpbench {

// The CPUs of this process's affinity mask, ascending.
[[nodiscard]] std::vector<int> affinity_cpus();

// The share of `cpus` rank `rank` of `ranks` binds to: cpus[rank * t, (rank + 1) * t), t = |cpus| / ranks;
// when ranks > |cpus|, the one core cpus[rank * |cpus| / ranks]; empty when `cpus` is. Throws
// std::invalid_argument for rank outside [0, ranks).
[[nodiscard]] std::vector<int> rank_core_share(std::span<const int> cpus, int rank, int ranks);

// "0-3,6" <-> {0,1,2,3,6}. parse throws std::invalid_argument naming the text on anything else.
[[nodiscard]] std::string cpu_list_text(std::span<const int> cpus);
[[nodiscard]] std::vector<int> parse_cpu_list(const std::string& text);

// While alive, every thread of this process (each task in /proc/self/task, the intra-op and
// communication threads too) runs on `cpus`; the destructor gives each thread back the mask it had.
// Empty `cpus`: binds nothing. Threads started while it is alive inherit their creator's mask and are
// not restored.
class ThreadBinding {
 public:
  explicit ThreadBinding(std::vector<int> cpus);
  ~ThreadBinding();
  ThreadBinding(const ThreadBinding&) = delete;
  ThreadBinding& operator=(const ThreadBinding&) = delete;
  [[nodiscard]] const std::vector<int>& cpus() const { return cpus_; }
  // Whether the calling thread is bound (false for an empty share, or a share outside this process's
  // allowed CPUs, e.g. a cgroup cpuset: sched_setaffinity refused it and nothing changed).
  [[nodiscard]] bool bound() const { return bound_; }

 private:
  std::vector<int> cpus_;
  bool bound_ = false;
  std::vector<std::pair<pid_t, cpu_set_t>> saved_;
};

}  // namespace cpbench
