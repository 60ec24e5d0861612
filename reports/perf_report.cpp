#include "reports/perf_report.hpp"

#include <algorithm>
#include <sstream>

#include "reports/statistics.hpp"
#include "reports/text_format.hpp"

namespace cpbench {
namespace {

std::string verdict_text(const MeasurementRecord& m) {
  if (m.verdict.empty()) return "";
  return m.verdict + (m.verdict_reason.empty() ? "" : ": " + m.verdict_reason);
}

std::string pct_text(const RunResult& r, const char* name) {
  const Metric* m = r.metric(name);
  return m ? num(m->value * 100, 3) + "%" : "";
}

std::string busbw_text(const RunResult& r) {
  std::string s;
  for (const auto& c : r.collectives) {
    if (!s.empty()) s += "; ";
    s += c.collective + " " + num(static_cast<double>(c.bytes), 3) + " B: " + num(c.busbw / 1e9, 3) + " GB/s";
    if (r.peak.link_bandwidth > 0) s += " (" + num(c.busbw / r.peak.link_bandwidth * 100, 2) + "% of nominal)";
  }
  return s;
}

// Every timed step's sample as a dot on one line per case (x: seconds, shared scale), the median as
// a bar: how the samples spread, and whether two cases' distributions overlap.
std::string svg_samples(const Report& rep) {
  double lo = 1e300, hi = 0;
  for (const auto& r : rep.results)
    for (double v : r.measurement.step_s) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (hi <= 0) return "";
  lo = std::max(0.0, lo * 0.95);
  hi *= 1.05;
  const int W = 900, label = 330, row = 16;
  std::vector<const RunResult*> rows;
  for (const auto& r : rep.results)
    if (!r.measurement.step_s.empty()) rows.push_back(&r);
  const int H = static_cast<int>(rows.size()) * row + 24;
  const auto x = [&](double v) { return label + (W - label - 10) * (v - lo) / (hi - lo); };
  std::ostringstream os;
  os << "<svg width='" << W << "' height='" << H << "' style='font-size:10px'>";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RunResult& r = *rows[i];
    const double y = static_cast<double>(i) * row + 10;
    const bool noisy = r.measurement.noisy();
    os << "<text x='0' y='" << y + 4 << "'>" << html_escape(r.name) << "</text>";
    for (double v : r.measurement.step_s)
      os << "<circle cx='" << x(v) << "' cy='" << y << "' r='2.5' fill='" << (noisy ? "#d62728" : "#1f77b4")
         << "' fill-opacity='0.5'/>";
    const double med = stats::median(r.measurement.step_s);
    os << "<line x1='" << x(med) << "' x2='" << x(med) << "' y1='" << y - 6 << "' y2='" << y + 6
       << "' stroke='black' stroke-width='2'/>";
  }
  const double axis_y = static_cast<double>(rows.size()) * row + 16;
  os << "<text x='" << label << "' y='" << axis_y << "'>" << num(lo * 1e3) << " ms</text><text x='" << W - 60
     << "' y='" << axis_y << "'>" << num(hi * 1e3) << " ms</text></svg>";
  return os.str();
}

}  // namespace

std::string markdown_performance(const Report& rep) {
  std::ostringstream os;
  os << "\n## Performance (median per training step; docs/measurement.md)\n\n"
        "| case | step (s) | attention (s) | ssm (s) | other (s) | attention TFLOP/s | model TFLOP/s | MFU | peak "
        "(source) | kernel efficiency | samples | noise | verdict |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|\n";
  for (const auto& r : rep.results) {
    if (!r.metric("step_s")) continue;
    const MeasurementRecord& m = r.measurement;
    os << "| " << r.name << " | " << metric_text(r, "step_s") << " | " << metric_text(r, "attention_s") << " | "
       << metric_text(r, "ssm_s") << " | " << metric_text(r, "other_s") << " | "
       << metric_text(r, "attention_tflops_per_s", 4) << " | " << metric_text(r, "model_tflops_per_s", 4) << " | "
       << pct_text(r, "mfu") << " | " << num(r.peak.flops / 1e12, 4) << " TFLOP/s (" << r.peak.flops_source << ") | "
       << metric_text(r, "attention_kernel_efficiency") << " | " << m.step_s.size() << " (" << m.stopped_by << ") | "
       << num(m.noise * 100, 2) << "% | " << verdict_text(m) << " |\n";
  }
  os << "\n## Communication measured alone (nccl-tests style: busbw = algbw x bus factor)\n\n"
        "| case | collectives (busbw, share of the link's nominal) | link nominal (source) | threads/rank (rank 0's cores) | "
        "OMP wait | load 1m before/after | other runnable (mean/max) |\n|---|---|---|---:|---|---|---|\n";
  for (const auto& r : rep.results) {
    if (!r.metric("step_s")) continue;
    const MachineState& ms = r.measurement.machine;
    os << "| " << r.name << " | " << busbw_text(r) << " | " << num(r.peak.link_bandwidth / 1e9, 3) << " GB/s ("
       << r.peak.link_source << ") | " << r.measurement.threads_per_rank
       << (r.measurement.rank_cpus.empty() ? std::string() : " (CPU " + r.measurement.rank_cpus + ")") << " | " << r.measurement.omp_wait_policy
       << " | " << num(ms.load1_before, 3) << " / " << num(ms.load1_after, 3) << " | " << num(ms.others_runnable_mean, 2)
       << " / " << ms.others_runnable_max << " |\n";
  }
  return os.str();
}

std::string html_performance(const Report& rep) {
  std::ostringstream os;
  os << "<h2>Performance (median per training step; docs/measurement.md)</h2><table><tr><th>case</th><th>step s</th>"
        "<th>attention s</th><th>other s</th><th>attention TFLOP/s</th><th>model TFLOP/s</th><th>MFU</th>"
        "<th>peak</th><th>kernel efficiency</th><th>busbw vs nominal</th><th>samples</th><th>noise</th><th>verdict</th></tr>";
  for (const auto& r : rep.results) {
    if (!r.metric("step_s")) continue;
    const MeasurementRecord& m = r.measurement;
    os << "<tr><td>" << html_escape(r.name) << "</td><td>" << metric_text(r, "step_s") << "</td><td>"
       << metric_text(r, "attention_s") << "</td><td>" << metric_text(r, "other_s") << "</td><td>"
       << metric_text(r, "attention_tflops_per_s", 4) << "</td><td>" << metric_text(r, "model_tflops_per_s", 4)
       << "</td><td>" << pct_text(r, "mfu") << "</td><td style='text-align:left'>" << num(r.peak.flops / 1e12, 4)
       << " TFLOP/s (" << html_escape(r.peak.flops_source) << ")</td><td>"
       << metric_text(r, "attention_kernel_efficiency") << "</td><td style='text-align:left'>"
       << html_escape(busbw_text(r)) << "</td><td>" << m.step_s.size() << "</td><td>" << num(m.noise * 100, 2)
       << "%</td><td class='" << (m.noisy() ? "failed" : "ok") << "' style='text-align:left'>"
       << html_escape(verdict_text(m)) << "</td></tr>";
  }
  os << "</table><h2>Every timed step (dots; bar = median; red = a noisy case)</h2>" << svg_samples(rep);
  return os.str();
}

}  // namespace cpbench
