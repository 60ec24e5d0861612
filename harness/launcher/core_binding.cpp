#include "harness/launcher/core_binding.hpp"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace cpbench {

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> rank_core_share(std::span<const int> cpus, int rank, int ranks) {
  if (rank < 0 || rank >= ranks)
    throw std::invalid_argument("rank_core_share: rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(ranks) + ")");
  const auto n = static_cast<int>(cpus.size());
  if (n == 0) return {};
  // More ranks than cores: rank r shares core r * n / ranks with its neighbours in rank order, so that
  // every invocation places them alike (left to the scheduler, four ranks on two busy cores landed
  // 1.75x apart between two runs of one build: docs/measurement.md).
  if (ranks > n) return {cpus[static_cast<size_t>(static_cast<int64_t>(rank) * n / ranks)]};
  const int t = n / ranks;
  const auto first = cpus.begin() + static_cast<std::ptrdiff_t>(rank) * t;
  return {first, first + t};
}

std::string cpu_list_text(std::span<const int> cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("cpu list \"" + text + "\": " + why + " (expected e.g. \"0\", \"2-3\", \"0-1,4\")");
  };
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const auto number = [&](const std::string& s) {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || errno != 0 || v < 0 || v >= CPU_SETSIZE) throw bad("\"" + s + "\" is not a CPU");
      return static_cast<int>(v);
    };
    const size_t dash = item.find('-');
    const int lo = number(item.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) throw bad("range " + item + " runs backwards");
    for (int c = lo; c <= hi; ++c) {
      if (!out.empty() && c <= out.back()) throw bad("CPUs not ascending");
      out.push_back(c);
    }
    pos = comma + 1;
  }
  return out;
}

namespace {

std::vector<pid_t> process_threads() {
  std::vector<pid_t> tids;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return {static_cast<pid_t>(::syscall(SYS_gettid))};
  while (const dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  ::closedir(dir);
  return tids;
}

}  // namespace

ThreadBinding::ThreadBinding(std::vector<int> cpus) : cpus_(std::move(cpus)) {
  if (cpus_.empty()) return;
  const auto self = static_cast<pid_t>(::syscall(SYS_gettid));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus_) CPU_SET(c, &set);
  for (const pid_t tid : process_threads()) {
    cpu_set_t old;
    CPU_ZERO(&old);
    // A thread that exited since the listing (ESRCH) is skipped, as is one the kernel refuses: binding
    // is a measurement aid, never a reason to fail a run.
    if (::sched_getaffinity(tid, sizeof old, &old) != 0) continue;
    if (::sched_setaffinity(tid, sizeof set, &set) != 0) continue;
    saved_.emplace_back(tid, old);
    if (tid == self) bound_ = true;
  }
}

ThreadBinding::~ThreadBinding() {
  for (const auto& [tid, old] : saved_) ::sched_setaffinity(tid, sizeof old, &old);
}

}  // namespace cpbench
