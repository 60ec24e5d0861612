// history_html (reports/history_check.hpp): the trend page, in report.html's style.
#include <algorithm>
#include <iomanip>
#include <sstream>

#include "reports/history_check.hpp"
#include "reports/text_format.hpp"

namespace cpbench {
namespace {

std::string page_commit(const std::string& c) { return c.size() > 8 ? c.substr(0, 8) : c; }

// One case's chart: the metric per run in order (a line with a dot per run, hollow when the run was
// measured on a busy machine, grey when the machine spoiled it), the runs' noise as a band, change points
// as dashed lines with commits (and "the machine's" on a shared step).
std::string chart(const CaseHistory& c) {
  const int W = 760, H = 230, L = 70, R = 20, T = 20, B = 40;
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='10' class='trend' data-case='" << html_escape(c.name) << "'>";
  if (c.points.empty()) {
    s << "<text x='" << L << "' y='" << H / 2 << "'>no ok run with " << html_escape(c.metric) << "</text></svg>";
    return s.str();
  }
  double lo = c.points.front().lo, hi = c.points.front().hi;
  for (const auto& p : c.points) {
    lo = std::min({lo, p.lo, p.value});
    hi = std::max({hi, p.hi, p.value});
  }
  const double pad = (hi - lo) * 0.08 + 1e-12;
  lo = std::max(0.0, lo - pad);
  hi += pad;
  const size_t n = c.points.size();
  const auto px = [&](size_t i) {
    return L + (n == 1 ? 0.5 : static_cast<double>(i) / static_cast<double>(n - 1)) * (W - L - R);
  };
  const auto py = [&](double v) { return T + (1 - (v - lo) / (hi - lo)) * (H - T - B); };
  // Axes and five value ticks.
  s << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='#888'/>"
    << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='#888'/>";
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (hi - lo) * k / 4.0;
    s << "<text x='" << L - 4 << "' y='" << num(py(v) + 3, 6) << "' text-anchor='end'>" << num(v, 3) << "</text>"
      << "<line x1='" << L << "' x2='" << W - R << "' y1='" << num(py(v), 6) << "' y2='" << num(py(v), 6)
      << "' stroke='#eee'/>";
  }
  s << "<text x='12' y='" << T + (H - T - B) / 2 << "' transform='rotate(-90 12 " << T + (H - T - B) / 2
    << ")' text-anchor='middle'>" << html_escape(c.metric + " (" + c.unit + ")") << "</text>";
  // Noise band.
  s << "<polygon class='band' fill='#1f77b4' fill-opacity='0.18' stroke='none' points='";
  for (size_t i = 0; i < n; ++i) s << num(px(i), 6) << "," << num(py(c.points[i].hi), 6) << " ";
  for (size_t i = n; i-- > 0;) s << num(px(i), 6) << "," << num(py(c.points[i].lo), 6) << " ";
  s << "'/>";
  // Change points (and, for a case named against the other cases, that change: its own series has none there).
  const auto change_line = [&](const SeriesChange& x, const char* verdict) {
    const double xm = (px(static_cast<size_t>(x.index) - 1) + px(static_cast<size_t>(x.index))) / 2;
    const char* col = x.slowdown ? "#d62728" : "#2ca02c";
    s << "<line class='change' data-run='" << x.first_run_id << "' x1='" << num(xm, 6) << "' x2='" << num(xm, 6)
      << "' y1='" << T << "' y2='" << H - B << "' stroke='" << col << "' stroke-width='2' stroke-dasharray='5,3'/>"
      << "<text x='" << num(xm + 4, 6) << "' y='" << T + 10 << "' fill='" << col << "'>"
      << html_escape(page_commit(x.last_commit_before) + ".." + page_commit(x.first_commit_after)) << " "
      << percent(x.change, true) << verdict << "</text>";
  };
  for (const auto& x : c.changes) change_line(x, x.regression ? " REGRESSION" : x.machine ? " the machine's" : "");
  if (c.against_others) change_line(c.against.changes.back(), " REGRESSION against the other cases");
  // The series.
  s << "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
  for (size_t i = 0; i < n; ++i) s << num(px(i), 6) << "," << num(py(c.points[i].value), 6) << " ";
  s << "'/>";
  for (size_t i = 0; i < n; ++i) {
    const SeriesPoint& p = c.points[i];
    const char* stroke = p.spoiled ? "#888" : "#1f77b4";
    s << "<circle class='run" << (p.spoiled ? " spoiled" : "") << "' data-run='" << p.run_id << "' data-value='"
      << num(p.value, 9) << "' cx='" << num(px(i), 6) << "' cy='" << num(py(p.value), 6) << "' r='3' fill='"
      << (p.busy      ? "white"
          : p.spoiled ? "#bbb"
                      : "#1f77b4")
      << "' stroke='" << stroke << "'><title>run " << p.run_id << " " << html_escape(page_commit(p.commit)) << " "
      << html_escape(p.started_at) << (p.label.empty() ? "" : " [" + html_escape(p.label) + "]") << ": "
      << num(p.value, 4) << " " << html_escape(c.unit) << " (band " << num(p.lo, 4) << ".." << num(p.hi, 4) << ")"
      << (p.busy ? ", busy machine" : "") << (p.spoiled ? ", the machine's run (left out of the series)" : "")
      << "</title></circle>";
  }
  // Run ids along the x axis (at most ~12 labels).
  const size_t every = std::max<size_t>(1, (n + 11) / 12);
  for (size_t i = 0; i < n; i += every)
    s << "<text x='" << num(px(i), 6) << "' y='" << H - B + 14 << "' text-anchor='middle'>" << c.points[i].run_id
      << "</text>";
  s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 8 << "' text-anchor='middle'>run (in the order added)</text>";
  s << "</svg>";
  return s.str();
}

}  // namespace

std::string history_html(const HistoryCheck& h) {
  std::ostringstream os;
  os << "<!doctype html><html><head><meta charset='utf-8'><title>cpbench history: " << html_escape(h.options.metric)
     << "</"
        "title><style>body{font-family:sans-serif;margin:24px;max-width:1200px}table{border-collapse:collapse;font-"
        "size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
        ".ok{color:#2ca02c}.failed{color:#d62728;font-weight:bold}.skipped{color:#888}"
        "h2{font-size:15px;margin:22px 0 4px}</style></head><body>";
  os << "<h1>cpbench history: " << html_escape(h.options.metric) << "</h1>";
  os << "<p>" << h.runs << " runs from " << html_escape(h.store)
     << ". Change points: E-Divisive means, permutation alpha " << num(h.options.change.alpha, 3) << " ("
     << h.options.change.permutations << " permutations), min segment " << h.options.change.min_segment
     << " runs, min effect " << percent(h.options.min_effect, false)
     << "; the newest change point fails the check when it is a slowdown beyond " << percent(h.options.threshold, false)
     << ". Band: each run's median noise; a hollow dot: measured on a busy machine; a grey dot: a run the machine "
        "spoiled (its canary and most cases slower together), left out of the series.</p>";
  os << "<table><tr><th>case</th><th>runs</th><th>newest " << html_escape(h.options.metric)
     << "</th><th>change points</th><th>verdict</th></tr>";
  for (const auto& c : h.cases) {
    os << "<tr><td>" << html_escape(c.name) << "</td><td>" << c.points.size() << "</td><td>"
       << (c.points.empty() ? "" : num(c.points.back().value, 4) + " " + html_escape(c.unit)) << "</td><td>"
       << c.changes.size() << "</td><td class='"
       << (c.regression                                ? "failed"
           : c.too_short || c.cannot_tell || c.machine ? "skipped"
                                                       : "ok")
       << "'>"
       << (c.regression    ? (c.against_others ? "REGRESSION (against the other cases)" : "REGRESSION")
           : c.machine     ? "the machine's (no verdict)"
           : c.too_short   ? "too short"
           : c.cannot_tell ? "cannot tell (spread " + percent(c.spread, false) + ")"
                           : "ok")
       << "</td></tr>";
  }
  os << "</table>";
  for (const auto& c : h.cases) os << "<h2>" << html_escape(c.name) << "</h2>" << chart(c);
  // The page's data, machine-readable (the test reads it back against the store).
  std::string data = history_json(h).dump();
  for (size_t at = 0; (at = data.find("</", at)) != std::string::npos; at += 3) data.replace(at, 2, "<\\/");
  os << "<script id='history-data' type='application/json'>" << data << "</script></body></html>\n";
  return os.str();
}

}  // namespace cpbench
