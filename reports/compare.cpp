#include "reports/compare.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "reports/statistics.hpp"
#include "reports/text_format.hpp"

namespace cpbench {

const std::vector<std::string>& compare_metrics() {
  static const std::vector<std::string> known = {"tokens_per_s", "cpu_s"};
  return known;
}

bool Comparison::regressed() const {
  return std::any_of(cases.begin(), cases.end(), [](const CaseDelta& d) { return d.regression; });
}

bool Comparison::inconclusive() const {
  return std::any_of(cases.begin(), cases.end(), [](const CaseDelta& d) { return d.inconclusive; });
}

int Comparison::exit_status() const {
  if (regressed()) return 1;
  return inconclusive() ? kCompareInconclusive : 0;
}

namespace {
// The metric's value for the table: tokens/s, or the median CPU seconds per step.
double display_value(const RunResult& r, const std::string& metric) {
  if (metric == "cpu_s") return stats::median(r.measurement.cpu_s);
  const Metric* m = r.metric("tokens_per_s");
  return m ? m->value : 0.0;
}

// The samples judged: per step, seconds (wall time of the group's step, or its CPU seconds). The rate
// scales with 1 / these, so the ratio of their medians is the ratio of the rates.
const std::vector<double>& judged_samples(const RunResult& r, const std::string& metric) {
  return metric == "cpu_s" ? r.measurement.cpu_s : r.measurement.step_s;
}

// Judges two ok results from their samples (opts.threshold etc.); sets the delta's verdict fields.
void judge_samples(const RunResult& b, const RunResult& n, const CompareOptions& opts, CaseDelta& d) {
  const auto& bs = judged_samples(b, opts.metric);
  const auto& ns = judged_samples(n, opts.metric);
  d.base_n = static_cast<int64_t>(bs.size());
  d.new_n = static_cast<int64_t>(ns.size());
  d.base_tps = display_value(b, opts.metric);
  d.new_tps = display_value(n, opts.metric);
  const double bm = stats::median(bs), nm = stats::median(ns);
  if (bm > 0 && nm > 0) d.delta = bm / nm - 1.0;  // rate ratio - 1
  else if (opts.metric == "tokens_per_s" && d.base_tps > 0) d.delta = (d.new_tps - d.base_tps) / d.base_tps;
  d.noise = std::max(stats::median_noise(bs), stats::median_noise(ns));
  if (d.delta >= -opts.threshold) return;  // not slower by what matters: ok whatever the evidence
  const std::string what = opts.metric == "cpu_s" ? "CPU work rate" : "throughput";
  const std::string drop = what + " fell " + percent(-d.delta) + " (threshold " + percent(opts.threshold) + ")";
  const auto inconclusive = [&](const std::string& why) {
    d.inconclusive = true;
    d.why = drop + ", but " + why;
  };
  if (d.base_n == 0 || d.new_n == 0)
    return inconclusive(opts.metric == "cpu_s" ? "no cpu_s samples on a side (CUDA cases and reports before them carry none)"
                                               : "no samples on a side (a report older than schema 4)");
  const double min_p = stats::mann_whitney_min_p(static_cast<size_t>(d.base_n), static_cast<size_t>(d.new_n));
  if (d.base_n < opts.min_samples || d.new_n < opts.min_samples || min_p >= opts.alpha)
    return inconclusive("too few samples (" + std::to_string(d.base_n) + " and " + std::to_string(d.new_n) +
                        ": the smallest p they can give is " + num(min_p) + ", alpha " + num(opts.alpha) + ")");
  // Evidence widens the floor the drop must clear; it vetoes nothing (docs/measurement.md).
  const double drop_frac = -d.delta;
  std::string floor_why;
  const auto widen = [&](double f, const std::string& why) {
    if (f > d.floor) {
      d.floor = f;
      floor_why = why;
    }
  };
  if (b.measurement.machine.busy() || n.measurement.machine.busy())
    widen(opts.busy_floor, std::string(b.measurement.machine.busy() ? "the base" : "the new") +
                               " run was measured on a busy machine, whose runs land up to " + percent(opts.busy_floor) +
                               " apart (--busy-floor)");
  const double nb = stats::median_noise(bs), nn = stats::median_noise(ns);
  // The 95% half-width of the difference of two independent medians is the root of the sum of their
  // squares, not their sum: asking the two intervals not to overlap is a test at about 99.4% for equal
  // widths (Schenker & Gentleman, Am. Stat. 2001), which left a doubled report on a busy machine
  // inconclusive (55.6% floor against a 45% drop; docs/measurement.md).
  if (std::max(nb, nn) > opts.max_noise)
    widen(std::hypot(nb, nn), "the medians' noise (" + percent(nb) + " and " + percent(nn) +
                                  ", the difference's 95% half-width " + percent(std::hypot(nb, nn)) +
                                  ") is above --max-noise " + percent(opts.max_noise));
  const stats::MannWhitney u = stats::mann_whitney(bs, ns);
  d.p_value = u.p_two_sided;
  const std::string p_text = std::string("Mann-Whitney ") + (u.exact ? "exact " : "") + "p = " + num(u.p_two_sided);
  if (u.p_two_sided >= opts.alpha)
    return inconclusive("not significant (" + p_text + " >= alpha " + num(opts.alpha) + ")");
  if (drop_frac <= d.floor) return inconclusive("within the floor " + percent(d.floor) + ": " + floor_why);
  d.regression = true;
  d.why = drop + ", " + p_text + " < alpha " + num(opts.alpha);
  if (d.floor > 0) d.why += ", beyond the floor " + percent(d.floor);
}
// The pair's run-to-run noise from every judged case's log-ratio of the medians (kMinCasesForSpread or
// more): a regression within between_run_k x their robust spread becomes inconclusive.
void apply_between_run_floor(Comparison& c) {
  std::vector<double> logs;
  for (const auto& d : c.cases)
    if (d.base_status == "ok" && d.new_status == "ok" && d.base_n > 0 && d.new_n > 0 && d.delta > -1)
      logs.push_back(std::log1p(d.delta));
  if (logs.size() < kMinCasesForSpread || c.options.between_run_k <= 0) return;
  const double mid = stats::median(logs);
  std::vector<double> dev;
  for (double x : logs) dev.push_back(std::abs(x - mid));
  const double floor_log = c.options.between_run_k * 1.4826 * stats::median(dev);
  const double floor = 1 - std::exp(-floor_log);  // as a drop in tokens/s
  for (auto& d : c.cases) {
    d.between_run = floor;
    if (!d.regression || d.new_status != "ok" || d.base_status != "ok") continue;
    if (-std::log1p(d.delta) > floor_log) continue;
    d.regression = false;
    d.inconclusive = true;
    d.why += ", but within this pair's run-to-run noise: a drop up to " + percent(floor) + " (" +
             num(c.options.between_run_k, 2) + " x the robust spread of the " + std::to_string(logs.size()) +
             " cases' changes)";
  }
}

// Medians over a report's ok cases of its canary's two parts; {0, 0} without a canary.
std::pair<double, double> canary_of(const Report& r) {
  std::vector<double> memory, compute;
  for (const auto& x : r.results) {
    const CanaryReading& k = x.measurement.canary;
    if (x.status != "ok" || k.repeats <= 0 || !(k.memory_s > 0) || !(k.compute_s > 0)) continue;
    memory.push_back(k.memory_s);
    compute.push_back(k.compute_s);
  }
  if (memory.empty()) return {0, 0};
  return {stats::median(memory), stats::median(compute)};
}

// The canary rule (Comparison::machine): a common-mode shift is the machine's, not a regression.
void apply_canary_rule(Comparison& c, const Report& base, const Report& next) {
  std::tie(c.base_canary_memory_s, c.base_canary_compute_s) = canary_of(base);
  std::tie(c.new_canary_memory_s, c.new_canary_compute_s) = canary_of(next);
  for (const auto& d : c.cases)
    if (d.base_status == "ok" && d.new_status == "ok" && d.base_n > 0 && d.new_n > 0) {
      ++c.judged;
      c.moved += d.delta < -kCaseShift;
    }
  if (c.base_canary_memory_s <= 0 || c.new_canary_memory_s <= 0) return;
  c.canary_shift = std::max(c.new_canary_memory_s / c.base_canary_memory_s,
                            c.new_canary_compute_s / c.base_canary_compute_s) - 1;
  c.machine = c.canary_shift > kCanaryShift && c.judged > 0 && 2 * c.moved >= c.judged;
  if (!c.machine) return;
  for (auto& d : c.cases) {
    if (!d.regression || d.new_status != "ok" || d.base_status != "ok") continue;
    d.regression = false;
    d.inconclusive = true;
    d.why += ", but the machine's: the canary ran " + percent(c.canary_shift) + " slower and " +
             std::to_string(c.moved) + " of " + std::to_string(c.judged) + " cases slowed with it";
  }
}

}  // namespace

Comparison compare_reports(const Report& base, const Report& next, const CompareOptions& opts) {
  if (std::find(compare_metrics().begin(), compare_metrics().end(), opts.metric) == compare_metrics().end()) {
    std::string known;
    for (const auto& m : compare_metrics()) known += (known.empty() ? "" : ", ") + m;
    throw std::invalid_argument("--metric " + opts.metric + ": not a metric compare judges (known: " + known + ")");
  }
  std::map<std::string, const RunResult*> b, n;
  for (const auto& r : base.results) b[r.name] = &r;
  for (const auto& r : next.results) n[r.name] = &r;
  Comparison c;
  c.options = opts;
  for (const auto& [name, br] : b) {
    CaseDelta d;
    d.name = name;
    d.base_status = br->status;
    auto it = n.find(name);
    if (it == n.end()) {
      // A gate that only looks at the cases still there would pass a run that dropped the slow ones.
      d.new_status = "missing";
      d.regression = true;
      d.why = "missing from the new report";
      c.cases.push_back(d);
      continue;
    }
    const RunResult* nr = it->second;
    d.new_status = nr->status;
    if (br->status == "ok" && nr->status == "ok") judge_samples(*br, *nr, opts, d);
    if (br->status == "ok" && nr->status == "failed") {
      d.regression = true;
      d.inconclusive = false;
      d.why = "passed before, fails now: " + nr->reason.substr(0, 200);
    }
    if (br->status == "ok" && nr->status == "skipped") {
      d.regression = true;
      d.inconclusive = false;
      d.why = "ran before, skipped now: " + nr->reason.substr(0, 200);
    }
    c.cases.push_back(d);
  }
  for (const auto& [name, r] : n)
    if (!b.count(name)) c.only_in_new.push_back(name);
  apply_between_run_floor(c);
  apply_canary_rule(c, base, next);
  return c;
}

std::string comparison_table(const Comparison& c) {
  std::ostringstream os;
  const bool cpu = c.options.metric == "cpu_s";
  os << std::left << std::setw(52) << "case" << std::right << std::setw(13) << (cpu ? "base cpu ms" : "base tok/s")
     << std::setw(13) << (cpu ? "new cpu ms" : "new tok/s") << std::setw(9) << "delta" << std::setw(9) << "n" << std::setw(8) << "p" << "  verdict\n";
  int regressions = 0, inconclusive = 0;
  for (const auto& d : c.cases) {
    os << std::left << std::setw(51) << d.name << " " << std::right << std::fixed << std::setprecision(0) << std::setw(13);
    const double scale = cpu ? 1e3 : 1.0;
    if (cpu) os << std::setprecision(1);
    if (d.base_tps > 0) os << d.base_tps * scale; else os << d.base_status;
    os << std::setw(13);
    if (d.new_tps > 0) os << d.new_tps * scale; else os << d.new_status;
    os << std::setprecision(1) << std::setw(8) << d.delta * 100 << "%" << std::setw(9)
       << (std::to_string(d.base_n) + "/" + std::to_string(d.new_n)) << std::setw(8) << std::setprecision(3)
       << d.p_value << "  " << (d.regression ? "REGRESSION: " + d.why : d.inconclusive ? "INCONCLUSIVE: " + d.why : "ok")
       << "\n";
    regressions += d.regression;
    inconclusive += d.inconclusive;
  }
  for (const auto& n : c.only_in_new) os << n << ": only in the new report\n";
  if (c.base_canary_memory_s > 0 && c.new_canary_memory_s > 0)
    os << (c.machine ? "MACHINE: " : "") << "canary (memory, compute) " << num(c.base_canary_memory_s * 1e3, 3) << ", "
       << num(c.base_canary_compute_s * 1e3, 3) << " ms -> " << num(c.new_canary_memory_s * 1e3, 3) << ", "
       << num(c.new_canary_compute_s * 1e3, 3) << " ms (" << percent(c.canary_shift, true) << " slower); " << c.moved
       << " of " << c.judged << " cases slower by more than " << percent(kCaseShift)
       << (c.machine ? ": a common-mode shift, the machine's, not a regression\n" : "\n");
  os << c.cases.size() << " cases compared, " << regressions << " regression" << (regressions == 1 ? "" : "s") << ", "
     << inconclusive << " inconclusive (metric " << c.options.metric << ", threshold " << std::setprecision(1)
     << c.options.threshold * 100 << "%, Mann-Whitney alpha " << std::setprecision(3) << c.options.alpha
     << ", busy-machine floor " << std::setprecision(1) << c.options.busy_floor * 100 << "%, median noise over "
     << c.options.max_noise * 100 << "% widens the floor)\n";
  return os.str();
}

Report pool_runs(const std::vector<Report>& runs) {
  Report out;
  if (runs.empty()) return out;
  out = runs.front();
  out.results.clear();
  std::map<std::string, size_t> where;
  const auto rank = [](const std::string& status) { return status == "failed" ? 2 : status == "skipped" ? 1 : 0; };
  for (const auto& run : runs)
    for (const auto& r : run.results) {
      auto it = where.find(r.name);
      if (it == where.end()) {
        where[r.name] = out.results.size();
        out.results.push_back(r);
        continue;
      }
      RunResult& p = out.results[it->second];
      if (rank(r.status) > rank(p.status)) {
        p.status = r.status;
        p.reason = r.reason;
      }
      auto& s = p.measurement.step_s;
      s.insert(s.end(), r.measurement.step_s.begin(), r.measurement.step_s.end());
      auto& cs = p.measurement.cpu_s;
      cs.insert(cs.end(), r.measurement.cpu_s.begin(), r.measurement.cpu_s.end());
      if (r.measurement.noisy() && !p.measurement.noisy()) {
        p.measurement.verdict = r.measurement.verdict;
        p.measurement.verdict_reason = r.measurement.verdict_reason;
      }
    }
  // tokens/s of the pooled samples: the first run's value scaled by the ratio of the medians.
  for (auto& p : out.results)
    for (auto& m : p.metrics)
      if (m.name == "tokens_per_s" && !p.measurement.step_s.empty()) {
        const Metric* step = p.metric("step_s");
        if (step && step->value > 0) m.value *= step->value / stats::median(p.measurement.step_s);
      }
  out.total_cases = static_cast<int64_t>(out.results.size());
  return out;
}

}  // namespace cpbench
