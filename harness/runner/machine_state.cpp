#include "harness/runner/machine_state.hpp"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

namespace cpbench {

int64_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int64_t threads_per_rank(int64_t local_ranks) { return std::max<int64_t>(1, usable_cores() / std::max<int64_t>(1, local_ranks)); }

int64_t reference_threads(int64_t local_ranks, int64_t cp) {
  const int64_t waiting = std::clamp<int64_t>(cp, 1, std::max<int64_t>(1, local_ranks));
  return std::min<int64_t>(std::max<int64_t>(1, usable_cores()), threads_per_rank(local_ranks) * waiting);
}

ScopedIntraOpThreads::ScopedIntraOpThreads(int64_t threads) : previous_(at::get_num_threads()) {
  at::set_num_threads(static_cast<int>(std::max<int64_t>(1, threads)));
}
ScopedIntraOpThreads::~ScopedIntraOpThreads() { at::set_num_threads(previous_); }

std::string omp_wait_policy() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  return p ? p : "";
}

namespace {

// Field 3 (state) and field 5 (pgrp) of a /proc/.../stat line; the command name in field 2 may hold
// spaces and parentheses, so parsing starts after its last ')'.
bool stat_state_and_group(const std::string& path, char& state, long& pgrp) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  long ppid = 0;
  rest >> state >> ppid >> pgrp;
  return static_cast<bool>(rest);
}

bool all_digits(const char* s) {
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

}  // namespace

int64_t others_runnable() {
  const long own_group = static_cast<long>(getpgrp());
  const long parent = static_cast<long>(getppid());
  int64_t n = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return 0;
  while (const dirent* e = readdir(proc)) {
    if (!all_digits(e->d_name)) continue;
    const std::string pid = e->d_name;
    if (std::stol(pid) == parent) continue;
    char state = 0;
    long group = 0;
    if (!stat_state_and_group("/proc/" + pid + "/stat", state, group) || group == own_group) continue;
    // Threads: a multi-threaded process can be running while its main thread sleeps.
    DIR* tasks = opendir(("/proc/" + pid + "/task").c_str());
    if (!tasks) continue;
    while (const dirent* t = readdir(tasks)) {
      if (!all_digits(t->d_name)) continue;
      char ts = 0;
      long tg = 0;
      if (stat_state_and_group("/proc/" + pid + "/task/" + t->d_name + "/stat", ts, tg) && ts == 'R') ++n;
    }
    closedir(tasks);
  }
  closedir(proc);
  return n;
}

double load_average_1m() {
  std::ifstream in("/proc/loadavg");
  double v = 0;
  in >> v;
  return in ? v : 0.0;
}

double cpu_mhz() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq");
  double khz = 0;
  in >> khz;
  return in ? khz / 1000.0 : 0.0;
}

MachineMonitor::MachineMonitor() {
  state_.cores = usable_cores();
  state_.load1_before = load_average_1m();
  state_.cpu_mhz = cpu_mhz();
}

void MachineMonitor::sample() {
  const int64_t n = others_runnable();
  sum_ += n;
  state_.others_runnable_max = std::max(state_.others_runnable_max, n);
  ++state_.samples;
}

MachineState MachineMonitor::finish() const {
  MachineState s = state_;
  s.load1_after = load_average_1m();
  s.others_runnable_mean = s.samples > 0 ? static_cast<double>(sum_) / static_cast<double>(s.samples) : 0.0;
  return s;
}

void judge_noise(MeasurementRecord& m) {
  std::ostringstream why;
  why << std::setprecision(2);
  if (m.machine.busy()) {
    why << m.machine.others_runnable_mean << " runnable threads outside this run on average (max "
        << m.machine.others_runnable_max << ") on " << m.machine.cores << " cores while measuring";
  } else if (m.step_s.size() > 1 && m.noise > m.max_noise) {
    why << "the median's noise " << m.noise * 100 << "% stayed above max_noise " << m.max_noise * 100 << "% ("
        << m.stopped_by << " after " << m.step_s.size() << " timed steps)";
  }
  m.verdict_reason = why.str();
  m.verdict = m.verdict_reason.empty() ? "quiet" : "noisy";
}

}  // namespace cpbench
