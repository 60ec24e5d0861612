#include "reports/compare.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

namespace cpbench {

bool Comparison::regressed() const {
  return std::any_of(cases.begin(), cases.end(), [](const CaseDelta& d) { return d.regression; });
}

Comparison compare_reports(const Report& base, const Report& next, double threshold) {
  std::map<std::string, const RunResult*> b, n;
  for (const auto& r : base.results) b[r.name] = &r;
  for (const auto& r : next.results) n[r.name] = &r;
  Comparison c;
  for (const auto& [name, br] : b) {
    auto it = n.find(name);
    if (it == n.end()) {
      c.only_in_base.push_back(name);
      continue;
    }
    const RunResult* nr = it->second;
    CaseDelta d;
    d.name = name;
    d.base_status = br->status;
    d.new_status = nr->status;
    const Metric* bm = br->metric("tokens_per_s");
    const Metric* nm = nr->metric("tokens_per_s");
    if (bm && nm && bm->value > 0 && br->status == "ok" && nr->status == "ok") {
      d.base_tps = bm->value;
      d.new_tps = nm->value;
      d.delta = (nm->value - bm->value) / bm->value;
      // Noise-aware: a drop within what either run's own step times varied by is not a regression.
      d.allowed = std::max({threshold, bm->spread, nm->spread});
      if (d.delta < -d.allowed) {
        d.regression = true;
        std::ostringstream os;
        os << std::fixed << std::setprecision(1) << "throughput fell " << -d.delta * 100 << "% (allowed "
           << d.allowed * 100 << "%)";
        d.why = os.str();
      }
    }
    if (br->status == "ok" && nr->status == "failed") {
      d.regression = true;
      d.why = "passed before, fails now: " + nr->reason.substr(0, 200);
    }
    c.cases.push_back(d);
  }
  for (const auto& [name, r] : n)
    if (!b.count(name)) c.only_in_new.push_back(name);
  return c;
}

std::string comparison_table(const Comparison& c, double threshold) {
  std::ostringstream os;
  os << std::left << std::setw(52) << "case" << std::right << std::setw(13) << "base tok/s" << std::setw(13)
     << "new tok/s" << std::setw(9) << "delta" << std::setw(9) << "allowed" << "  verdict\n";
  int regressions = 0;
  for (const auto& d : c.cases) {
    os << std::left << std::setw(51) << d.name << " " << std::right << std::fixed << std::setprecision(0) << std::setw(13);
    if (d.base_tps > 0) os << d.base_tps; else os << d.base_status;
    os << std::setw(13);
    if (d.new_tps > 0) os << d.new_tps; else os << d.new_status;
    os << std::setprecision(1) << std::setw(8) << d.delta * 100 << "%" << std::setw(8) << d.allowed * 100 << "%"
       << "  " << (d.regression ? "REGRESSION: " + d.why : "ok") << "\n";
    regressions += d.regression;
  }
  for (const auto& n : c.only_in_base) os << n << ": only in the base report\n";
  for (const auto& n : c.only_in_new) os << n << ": only in the new report\n";
  os << c.cases.size() << " cases compared, " << regressions << " regression" << (regressions == 1 ? "" : "s")
     << " (threshold " << std::setprecision(1) << threshold * 100 << "%, or the measured spread when larger)\n";
  return os.str();
}

}  // namespace cpbench
