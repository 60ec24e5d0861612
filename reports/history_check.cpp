#include "reports/history_check.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "reports/common_mode.hpp"
#include "reports/compare.hpp"
#include "reports/machine_runs.hpp"
#include "reports/statistics.hpp"
#include "reports/text_format.hpp"

namespace cpbench {
namespace {

std::string short_commit(const std::string& c) { return c.size() > 10 ? c.substr(0, 10) : c; }

// The changes of `points` at the given change points: segment medians, direction, rate drop.
std::vector<SeriesChange> describe(const std::vector<SeriesPoint>& points, const std::vector<ChangePoint>& cps,
                                   bool higher) {
  std::vector<SeriesChange> out;
  for (size_t k = 0; k < cps.size(); ++k) {
    const auto from = static_cast<size_t>(k == 0 ? 0 : cps[k - 1].index);
    const auto at = static_cast<size_t>(cps[k].index);
    const auto to = k + 1 < cps.size() ? static_cast<size_t>(cps[k + 1].index) : points.size();
    std::vector<double> before, after;
    for (size_t i = from; i < at; ++i) before.push_back(points[i].value);
    for (size_t i = at; i < to; ++i) after.push_back(points[i].value);
    SeriesChange c;
    c.index = cps[k].index;
    c.first_run_id = points[at].run_id;
    c.last_commit_before = points[at - 1].commit;
    c.first_commit_after = points[at].commit;
    c.before = stats::median(before);
    c.after = stats::median(after);
    c.change = c.before > 0 ? c.after / c.before - 1 : 0;
    c.rate_drop = higher ? -c.change : (c.after > 0 ? 1 - c.before / c.after : 0);
    c.slowdown = c.rate_drop > 0;
    c.p_value = cps[k].p_value;
    out.push_back(c);
  }
  return out;
}

// The series' resolution (history_check.hpp, "resolution"): its spread about the medians of the segments
// between `ch.changes` (indices into `kept`), the smallest drop the newest min_segment runs can show, and
// the runs a drop of `threshold` needs after it.
// A drop in rate is a log step of -log(1 - drop) whichever way the metric points.
void resolve(CaseHistory& ch, const std::vector<SeriesPoint>& kept, const HistoryCheckOptions& o) {
  const auto N = static_cast<int64_t>(kept.size());
  std::vector<double> residuals;
  for (size_t k = 0; k <= ch.changes.size(); ++k) {
    const int64_t from = k == 0 ? 0 : ch.changes[k - 1].index, to = k < ch.changes.size() ? ch.changes[k].index : N;
    std::vector<double> logs;
    for (int64_t i = from; i < to; ++i) logs.push_back(std::log(kept[static_cast<size_t>(i)].value));
    const double mid = stats::median(logs);
    for (const double l : logs) residuals.push_back(l - mid);
  }
  ch.spread = stats::robust_sd(residuals);
  const double z = stats::normal_quantile(1 - o.change.alpha / 2) + stats::normal_quantile(kResolutionPower);
  const auto step = [&](int64_t n) {
    return z * kNewestRunsFactor * ch.spread *
           std::sqrt(1.0 / static_cast<double>(n) + 1.0 / static_cast<double>(N - n));
  };
  ch.resolution = 1 - std::exp(-step(o.change.min_segment));
  const double needed = -std::log(1 - o.threshold);
  ch.runs_needed = 0;
  for (int64_t n = o.change.min_segment; n <= N - o.change.min_segment; ++n)
    if (step(n) <= needed) {
      ch.runs_needed = n;
      break;
    }
}

// The change points of a case's series without the machine's runs, and its verdict.
void judge_series(CaseHistory& ch, const HistoryCheckOptions& o, bool higher) {
  std::vector<SeriesPoint> kept;
  std::vector<int64_t> where;  // kept[i] is points[where[i]]
  for (size_t i = 0; i < ch.points.size(); ++i)
    if (!ch.points[i].spoiled && !ch.points[i].disturbed) {
      kept.push_back(ch.points[i]);
      where.push_back(static_cast<int64_t>(i));
    }
  ch.too_short = static_cast<int64_t>(kept.size()) < 2 * o.change.min_segment;
  if (ch.too_short) return;
  std::vector<double> logs;
  for (const auto& p : kept) logs.push_back(std::log(p.value));
  std::vector<ChangePoint> cps = e_divisive(logs, o.change);
  // Drop the weakest change below min_effect until every one left is at least that large.
  for (;;) {
    const auto changes = describe(kept, cps, higher);
    size_t weakest = changes.size();
    for (size_t k = 0; k < changes.size(); ++k)
      if (std::abs(changes[k].change) < o.min_effect &&
          (weakest == changes.size() || std::abs(changes[k].change) < std::abs(changes[weakest].change)))
        weakest = k;
    if (weakest == changes.size()) {
      ch.changes = changes;
      break;
    }
    cps.erase(cps.begin() + static_cast<std::ptrdiff_t>(weakest));
  }
  // The nightly question with the power `resolution` assumes: did the newest runs of the newest segment
  // slow down (change_points.hpp, newest_step_up)? Kept when significant and at least min_effect.
  const int64_t from = cps.empty() ? 0 : cps.back().index;
  std::vector<double> slower(logs.begin() + from, logs.end());
  for (double& v : slower) v = higher ? -v : v;
  if (const ChangePoint tail = newest_step_up(slower, o.change); tail.index >= 0 && tail.p_value <= o.change.alpha) {
    auto with = cps;
    with.push_back({from + tail.index, tail.q, tail.p_value});
    auto changes = describe(kept, with, higher);
    if (changes.back().slowdown && std::abs(changes.back().change) >= o.min_effect) {
      changes.back().newest_runs_test = true;
      ch.changes = changes;
    }
  }
  resolve(ch, kept, o);
  for (auto& c : ch.changes) c.index = where[static_cast<size_t>(c.index)];
  if (!ch.changes.empty()) {
    SeriesChange& newest = ch.changes.back();
    newest.regression = newest.slowdown && newest.rate_drop > o.threshold;
    ch.regression = newest.regression;
  }
  ch.cannot_tell = !ch.regression && (ch.runs_needed == 0 || ch.runs_needed > o.change.min_segment);
}

}  // namespace

bool higher_is_better(const std::string& metric, const std::string& unit) {
  if (unit.size() >= 2 && unit.compare(unit.size() - 2, 2, "/s") == 0) return true;
  return metric.find("mfu") != std::string::npos || metric.find("efficiency") != std::string::npos ||
         metric.rfind("busbw_vs_nominal", 0) == 0;
}

int HistoryCheck::exit_status() const {
  if (std::any_of(cases.begin(), cases.end(), [](const CaseHistory& c) { return c.regression; })) return 1;
  return newest_spoiled || std::any_of(cases.begin(), cases.end(),
                                       [](const CaseHistory& c) {
                                         return c.too_short || c.cannot_tell || c.machine || c.against.behind ||
                                                c.against.unconfirmed;
                                       })
             ? kCompareInconclusive
             : 0;
}

HistoryCheck check_history(const std::vector<HistoryRun>& runs, const HistoryCheckOptions& o,
                           const std::string& store) {
  HistoryCheck h;
  h.options = o;
  h.store = store;
  h.runs = static_cast<int64_t>(runs.size());
  std::set<std::string> metrics;
  std::map<std::string, std::string> units;
  std::set<std::string> names;
  for (const auto& run : runs)
    for (const auto& c : run.cases) {
      names.insert(c.name);
      for (const auto& [name, m] : c.metrics) {
        metrics.insert(name);
        units[name] = m.unit;
      }
    }
  if (runs.empty()) throw std::invalid_argument(store + ": the history holds no run yet");
  if (!metrics.count(o.metric)) {
    std::string known;
    for (const auto& m : metrics) known += (known.empty() ? "" : ", ") + m;
    throw std::invalid_argument("--metric " + o.metric + ": no stored run has it (known: " + known + ")");
  }
  std::regex re;
  try {
    re = std::regex(o.filter.empty() ? ".*" : o.filter, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument("--filter '" + o.filter + "': not a regular expression: " + e.what());
  }
  const bool higher = higher_is_better(o.metric, units[o.metric]);
  for (const auto& name : names) {
    if (!std::regex_search(name, re)) continue;
    CaseHistory ch;
    ch.name = name;
    ch.metric = o.metric;
    ch.unit = units[o.metric];
    ch.higher_is_better = higher;
    for (const auto& run : runs)
      for (const auto& c : run.cases) {
        if (c.name != name || c.status != "ok") continue;
        const auto it = c.metrics.find(o.metric);
        if (it == c.metrics.end() || !(it->second.value > 0)) continue;
        const double noise = stats::median_noise(o.metric == "cpu_s" ? c.cpu_s : c.step_s);
        ch.points.push_back({run.id, run.commit, run.started_at, run.label, it->second.value,
                             it->second.value * (1 - noise), it->second.value * (1 + noise), c.busy, false, false});
      }
    h.cases.push_back(std::move(ch));
  }
  if (h.cases.empty()) throw std::invalid_argument("--filter '" + o.filter + "': no stored case matches");
  mark_machine_runs(runs, h);
  mark_disturbed_points(h);
  for (auto& ch : h.cases) judge_series(ch, o, higher);
  mark_shared_steps(h);
  for (size_t i = 0; i < h.cases.size(); ++i) {
    CaseHistory rel = relative_series(h, i);
    if (rel.points.empty()) continue;
    judge_series(rel, o, higher);
    h.cases[i].against = {true, rel.too_short, rel.changes, rel.spread, rel.regression};
  }
  settle_common_mode(h);
  return h;
}

std::string history_check_text(const HistoryCheck& h) {
  std::ostringstream os;
  int regressions = 0, short_series = 0, cannot_tell = 0, machine = 0;
  for (const auto& c : h.cases) {
    const auto spoiled =
        std::count_if(c.points.begin(), c.points.end(), [](const SeriesPoint& p) { return p.spoiled; });
    os << c.name << " (" << c.points.size() << " runs";
    if (spoiled > 0) os << ", " << spoiled << " the machine's left out";
    const auto disturbed =
        std::count_if(c.points.begin(), c.points.end(), [](const SeriesPoint& p) { return p.disturbed && !p.spoiled; });
    if (disturbed > 0) os << ", " << disturbed << " disturbed left out";
    os << "): ";
    if (c.too_short) {
      ++short_series;
      os << "too short to judge (needs " << 2 * h.options.change.min_segment << " runs)\n";
      continue;
    }
    if (c.changes.empty()) os << "no change point";
    for (size_t k = 0; k < c.changes.size(); ++k) {
      const SeriesChange& x = c.changes[k];
      os << (k ? "; " : "") << "change at run " << x.first_run_id << " (commits " << short_commit(x.last_commit_before)
         << ".." << short_commit(x.first_commit_after) << "): " << h.options.metric << " " << num(x.before, 4) << " -> "
         << num(x.after, 4) << " " << c.unit << " (" << percent(x.change, true) << ", p = " << num(x.p_value, 2) << ", "
         << (x.slowdown ? "slower" : "faster") << (x.newest_runs_test ? ", newest-runs test" : "") << ")";
      if (x.common_mode)
        os << " the machine's: " << x.moved << " of " << x.cases
           << " cases slowed with it and against them it did not move; the canary " << percent(x.canary_step, true)
           << (x.last_commit_before == x.first_commit_after ? ", and no commit came between" : "");
      else if (x.machine)
        os << " the machine's: the canary " << percent(x.canary_step, true) << " slower over the same runs, " << x.moved
           << " of " << x.cases << " cases with it";
    }
    if (c.against.judged && !c.against.too_short) {
      os << "; against the other cases (spread " << percent(c.against.spread, false) << "): ";
      if (c.against.changes.empty()) os << "no change point";
      for (size_t k = 0; k < c.against.changes.size(); ++k) {
        const SeriesChange& x = c.against.changes[k];
        os << (k ? ", " : "") << "change at run " << x.first_run_id << " (" << percent(x.change, true)
           << ", p = " << num(x.p_value, 2) << ", " << (x.slowdown ? "slower" : "faster") << ")";
      }
    }
    if (c.regression) {
      ++regressions;
      const SeriesChange& x = c.against_others ? c.against.changes.back() : c.changes.back();
      os << "  REGRESSION: slower by " << percent(x.rate_drop, false) << " since run " << x.first_run_id << " (commit "
         << short_commit(x.first_commit_after) << "), beyond the threshold " << percent(h.options.threshold, false);
      if (c.against_others) os << ", against the other cases at the same runs";
    }
    if (c.against.unconfirmed) {
      const SeriesChange& x = c.changes.back();
      os << "  NOT CONFIRMED: slower by " << percent(x.rate_drop, false) << " since run " << x.first_run_id
         << " in its own series, but not against the other cases (" << c.against.others_moved << " of "
         << c.against.others
         << " others slowed by half as much at the same runs): part of the step is the machine's moving the cases "
            "unequally, and the rest does not clear the spread; rerun";
    }
    if (c.against.behind) {
      const SeriesChange& x = c.against.changes.back();
      os << "  BEHIND THE OTHERS: " << percent(x.rate_drop, false) << " since run " << x.first_run_id
         << " against the other cases (p = " << num(x.p_value, 2) << "), while its own rate moved "
         << percent(-c.against.own_drop, true)
         << " over the same runs: the machine's speed moved with it, so it is not named";
    }
    if (c.machine) {
      ++machine;
      os << "  MACHINE: the newest change came with the machine's (the canary and most cases slowed together): "
            "not a regression, and no verdict (a change landing with it could hide in it); rerun on a quiet machine";
    }
    if (c.cannot_tell) {
      ++cannot_tell;
      os << "  CANNOT TELL: run-to-run spread " << percent(c.spread, false) << "; a "
         << percent(h.options.threshold, false) << " slowdown ";
      if (c.runs_needed > 0)
        os << "shows only " << c.runs_needed << " runs after it, so one in the newest " << c.runs_needed - 1
           << " runs could hide here";
      else
        os << "cannot be told from the spread in " << c.points.size() << " runs";
      os << " (the newest " << h.options.change.min_segment << " runs resolve " << percent(c.resolution, false) << ")";
    }
    os << "\n";
  }
  for (const auto& rc : h.canary)
    if (rc.spoiled)
      os << "the machine's, not a change: run " << rc.run_id << " (" << rc.started_at << "): canary "
         << percent(rc.shift, true) << " slower (memory " << num(rc.memory_s, 3) << " s, compute "
         << num(rc.compute_s, 3) << " s) and " << rc.moved << " of " << rc.cases
         << " cases slower with it; left out of every series\n";
  if (h.newest_spoiled)
    os << "MACHINE: a run among the newest " << h.options.change.min_segment
       << " is the machine's (its canary and most cases slowed together): no verdict on the newest runs; rerun on a "
          "quiet machine\n";
  os << h.cases.size() << " cases over " << h.runs << " runs of " << h.store << ", " << regressions << " regression"
     << (regressions == 1 ? "" : "s") << ", " << short_series << " too short, " << cannot_tell << " cannot tell, "
     << machine << " the machine's (metric " << h.options.metric << ", E-Divisive means, permutation alpha "
     << num(h.options.change.alpha, 3) << " with " << h.options.change.permutations << " permutations, min segment "
     << h.options.change.min_segment << ", min effect " << percent(h.options.min_effect, false) << ", threshold "
     << percent(h.options.threshold, false) << ")\n";
  return os.str();
}

nlohmann::json history_json(const HistoryCheck& h) {
  using nlohmann::json;
  const auto change_json = [](const SeriesChange& x) -> nlohmann::json {
    return {{"index", x.index},
            {"first_run_id", x.first_run_id},
            {"last_commit_before", x.last_commit_before},
            {"first_commit_after", x.first_commit_after},
            {"before", x.before},
            {"after", x.after},
            {"change", x.change},
            {"rate_drop", x.rate_drop},
            {"p_value", x.p_value},
            {"newest_runs_test", x.newest_runs_test},
            {"slowdown", x.slowdown},
            {"regression", x.regression},
            {"canary_step", x.canary_step},
            {"cases_moved", x.moved},
            {"cases_compared", x.cases},
            {"machine", x.machine},
            {"common_mode", x.common_mode}};
  };
  json cases = json::array();
  for (const auto& c : h.cases) {
    json points = json::array(), changes = json::array();
    for (const auto& p : c.points)
      points.push_back({{"run_id", p.run_id},
                        {"commit", p.commit},
                        {"started_at", p.started_at},
                        {"label", p.label},
                        {"value", p.value},
                        {"lo", p.lo},
                        {"hi", p.hi},
                        {"busy", p.busy},
                        {"spoiled", p.spoiled},
                        {"disturbed", p.disturbed}});
    for (const auto& x : c.changes) changes.push_back(change_json(x));
    json against = json::array();
    for (const auto& x : c.against.changes) against.push_back(change_json(x));
    cases.push_back({{"name", c.name},
                     {"metric", c.metric},
                     {"unit", c.unit},
                     {"higher_is_better", c.higher_is_better},
                     {"too_short", c.too_short},
                     {"regression", c.regression},
                     {"spread", c.spread},
                     {"resolution", c.resolution},
                     {"runs_needed", c.runs_needed},
                     {"cannot_tell", c.cannot_tell},
                     {"machine", c.machine},
                     {"points", points},
                     {"changes", changes},
                     {"against_others",
                      {{"judged", c.against.judged},
                       {"too_short", c.against.too_short},
                       {"spread", c.against.spread},
                       {"regression", c.against.regression},
                       {"named", c.against_others},
                       {"own_drop", c.against.own_drop},
                       {"behind", c.against.behind},
                       {"unconfirmed", c.against.unconfirmed},
                       {"changes", against}}}});
  }
  json canary = json::array();
  for (const auto& rc : h.canary)
    canary.push_back({{"run_id", rc.run_id},
                      {"started_at", rc.started_at},
                      {"memory_s", rc.memory_s},
                      {"compute_s", rc.compute_s},
                      {"shift", rc.shift},
                      {"cases", rc.cases},
                      {"moved", rc.moved},
                      {"spoiled", rc.spoiled}});
  return {{"schema", "cpbench-history-check"},
          {"canary", canary},
          {"newest_spoiled", h.newest_spoiled},
          {"canary_shift", kCanaryShift},
          {"case_shift", kCaseShift},
          {"canary_step", kCanaryStep},
          {"disturbed_noise", kDisturbedNoise},
          {"store", h.store},
          {"runs", h.runs},
          {"metric", h.options.metric},
          {"threshold", h.options.threshold},
          {"min_effect", h.options.min_effect},
          {"alpha", h.options.change.alpha},
          {"permutations", h.options.change.permutations},
          {"min_segment", h.options.change.min_segment},
          {"exit_status", h.exit_status()},
          {"cases", cases}};
}

}  // namespace cpbench
