#pragma once
// Seeded nightly histories with known truth for the history check's tests (canary_rule_test.cpp,
// common_mode_test.cpp): 4 cases of step time 0.05 s x the machine's factor x a code change's x lognormal
// noise per run, each with the canary (10 ms memory, 4 ms compute) read as the runner stores it.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "harness/runner/canary.hpp"
#include "reports/history_check.hpp"
#include "reports/history_store.hpp"

namespace cpbench::test {

inline constexpr const char* kCases[] = {"w1", "w2", "w3", "w4"};

struct Nightly {
  int runs = 18;
  int slow_case = 1;      // the case the code change slows (-1: none)
  int slow_from = 12;     // 0-based run where the code change lands
  double slow = 1.15;     // its step time factor
  double all_slow = 1.0;  // a code change that slows every case (from slow_from), the canary untouched
  int machine_from = 99;  // 0-based runs [machine_from, machine_to) where the machine slows every case
  int machine_to = 1 << 20;
  double machine = 1.0;       // that factor on times
  double canary_share = 1.0;  // the share of the machine's slowdown the canary sees (0: the canary misses it)
  double impact_spread = 0;   // case k takes the machine's slowdown x (1 + impact_spread x (k - 1.5) / 1.5)
  int faster_from = 99;       // 0-based run from which the machine is faster for every case (and the canary)
  double faster = 1.0;        // that factor on times
  bool one_build = false;     // every run at one commit ("c0") instead of a commit per run
  double noise = 0.03, canary_noise = 0.03;
};

inline std::vector<HistoryRun> nightly(const Nightly& n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> z(0, 1);
  std::vector<HistoryRun> out;
  for (int i = 0; i < n.runs; ++i) {
    HistoryRun r;
    r.id = i + 1;
    r.commit = n.one_build ? "c0" : "c" + std::to_string(i + 1);
    r.started_at = "run " + std::to_string(i + 1);
    const bool event = i >= n.machine_from && i < n.machine_to;
    const double machine = (event ? n.machine : 1.0) * (i >= n.faster_from ? n.faster : 1.0);
    const double canary = (event ? 1 + (n.machine - 1) * n.canary_share : 1.0) * (i >= n.faster_from ? n.faster : 1.0);
    for (int k = 0; k < 4; ++k) {
      HistoryCase c;
      c.name = kCases[k];
      c.status = "ok";
      const double impact = 1 + n.impact_spread * (k - 1.5) / 1.5;
      const double own = event ? (1 + (n.machine - 1) * impact) * machine / n.machine : machine;
      double step = 0.05 * own * std::exp(n.noise * z(g));
      if (i >= n.slow_from && k == n.slow_case) step *= n.slow;
      if (i >= n.slow_from) step *= n.all_slow;
      c.metrics["tokens_per_s"] = {"tokens_per_s", 1000 / step, "tokens/s", 0};
      c.metrics["step_s"] = {"step_s", step, "s", 0};
      c.step_s = {step * 0.99, step, step * 1.01};
      c.metrics[kCanaryMemoryMetric] = {kCanaryMemoryMetric, 0.010 * canary * std::exp(n.canary_noise * z(g)), "s", 0};
      c.metrics[kCanaryComputeMetric] = {kCanaryComputeMetric, 0.004 * canary * std::exp(n.canary_noise * z(g)), "s",
                                         0};
      r.cases.push_back(c);
    }
    out.push_back(r);
  }
  return out;
}

// The cases called a regression, comma-separated.
inline std::string named(const HistoryCheck& h) {
  std::string s;
  for (const auto& c : h.cases)
    if (c.regression) s += (s.empty() ? "" : ",") + c.name;
  return s;
}

}  // namespace cpbench::test
