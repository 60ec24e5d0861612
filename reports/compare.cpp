#include "reports/compare.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

namespace cpbench {

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
std::string pct(double fraction) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << fraction * 100 << "%";
  return os.str();
}
}  // namespace

Comparison compare_reports(const Report& base, const Report& next, double threshold, double max_noise) {
  std::map<std::string, const RunResult*> b, n;
  for (const auto& r : base.results) b[r.name] = &r;
  for (const auto& r : next.results) n[r.name] = &r;
  Comparison c;
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
    const Metric* bm = br->metric("tokens_per_s");
    const Metric* nm = nr->metric("tokens_per_s");
    if (bm && nm && bm->value > 0 && br->status == "ok" && nr->status == "ok") {
      d.base_tps = bm->value;
      d.new_tps = nm->value;
      d.delta = (nm->value - bm->value) / bm->value;
      // Noise-aware, but capped: a drop within what the runs' own step times varied by is not a
      // regression, unless they varied so much that no drop could ever be seen.
      d.spread = std::max(bm->spread, nm->spread);
      d.allowed = std::max(threshold, std::min(max_noise, d.spread));
      if (d.delta < -d.allowed) {
        d.regression = true;
        d.why = "throughput fell " + pct(-d.delta) + " (allowed " + pct(d.allowed) + ")";
      } else if (d.spread > max_noise && d.delta < -threshold) {
        // Slower by more than the threshold, within what the runs varied by, but they varied more
        // than the cap: this drop may be noise or a regression.
        d.inconclusive = true;
        d.why = "spread " + pct(d.spread) + " exceeds --max-noise " + pct(max_noise) + ": too noisy to tell";
      }
    }
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
  return c;
}

std::string comparison_table(const Comparison& c, double threshold, double max_noise) {
  std::ostringstream os;
  os << std::left << std::setw(52) << "case" << std::right << std::setw(13) << "base tok/s" << std::setw(13)
     << "new tok/s" << std::setw(9) << "delta" << std::setw(9) << "allowed" << "  verdict\n";
  int regressions = 0, inconclusive = 0;
  for (const auto& d : c.cases) {
    os << std::left << std::setw(51) << d.name << " " << std::right << std::fixed << std::setprecision(0) << std::setw(13);
    if (d.base_tps > 0) os << d.base_tps; else os << d.base_status;
    os << std::setw(13);
    if (d.new_tps > 0) os << d.new_tps; else os << d.new_status;
    os << std::setprecision(1) << std::setw(8) << d.delta * 100 << "%" << std::setw(8) << d.allowed * 100 << "%"
       << "  " << (d.regression ? "REGRESSION: " + d.why : d.inconclusive ? "INCONCLUSIVE: " + d.why : "ok") << "\n";
    regressions += d.regression;
    inconclusive += d.inconclusive;
  }
  for (const auto& n : c.only_in_new) os << n << ": only in the new report\n";
  os << c.cases.size() << " cases compared, " << regressions << " regression" << (regressions == 1 ? "" : "s") << ", "
     << inconclusive << " inconclusive (threshold " << std::setprecision(1) << threshold * 100
     << "%, or the measured spread when larger, up to " << max_noise * 100 << "%)\n";
  return os.str();
}

}  // namespace cpbench
