#include "reports/machine_runs.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "reports/result.hpp"
#include "reports/statistics.hpp"

namespace cpbench {

// The canary rule (machine_runs.hpp, "the machine"): per run, the canary's medians over its cases and
// its shift against the runs' median; the cases that moved with it; the spoiled runs' points marked.
void mark_machine_runs(const std::vector<HistoryRun>& runs, HistoryCheck& h) {
  std::vector<RunCanary> canary;
  std::vector<double> memory_all, compute_all;
  for (const auto& run : runs) {
    RunCanary rc;
    rc.run_id = run.id;
    rc.started_at = run.started_at;
    std::vector<double> memory, compute;
    for (const auto& c : run.cases) {
      const auto m = c.metrics.find(kCanaryMemoryMetric), k = c.metrics.find(kCanaryComputeMetric);
      if (m == c.metrics.end() || k == c.metrics.end() || !(m->second.value > 0) || !(k->second.value > 0)) continue;
      memory.push_back(m->second.value);
      compute.push_back(k->second.value);
    }
    if (!memory.empty()) {
      rc.memory_s = stats::median(memory);
      rc.compute_s = stats::median(compute);
      memory_all.push_back(rc.memory_s);
      compute_all.push_back(rc.compute_s);
    }
    canary.push_back(rc);
  }
  if (memory_all.empty()) return;
  // The quiet machine's canary: the lower quartile of the runs' readings, so that a machine slow for many
  // of the runs (a busy week) does not become the baseline the slow runs are measured against.
  const auto lower_quartile = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 4];
  };
  const double memory_base = lower_quartile(memory_all), compute_base = lower_quartile(compute_all);
  // Each case's own level: the median of its points over every run.
  std::vector<double> level(h.cases.size(), 0);
  for (size_t i = 0; i < h.cases.size(); ++i) {
    std::vector<double> v;
    for (const auto& p : h.cases[i].points) v.push_back(p.value);
    level[i] = stats::median(v);
  }
  for (auto& rc : canary) {
    if (rc.memory_s <= 0) continue;
    rc.shift = std::max(rc.memory_s / memory_base, rc.compute_s / compute_base) - 1;
    for (size_t i = 0; i < h.cases.size(); ++i)
      for (const auto& p : h.cases[i].points) {
        if (p.run_id != rc.run_id || level[i] <= 0) continue;
        ++rc.cases;
        const double drop = h.cases[i].higher_is_better ? 1 - p.value / level[i] : 1 - level[i] / p.value;
        rc.moved += drop > kCaseShift;
      }
    rc.spoiled = rc.shift > kCanaryShift && rc.cases > 0 && 2 * rc.moved >= rc.cases;
    if (!rc.spoiled) continue;
    for (auto& ch : h.cases)
      for (auto& p : ch.points) p.spoiled = p.spoiled || p.run_id == rc.run_id;
  }
  // A change in the newest runs needs min_segment of them after it: one of those spoiled, and nothing
  // honest can be said about them.
  const size_t newest =
      std::min(canary.size(), static_cast<size_t>(std::max<int64_t>(1, h.options.change.min_segment)));
  for (size_t i = canary.size() - newest; i < canary.size(); ++i)
    h.newest_spoiled = h.newest_spoiled || canary[i].spoiled;
  h.canary = std::move(canary);
}

// The shared-step rule (machine_runs.hpp, "a shared step"), after every case is judged: each slowdown
// change is compared with the canary's and the other cases' medians over the same runs, which a sustained
// shift of the machine moves together while a code change moves the cases alone.
ChangeRuns change_runs(const CaseHistory& ch, size_t k) {
  const auto from = static_cast<size_t>(k == 0 ? 0 : ch.changes[k - 1].index);
  const auto at = static_cast<size_t>(ch.changes[k].index);
  const size_t to = k + 1 < ch.changes.size() ? static_cast<size_t>(ch.changes[k + 1].index) : ch.points.size();
  ChangeRuns r;
  for (size_t i = from; i < to; ++i)
    if (!ch.points[i].spoiled) (i < at ? r.before : r.after).insert(ch.points[i].run_id);
  return r;
}

double median_over(const CaseHistory& c, const std::set<int64_t>& runs) {
  std::vector<double> v;
  for (const auto& p : c.points)
    if (!p.spoiled && runs.count(p.run_id)) v.push_back(p.value);
  return v.empty() ? 0.0 : stats::median(v);
}

double time_step(const CaseHistory& c, double before, double after) {
  return c.higher_is_better ? before / after - 1 : after / before - 1;
}

void mark_shared_steps(HistoryCheck& h) {
  if (h.canary.empty()) return;
  std::map<int64_t, const RunCanary*> canary;
  for (const auto& rc : h.canary)
    if (rc.memory_s > 0) canary[rc.run_id] = &rc;
  for (auto& ch : h.cases) {
    for (size_t k = 0; k < ch.changes.size(); ++k) {
      SeriesChange& x = ch.changes[k];
      if (!x.slowdown) continue;
      const ChangeRuns runs = change_runs(ch, k);
      std::vector<double> mb, cb, ma, ca;
      for (const int64_t r : runs.before)
        if (canary.count(r)) mb.push_back(canary[r]->memory_s), cb.push_back(canary[r]->compute_s);
      for (const int64_t r : runs.after)
        if (canary.count(r)) ma.push_back(canary[r]->memory_s), ca.push_back(canary[r]->compute_s);
      if (mb.empty() || ma.empty()) continue;
      x.canary_step = std::max(stats::median(ma) / stats::median(mb), stats::median(ca) / stats::median(cb)) - 1;
      x.cases = x.moved = 0;
      for (const auto& other : h.cases) {
        const double b = median_over(other, runs.before), a = median_over(other, runs.after);
        if (b <= 0 || a <= 0) continue;
        ++x.cases;
        x.moved += time_step(other, b, a) >= x.canary_step / 2;
      }
      const double own = time_step(ch, x.before, x.after);
      x.machine = x.canary_step >= std::max(kCanaryStep, own / 2) && 2 * x.moved >= x.cases;
    }
    if (!ch.changes.empty() && ch.changes.back().machine) {
      ch.changes.back().regression = false;
      ch.regression = false;
      ch.machine = true;
    }
  }
}

void mark_disturbed_points(HistoryCheck& h) {
  for (auto& ch : h.cases) {
    // A point's noise, from its band: hi = value x (1 + noise).
    const auto noise = [](const SeriesPoint& p) { return p.value > 0 ? p.hi / p.value - 1 : 0.0; };
    std::vector<double> all;
    for (const auto& p : ch.points) all.push_back(noise(p));
    const double usual = stats::median(all);
    for (auto& p : ch.points) p.disturbed = noise(p) > std::max(kDisturbedNoise * usual, h.options.threshold);
  }
}

}  // namespace cpbench
