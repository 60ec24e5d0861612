#include "reports/common_mode.hpp"

#include <algorithm>
#include <map>

#include "reports/machine_runs.hpp"
#include "reports/statistics.hpp"

namespace cpbench {
namespace {

bool kept(const SeriesPoint& p) { return !p.spoiled && !p.disturbed; }

// Each case's level: the median of its kept values (0 when none is kept).
std::vector<double> levels(const HistoryCheck& h) {
  std::vector<double> out;
  for (const auto& c : h.cases) {
    std::vector<double> v;
    for (const auto& p : c.points)
      if (kept(p)) v.push_back(p.value);
    out.push_back(v.empty() ? 0.0 : stats::median(v));
  }
  return out;
}

}  // namespace

CaseHistory relative_series(const HistoryCheck& h, size_t i) {
  const std::vector<double> level = levels(h);
  // Per run, the other cases' kept values over their levels. Both directions of metric divide the same way:
  // a machine twice as slow halves a rate and doubles a time, and the common factor follows either.
  std::map<int64_t, std::vector<double>> others;
  for (size_t j = 0; j < h.cases.size(); ++j) {
    if (j == i || level[j] <= 0) continue;
    for (const auto& p : h.cases[j].points)
      if (kept(p)) others[p.run_id].push_back(p.value / level[j]);
  }
  CaseHistory rel;  // a fresh verdict on the same points
  rel.name = h.cases[i].name;
  rel.metric = h.cases[i].metric;
  rel.unit = h.cases[i].unit;
  rel.higher_is_better = h.cases[i].higher_is_better;
  rel.points = h.cases[i].points;
  bool any = false;
  for (auto& p : rel.points) {
    const auto it = others.find(p.run_id);
    if (it == others.end() || static_cast<int64_t>(it->second.size()) < kCommonModeOthers) {
      p.disturbed = true;  // no common factor: left out of the relative series
      continue;
    }
    const double common = stats::median(it->second);
    p.value /= common;
    p.lo /= common;
    p.hi /= common;
    any = any || kept(p);
  }
  if (!any) rel.points.clear();
  return rel;
}

void settle_common_mode(HistoryCheck& h) {
  for (auto& ch : h.cases) {
    AgainstOthers& a = ch.against;
    if (!a.judged || a.too_short) continue;
    if (a.regression && !ch.regression) {
      // The case fell behind the others while its own series could not say so (its spread, or a machine
      // that sped every case up at the same runs). It must have slowed beyond the threshold in its own metric
      // too over the same runs: a case the machine slowed less (or more) than the others looks fast (slow)
      // against them while it lasts, and the relative series' segments can end there; and a change that sped
      // up every other case leaves this one behind unmoved.
      if (a.changes.back().p_value > kAgainstOthersAlpha * h.options.change.alpha) continue;
      CaseHistory view;
      view.points = ch.points;
      view.changes = a.changes;
      const ChangeRuns runs = change_runs(view, view.changes.size() - 1);
      const double b = median_over(ch, runs.before), after = median_over(ch, runs.after);
      if (b <= 0 || after <= 0) continue;
      const double own = time_step(ch, b, after);
      a.own_drop = own / (1 + own);  // its own drop in rate, as the threshold counts it
      a.behind = a.own_drop <= h.options.threshold;
      if (a.behind) continue;
      ch.regression = true;
      ch.against_others = true;
      ch.cannot_tell = false;
      ch.machine = false;
      continue;
    }
    if (!ch.regression || a.regression || ch.changes.empty()) continue;
    // Its own series slowed and its relative series did not: did the others and the canary move with it? If
    // not, it is not confirmed.
    SeriesChange& x = ch.changes.back();
    const ChangeRuns runs = change_runs(ch, ch.changes.size() - 1);
    const double own = time_step(ch, x.before, x.after);
    int64_t cases = 0, moved = 0;
    for (const auto& other : h.cases) {
      if (&other == &ch) continue;
      const double b = median_over(other, runs.before), after = median_over(other, runs.after);
      if (b <= 0 || after <= 0) continue;
      ++cases;
      moved += time_step(other, b, after) >= own / 2;
    }
    // Shared by the others, so not this case's; the machine's when the canary agrees or when no commit came
    // between the runs (nothing in the code could have moved them). A new commit and a quiet canary: a change
    // on a path every case runs, a regression.
    const bool one_commit = !x.last_commit_before.empty() && x.last_commit_before == x.first_commit_after;
    const bool shared = cases > 0 && 2 * moved >= cases;
    if (!shared) {
      // No other case moved with it: its own step stands, whatever the relative series' power (the others'
      // noise widens that series' spread). Some did, but not half: part of its step was the machine's
      // moving the cases unequally, and what is left does not clear the relative spread.
      if (moved == 0) continue;
      a.unconfirmed = true;
      a.others = cases;
      a.others_moved = moved;
      x.regression = false;
      ch.regression = false;
      continue;
    }
    if (x.canary_step < own / 2 && !one_commit) continue;
    x.cases = cases + 1;
    x.moved = moved + 1;
    x.machine = x.common_mode = true;
    x.regression = false;
    ch.regression = false;
    ch.machine = true;
  }
}

}  // namespace cpbench
