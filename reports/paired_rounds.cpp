#include "reports/paired_rounds.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "reports/compare.hpp"
#include "reports/statistics.hpp"
#include "reports/text_format.hpp"

namespace cpbench {
namespace {

bool usable(double s) { return s > 0 && std::isfinite(s); }

}  // namespace

PairedVerdict judge_paired(const PairedCase& c, const PairedOptions& o) {
  PairedVerdict v;
  v.name = c.name;
  // A build that passed a round and fails or skips its partner is a regression whatever the timing.
  for (const auto& r : c.pairs)
    if (r.base_status == "ok" && r.new_status != "ok") {
      v.regression = true;
      v.why = (r.new_status == "failed" ? "passed in the base round, fails in the new: "
                                        : "ran in the base round, " + r.new_status + " in the new: ") +
              r.new_reason.substr(0, 200);
      return v;
    }
  std::vector<double> d, base, next;
  for (const auto& r : c.pairs)
    if (r.base_status == "ok" && r.new_status == "ok" && usable(r.base_s) && usable(r.new_s)) {
      d.push_back(std::log(r.new_s / r.base_s));
      base.push_back(r.base_s);
      next.push_back(r.new_s);
    }
  v.pairs = static_cast<int64_t>(d.size());
  if (d.empty()) {
    v.why = "no pair of ok rounds";
    return v;
  }
  v.base_s = stats::median(base);
  v.new_s = stats::median(next);
  const double effect = stats::median(d);
  v.delta = std::exp(-effect) - 1;
  const stats::Interval ci = stats::bootstrap_median_ci(d);
  v.delta_lo = std::exp(-ci.hi) - 1;
  v.delta_hi = std::exp(-ci.lo) - 1;
  // The A/A log-ratios: each block's two middle rounds, one build in adjacent slots (mirrored: their
  // sign is arbitrary).
  std::vector<double> aa;
  for (size_t k = 0; k + 1 < c.pairs.size(); k += 2) {
    const PairedRound& p = c.pairs[k];
    const PairedRound& q = c.pairs[k + 1];
    const bool middle_new = p.base_first;  // ABBA: the Bs are in the middle
    const double x = middle_new ? p.new_s : p.base_s, y = middle_new ? q.new_s : q.base_s;
    const bool ok =
        middle_new ? p.new_status == "ok" && q.new_status == "ok" : p.base_status == "ok" && q.base_status == "ok";
    if (ok && usable(x) && usable(y)) {
      aa.push_back(std::log(y / x));
      aa.push_back(-std::log(y / x));
    }
  }
  v.aa_spread = stats::robust_sd(aa);
  const double floor_log = kFloorK * 1.2533 * v.aa_spread / std::sqrt(static_cast<double>(d.size()));
  v.floor = 1 - std::exp(-floor_log);
  const stats::SignedRank w = stats::wilcoxon_signed_rank(d);
  v.p_value = w.p_greater;
  if (v.delta >= -o.threshold) return v;
  const std::string drop = "rate fell " + percent(-v.delta) + " [" + percent(-v.delta_hi) + ", " +
                           percent(-v.delta_lo) + "] over " + std::to_string(v.pairs) + " pairs (threshold " +
                           percent(o.threshold) + ")";
  const std::string p_text = std::string("Wilcoxon ") + (w.exact ? "exact " : "") + "p = " + num(w.p_greater);
  if (w.p_greater >= o.alpha) {
    v.inconclusive = true;
    v.why = drop + ", but not significant (" + p_text + " >= alpha " + num(o.alpha) + ")";
    return v;
  }
  if (effect <= floor_log) {
    v.inconclusive = true;
    v.why = drop + ", " + p_text + ", but within this session's A/A floor " + percent(v.floor) + " (A/A spread " +
            percent(v.aa_spread) + ")";
    return v;
  }
  v.regression = true;
  v.why = drop + ", " + p_text + " < alpha " + num(o.alpha) + ", beyond the A/A floor " + percent(v.floor);
  return v;
}

std::string paired_table(const std::vector<PairedVerdict>& v, const PairedOptions& o, const std::string& metric) {
  std::ostringstream os;
  const std::string unit = metric == "cpu_s" ? " cpu ms" : " ms";
  os << std::left << std::setw(44) << "case" << std::right << std::setw(12) << ("base" + unit) << std::setw(12)
     << ("new" + unit) << std::setw(9) << "delta" << std::setw(7) << "pairs" << std::setw(9) << "p" << std::setw(8)
     << "floor"
     << "  verdict\n";
  int regressions = 0, inconclusive = 0;
  for (const auto& d : v) {
    os << std::left << std::setw(43) << d.name << " " << std::right << std::fixed << std::setprecision(2)
       << std::setw(12) << d.base_s * 1e3 << std::setw(12) << d.new_s * 1e3 << std::setprecision(1) << std::setw(8)
       << d.delta * 100 << "%" << std::setw(7) << d.pairs << std::setw(9) << std::setprecision(4) << d.p_value
       << std::setprecision(1) << std::setw(7) << d.floor * 100 << "%  "
       << (d.regression     ? "REGRESSION: " + d.why
           : d.inconclusive ? "INCONCLUSIVE: " + d.why
                            : "ok")
       << "\n";
    regressions += d.regression;
    inconclusive += d.inconclusive;
  }
  os << v.size() << " cases compared in paired rounds, " << regressions << " regression"
     << (regressions == 1 ? "" : "s") << ", " << inconclusive << " inconclusive (metric " << metric << ", threshold "
     << std::setprecision(1) << o.threshold * 100 << "%, one-sided Wilcoxon signed-rank alpha " << std::setprecision(3)
     << o.alpha << ", floor " << kFloorK << " x the A/A spread's standard error)\n";
  return os.str();
}

int paired_exit_status(const std::vector<PairedVerdict>& v) {
  if (std::any_of(v.begin(), v.end(), [](const PairedVerdict& d) { return d.regression; })) return 1;
  return std::any_of(v.begin(), v.end(), [](const PairedVerdict& d) { return d.inconclusive; }) ? kCompareInconclusive
                                                                                                : 0;
}

}  // namespace cpbench
