#include "reports/text_report.hpp"

#include "reports/perf_report.hpp"
#include "reports/text_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace cpbench {
namespace {

// The worst tensor's error relative to its bound (<= 1 passes; docs/correctness.md).
double worst_score(const RunResult& r, std::string* which = nullptr) {
  double w = 0;
  for (const auto& e : r.errors)
    if (e.score >= w) {
      w = e.score;
      if (which) *which = e.tensor;
    }
  return w;
}

int64_t mismatches(const RunResult& r) {
  int64_t n = 0;
  for (const auto& e : r.errors) n += e.mismatches;
  return n;
}

int64_t count_status(const Report& rep, const std::string& status) {
  int64_t n = 0;
  for (const auto& r : rep.results) n += r.status == status;
  return n;
}

int64_t count_reference(const Report& rep, const std::string& how) {
  int64_t n = 0;
  for (const auto& r : rep.results) n += r.reference == how;
  return n;
}

std::string axis(const RunResult& r, const std::string& key) {
  auto it = r.axes.find(key);
  return it == r.axes.end() ? "" : it->second;
}

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

// Line chart: tokens/s against cp, one line per sharder (for each transport/mask/dtype series).
std::string svg_throughput(const Report& rep) {
  std::map<std::string, std::map<int, double>> series;  // label -> cp -> tokens/s
  for (const auto& r : rep.results) {
    const Metric* m = r.metric("tokens_per_s");
    if (!m || r.status != "ok") continue;
    std::string label = axis(r, "sharder") + " / " + axis(r, "transport") + " / " + axis(r, "mask") + " / " + axis(r, "dtype");
    series[label][std::stoi(axis(r, "cp"))] = m->value;
  }
  if (series.empty()) return "<p>No throughput measured.</p>";
  double ymax = 0;
  int xmax = 1;
  for (const auto& [l, pts] : series)
    for (const auto& [x, y] : pts) {
      ymax = std::max(ymax, y);
      xmax = std::max(xmax, x);
    }
  const int W = 720, H = 320, L = 70, R = 260, T = 20, B = 40;
  auto px = [&](double x) { return L + (xmax > 1 ? (x - 1) / (xmax - 1) : 0.5) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - y / (ymax * 1.1)) * (H - T - B); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' font-size='11'>";
  s << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='#333'/>";
  s << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='#333'/>";
  for (int x = 1; x <= xmax; ++x)
    s << "<text x='" << px(x) << "' y='" << H - B + 15 << "' text-anchor='middle'>" << x << "</text>";
  for (int k = 0; k <= 4; ++k) {
    double y = ymax * 1.1 * k / 4;
    s << "<text x='" << L - 5 << "' y='" << py(y) + 4 << "' text-anchor='end'>" << num(y, 3) << "</text>";
    s << "<line x1='" << L << "' y1='" << py(y) << "' x2='" << W - R << "' y2='" << py(y) << "' stroke='#eee'/>";
  }
  s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 5 << "' text-anchor='middle'>CP size W</text>";
  s << "<text x='12' y='" << (T + H - B) / 2 << "' transform='rotate(-90 12 " << (T + H - B) / 2
    << ")' text-anchor='middle'>tokens/s</text>";
  int i = 0;
  for (const auto& [label, pts] : series) {
    const char* col = kPalette[i % 8];
    std::string path;
    for (const auto& [x, y] : pts) path += (path.empty() ? "M" : " L") + num(px(x), 6) + " " + num(py(y), 6);
    s << "<path d='" << path << "' fill='none' stroke='" << col << "' stroke-width='2'/>";
    for (const auto& [x, y] : pts)
      s << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='3' fill='" << col << "'><title>" << html_escape(label)
        << " cp=" << x << ": " << num(y, 4) << " tokens/s</title></circle>";
    s << "<rect x='" << W - R + 10 << "' y='" << T + i * 14 << "' width='10' height='10' fill='" << col << "'/>";
    s << "<text x='" << W - R + 24 << "' y='" << T + i * 14 + 9 << "'>" << html_escape(label) << "</text>";
    ++i;
    if (i >= 20) break;
  }
  s << "</svg>";
  return s.str();
}

// Per-rank attention work bars for one case, normalized to the mean (1.0 = balanced).
std::string svg_rank_bars(const RunResult& r, const std::string& what) {
  std::vector<double> v;
  for (const auto& rs : r.ranks) v.push_back(what == "flops" ? rs.attention_flops : rs.attention_s);
  if (v.size() < 2) return "";
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  if (mean <= 0) return "";
  const int bw = 26, H = 90, top = 10;
  const double vmax = std::max(2.0, *std::max_element(v.begin(), v.end()) / mean);
  std::ostringstream s;
  const int width = static_cast<int>(v.size()) * (bw + 6) + 40;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << H + 28
    << "' font-family='sans-serif' font-size='10'>";
  const double y1 = top + (1 - 1.0 / vmax) * H;
  for (size_t k = 0; k < v.size(); ++k) {
    const double rel = v[k] / mean;
    const double h = rel / vmax * H;
    const double x = 30 + static_cast<double>(k) * (bw + 6);
    const char* col = rel > 1.15 ? "#d62728" : (rel < 0.85 ? "#ff7f0e" : "#2ca02c");
    s << "<rect x='" << x << "' y='" << top + H - h << "' width='" << bw << "' height='" << h << "' fill='" << col
      << "'><title>rank " << k << ": " << num(rel, 3) << "x mean</title></rect>";
    s << "<text x='" << x + bw / 2.0 << "' y='" << top + H + 12 << "' text-anchor='middle'>r" << k << "</text>";
  }
  s << "<line x1='25' x2='" << width << "' y1='" << y1 << "' y2='" << y1 << "' stroke='#333' stroke-dasharray='3,2'/>";
  s << "<text x='0' y='" << y1 + 3 << "'>mean</text>";
  s << "</svg>";
  return s.str();
}

// Error magnitudes: log10 of each case's worst error relative to its bound (the tick at 1).
std::string svg_errors(const Report& rep) {
  std::vector<std::pair<std::string, std::pair<double, double>>> pts;
  for (const auto& r : rep.results) {
    if (r.errors.empty()) continue;
    pts.push_back({r.name, {worst_score(r), 1.0}});
  }
  if (pts.empty()) return "<p>No reference comparisons.</p>";
  const int rowh = 14, W = 720, L = 330;
  const int H = static_cast<int>(pts.size()) * rowh + 30;
  auto px = [&](double rel) {
    const double lg = std::log10(std::max(rel, 1e-18));
    return L + (lg + 18) / 20.0 * (W - L - 20);  // 1e-18 .. 1e2
  };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='monospace' font-size='10'>";
  for (int e = -18; e <= 2; e += 2)
    s << "<text x='" << px(std::pow(10.0, e)) << "' y='10' text-anchor='middle'>1e" << e << "</text>"
      << "<line x1='" << px(std::pow(10.0, e)) << "' x2='" << px(std::pow(10.0, e)) << "' y1='14' y2='" << H
      << "' stroke='#eee'/>";
  for (size_t i = 0; i < pts.size(); ++i) {
    const double y = 24 + static_cast<double>(i) * rowh;
    const auto [rel, tol] = pts[i].second;
    s << "<text x='0' y='" << y + 4 << "'>" << html_escape(pts[i].first.substr(0, 52)) << "</text>";
    s << "<line x1='" << px(tol) << "' x2='" << px(tol) << "' y1='" << y - 5 << "' y2='" << y + 5
      << "' stroke='#333'/>";
    s << "<circle cx='" << px(rel) << "' cy='" << y << "' r='4' fill='" << (rel <= tol ? "#2ca02c" : "#d62728")
      << "'><title>worst error / bound " << num(rel, 3) << "</title></circle>";
  }
  s << "</svg>";
  return s.str();
}

// The colour of a timeline event: phases by name, compute blocks by pass (alternating shades so each
// transport step is its own block), waits red, transfers purple / brown.
std::string timeline_colour(const TimelineEvent& e, int index) {
  if (e.kind == "wait") return "#d62728";
  if (e.kind == "transfer") return e.lane == "comm_grad" ? "#8c564b" : "#9467bd";
  if (e.kind == "phase") {
    if (e.name == "shard") return "#17becf";
    if (e.name == "forward") return "#1f77b4";
    if (e.name == "backward") return "#ff7f0e";
    if (e.name == "gather") return "#2ca02c";
    return "#dddddd";  // step
  }
  const bool bwd = e.name.find("_bwd") != std::string::npos;
  const bool odd = index % 2 != 0;
  if (bwd) return odd ? "#ffbb78" : "#e6850e";
  return odd ? "#aec7e8" : "#3a78b5";
}

// A Gantt chart of one case's timed step: a row group per CP rank (phases, attention compute with its
// waits, K/V transfers, dK/dV transfers), time from the common start.
std::string svg_timeline(const RunResult& r) {
  const Timeline& tl = r.timeline;
  if (tl.empty()) return "";
  double end_s = 0;
  for (const auto& rt : tl.ranks)
    for (const auto& e : rt.events) end_s = std::max(end_s, e.start_s + e.dur_s);
  if (end_s <= 0) return "";
  // Per rank: attention compute and wait, for the bars on the right (the straggler has the longest
  // compute bar; a balanced layout has equal ones).
  std::vector<double> compute(tl.ranks.size(), 0.0), wait(tl.ranks.size(), 0.0);
  double busiest = 0;
  for (size_t g = 0; g < tl.ranks.size(); ++g) {
    for (const auto& e : tl.ranks[g].events) {
      if (e.kind == "compute") compute[g] += e.dur_s;
      if (e.kind == "wait") wait[g] += e.dur_s;
    }
    busiest = std::max(busiest, compute[g] + wait[g]);
  }
  const double max_compute = *std::max_element(compute.begin(), compute.end());
  const int L = 70, R = 250, W = 1000, lane_h[4] = {10, 14, 7, 7}, group_h = 10 + 14 + 7 + 7 + 12, top = 18;
  const int H = top + static_cast<int>(tl.ranks.size()) * group_h + 30;
  const double span = W - L - R;
  auto px = [&](double t) { return L + t / end_s * span; };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='10'>";
  // Time axis: ~8 ticks at a round number of milliseconds.
  const double ms = end_s * 1e3;
  double tick = std::pow(10.0, std::floor(std::log10(ms / 8)));
  if (ms / tick > 16) tick *= 2;
  if (ms / tick > 16) tick *= 2.5;
  for (double t = 0; t <= ms + 1e-9; t += tick) {
    const double x = px(t * 1e-3);
    s << "<line x1='" << num(x, 6) << "' x2='" << num(x, 6) << "' y1='" << top - 4 << "' y2='" << H - 28
      << "' stroke='#eee'/><text x='" << num(x, 6) << "' y='" << H - 16 << "' text-anchor='middle'>" << num(t, 4)
      << "</text>";
  }
  s << "<text x='" << L + span / 2 << "' y='" << H - 3
    << "' text-anchor='middle'>ms since the step's common start</text>";
  for (size_t g = 0; g < tl.ranks.size(); ++g) {
    const RankTimeline& rt = tl.ranks[g];
    const int y0 = top + static_cast<int>(g) * group_h;
    int lane_y[4];
    lane_y[0] = y0;
    for (int k = 1; k < 4; ++k) lane_y[k] = lane_y[k - 1] + lane_h[k - 1] + 1;
    s << "<text x='0' y='" << y0 + 20 << "' font-weight='bold'>rank " << rt.rank << "</text>";
    int index = 0;
    // The step first, so the phases draw over it.
    std::vector<const TimelineEvent*> events;
    for (const auto& e : rt.events) events.push_back(&e);
    std::stable_sort(events.begin(), events.end(), [](const TimelineEvent* a, const TimelineEvent* b) {
      return (a->name == "step") > (b->name == "step");
    });
    for (const TimelineEvent* e : events) {
      const int lane = e->lane == "phases" ? 0 : e->lane == "compute" ? 1 : e->lane == "comm" ? 2 : 3;
      const double x = px(e->start_s), w = std::max(0.5, px(e->start_s + e->dur_s) - x);
      s << "<rect x='" << num(x, 6) << "' y='" << lane_y[lane] << "' width='" << num(w, 6) << "' height='"
        << lane_h[lane] << "' fill='" << timeline_colour(*e, e->kind == "compute" ? index++ : 0) << "'"
        << (e->kind == "compute" ? " stroke='#fff' stroke-width='0.5'" : "") << "><title>rank " << rt.rank << " "
        << html_escape(e->name) << " (" << e->kind << "): " << num(e->start_s * 1e3, 4) << " ms + "
        << num(e->dur_s * 1e3, 4) << " ms</title></rect>";
    }
    const double bar = 80, cw = busiest > 0 ? compute[g] / busiest * bar : 0,
                 ww = busiest > 0 ? wait[g] / busiest * bar : 0;
    s << "<rect x='" << W - R + 8 << "' y='" << y0 + 4 << "' width='" << num(cw, 6) << "' height='12' fill='#3a78b5'/>"
      << "<rect x='" << num(W - R + 8 + cw, 6) << "' y='" << y0 + 4 << "' width='" << num(ww, 6)
      << "' height='12' fill='#d62728'/>";
    s << "<text x='" << W - R + 8 + bar + 6 << "' y='" << y0 + 14 << "'"
      << (compute[g] == max_compute && tl.ranks.size() > 1 ? " font-weight='bold'" : "") << ">compute "
      << num(compute[g] * 1e3, 3) << " ms</text><text x='" << W - R + 8 + bar + 6 << "' y='" << y0 + 26
      << "' fill='#d62728'>wait " << num(wait[g] * 1e3, 3) << " ms</text>";
  }
  s << "</svg>";
  return s.str();
}

std::string timeline_legend() {
  const std::pair<const char*, const char*> items[] = {{"#17becf", "shard"},
                                                       {"#1f77b4", "forward"},
                                                       {"#ff7f0e", "backward"},
                                                       {"#2ca02c", "gather"},
                                                       {"#3a78b5", "attention fwd step"},
                                                       {"#e6850e", "attention bwd step"},
                                                       {"#d62728", "wait (exposed communication)"},
                                                       {"#9467bd", "K/V in flight"},
                                                       {"#8c564b", "dK/dV in flight"}};
  std::ostringstream s;
  s << "<p style='font-size:11px'>";
  for (const auto& [c, l] : items)
    s << "<span style='display:inline-block;width:10px;height:10px;background:" << c << ";margin:0 4px 0 12px'></span>"
      << l;
  s << "</p>";
  return s.str();
}
}  // namespace

std::string summary_table(const Report& rep) {
  std::ostringstream os;
  os << "scenario " << rep.scenario_name << ": " << rep.results.size() << "/" << rep.total_cases << " cases, "
     << count_status(rep, "ok") << " ok, " << count_status(rep, "failed") << " failed, "
     << count_status(rep, "skipped") << " skipped" << (rep.partial ? " (PARTIAL: " + rep.partial_reason + ")" : "")
     << "\n";
  os << std::left << std::setw(52) << "case" << std::setw(9) << "status" << std::setw(10) << "outcome" << std::right
     << std::setw(12) << "tokens/s" << std::setw(11) << "imbalance" << std::setw(12) << "err/bound" << std::setw(11) << "mismatch" << "\n";
  for (const auto& r : rep.results) {
    os << std::left << std::setw(51) << r.name << " " << std::setw(9) << r.status << std::setw(10)
       << (r.outcome.empty() ? "-" : r.outcome) << std::right << std::setw(12) << metric_text(r, "tokens_per_s", 4)
       << std::setw(11) << metric_text(r, "attention_flops_imbalance", 3) << std::setw(12)
       << (r.errors.empty() ? "" : num(worst_score(r), 2)) << std::setw(11)
       << (r.errors.empty() ? "" : std::to_string(mismatches(r))) << "\n";
    if (r.status != "ok" && !r.reason.empty()) os << "    " << r.reason.substr(0, 400) << "\n";
  }
  return os.str();
}

std::string markdown_report(const Report& rep) {
  std::ostringstream os;
  os << "# cpbench report: " << rep.scenario_name << "\n\n";
  if (rep.partial) os << "**PARTIAL REPORT** (" << rep.partial_reason << "): " << rep.results.size() << " of " << rep.total_cases << " cases.\n\n";
  os << "- scenario file: `" << rep.scenario_file << "`\n- cpbench " << rep.env.cpbench_version << " (commit "
     << rep.env.git_commit << "), torch " << rep.env.torch_version << ", device " << rep.env.device << ", CUDA "
     << (rep.env.cuda_available ? "available" : "not available") << "\n- host " << rep.env.host << ", world size up to "
     << rep.env.world_size << ", ranks " << rep.env.launcher << ", started " << rep.env.started_at << "\n- "
     << count_status(rep, "ok") << " ok, " << count_status(rep, "failed") << " failed, " << count_status(rep, "skipped")
     << " skipped\n";
  if (const int64_t computed = count_reference(rep, "computed"); computed > 0)
    os << "- single-rank references: " << computed << " computed, " << count_reference(rep, "reused")
       << " reused (one per distinct mask, dtype and data replica in each rank process)\n";
  if (!rep.env.platform.empty()) {
    os << "- platform:";
    for (const auto& [k, v] : rep.env.platform) os << " " << k << " `" << v << "`;";
    os << "\n";
  }
  os << "\n";
  os << "## Cases\n\n| case | status | outcome | tokens/s | step (s) | spread | attention imbalance (flops) | attention imbalance (time) | bytes/rank | worst err/bound | mismatches |\n";
  os << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rep.results) {
    std::string which;
    const double w = worst_score(r, &which);
    const Metric* st = r.metric("step_s");
    os << "| " << r.name << " | " << r.status << " | " << (r.outcome.empty() ? "-" : r.outcome) << " | "
       << metric_text(r, "tokens_per_s", 4) << " | " << metric_text(r, "step_s") << " | "
       << (st ? num(st->spread * 100, 2) + "%" : "") << " | " << metric_text(r, "attention_flops_imbalance") << " | "
       << metric_text(r, "attention_time_imbalance") << " | " << metric_text(r, "bytes_sent_per_rank") << " | "
       << (r.errors.empty() ? "" : num(w, 2) + " (" + which + ")") << " | "
       << (r.errors.empty() ? "" : std::to_string(mismatches(r))) << " |\n";
  }
  // What the check saw where it found something: the tensors outside their bounds (negative controls
  // included: this is what caught them).
  bool any_mismatch = false;
  for (const auto& r : rep.results) any_mismatch = any_mismatch || mismatches(r) > 0;
  if (any_mismatch) {
    os << "\n## Tensors outside their bounds\n\n| case | step | tensor | criterion | mismatches | err/bound | bound | worst element |\n"
          "|---|---|---|---|---:|---:|---|---|\n";
    for (const auto& r : rep.results)
      for (const auto& e : r.errors) {
        if (e.ok && e.mismatches == 0) continue;
        const std::string bound = e.criterion == "precision"
                                      ? "k=" + num(e.k, 2) + " x one-rank max " + num(e.single_rank_max, 3) + " + " + num(e.floor, 2)
                                      : "atol " + num(e.atol, 2) + " + rtol " + num(e.rtol, 2) + " |ref|";
        os << "| " << r.name << " | " << e.step << " | " << e.tensor << " | " << e.criterion << " | " << e.mismatches << "/"
           << e.elements << " | " << num(e.score, 3) << " | " << bound << " | " << e.worst << " |\n";
      }
  }
  bool any_bad = false;
  for (const auto& r : rep.results) any_bad = any_bad || (r.status != "ok" && !r.reason.empty());
  if (any_bad) {
    os << "\n## Failed and skipped cases\n\n";
    for (const auto& r : rep.results)
      if (r.status != "ok" && !r.reason.empty()) os << "- **" << r.name << "** (" << r.status << "): " << r.reason << "\n";
  }
  os << markdown_performance(rep);
  os << "\n## Per-rank attention work\n\n| case | rank | attention time (s) | attention FLOPs | bytes sent |\n|---|---:|---:|---:|---:|\n";
  for (const auto& r : rep.results)
    for (const auto& rs : r.ranks)
      os << "| " << r.name << " | " << rs.rank << " | " << num(rs.attention_s) << " | " << num(rs.attention_flops, 4)
         << " | " << num(rs.bytes_sent, 4) << " |\n";
  bool any_timeline = false;
  for (const auto& r : rep.results) any_timeline = any_timeline || !r.timeline.empty();
  if (any_timeline) {
    os << "\n## Median timed step per rank (trace.json and report.html show it; docs/timeline.md)\n\n"
          "| case | rank | step (ms) | attention compute (ms) | waiting for communication (ms) |\n|---|---:|---:|---:|---:|\n";
    for (const auto& r : rep.results)
      for (const auto& rt : r.timeline.ranks) {
        double step = 0, compute = 0, wait = 0;
        for (const auto& e : rt.events) {
          if (e.kind == "phase" && e.name == "step") step = e.dur_s;
          if (e.kind == "compute") compute += e.dur_s;
          if (e.kind == "wait") wait += e.dur_s;
        }
        os << "| " << r.name << " | " << rt.rank << " | " << num(step * 1e3) << " | " << num(compute * 1e3) << " | "
           << num(wait * 1e3) << " |\n";
      }
  }
  return os.str();
}

std::string html_report(const Report& rep) {
  std::ostringstream os;
  os << "<!doctype html><html><head><meta charset='utf-8'><title>cpbench: " << html_escape(rep.scenario_name)
     << "</title><style>body{font-family:sans-serif;margin:24px;max-width:1200px}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
        ".ok{color:#2ca02c}.failed{color:#d62728;font-weight:bold}.skipped{color:#888}.partial{background:#fee;padding:8px;border:1px solid #d62728}"
        ".bars{display:inline-block;margin:6px 18px 6px 0;vertical-align:top;font-size:11px}</style></head><body>";
  os << "<h1>cpbench report: " << html_escape(rep.scenario_name) << "</h1>";
  if (rep.partial)
    os << "<p class='partial'>PARTIAL REPORT (" << html_escape(rep.partial_reason) << "): " << rep.results.size()
       << " of " << rep.total_cases << " cases.</p>";
  os << "<p>cpbench " << html_escape(rep.env.cpbench_version) << " (commit " << html_escape(rep.env.git_commit)
     << "), torch " << html_escape(rep.env.torch_version) << ", device " << html_escape(rep.env.device) << ", host "
     << html_escape(rep.env.host) << ", world size up to " << rep.env.world_size << ", started "
     << html_escape(rep.env.started_at) << ". " << count_status(rep, "ok") << " ok, " << count_status(rep, "failed")
     << " failed, " << count_status(rep, "skipped") << " skipped.</p>";
  os << "<h2>Per-rank attention work (1.0 = mean; red bars = the stragglers that set the step time)</h2>";
  for (const auto& r : rep.results) {
    std::string bars = svg_rank_bars(r, "flops");
    if (bars.empty()) continue;
    os << "<div class='bars'>" << html_escape(r.name) << "<br>imbalance " << metric_text(r, "attention_flops_imbalance")
       << " (time " << metric_text(r, "attention_time_imbalance") << ")<br>" << bars << "</div>";
  }
  bool any_timeline = false;
  for (const auto& r : rep.results) any_timeline = any_timeline || !r.timeline.empty();
  if (any_timeline) {
    os << "<h2>Timeline of the median timed step (per rank: phases; attention blocks per transport step, waits in "
          "red; transfers in flight below; trace.json has the same for Perfetto, docs/timeline.md)</h2>"
       << timeline_legend();
    for (const auto& r : rep.results) {
      const std::string svg = svg_timeline(r);
      if (svg.empty()) continue;
      os << "<div class='timeline'><b>" << html_escape(r.name) << "</b> (step " << metric_text(r, "step_s")
         << " s median, attention imbalance " << metric_text(r, "attention_flops_imbalance") << ")<br>" << svg
         << "</div>";
    }
  }
  os << html_performance(rep);
  os << "<h2>Throughput against CP size</h2>" << svg_throughput(rep);
  os << "<h2>Error against the single-rank reference (worst error / its bound; tick = 1, docs/correctness.md)</h2>" << svg_errors(rep);
  os << "<h2>Cases</h2><table><tr><th>case</th><th>status</th><th>outcome</th><th>tokens/s</th><th>step s</th>"
        "<th>imbalance</th><th>bytes/rank</th><th>worst err/bound</th><th>mismatches</th><th>reason</th></tr>";
  for (const auto& r : rep.results) {
    std::string which;
    const double w = worst_score(r, &which);
    os << "<tr><td>" << html_escape(r.name) << "</td><td class='" << r.status << "'>" << r.status << "</td><td>"
       << (r.outcome.empty() ? "-" : r.outcome) << "</td><td>" << metric_text(r, "tokens_per_s", 4) << "</td><td>"
       << metric_text(r, "step_s") << "</td><td>" << metric_text(r, "attention_flops_imbalance") << "</td><td>"
       << metric_text(r, "bytes_sent_per_rank") << "</td><td>" << (r.errors.empty() ? "" : num(w, 2) + " " + html_escape(which))
       << "</td><td>" << (r.errors.empty() ? "" : std::to_string(mismatches(r))) << "</td><td style='text-align:left'>" << html_escape(r.reason) << "</td></tr>";
  }
  os << "</table></body></html>\n";
  return os.str();
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error(path + ": cannot write");
    out << text;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error(path + ": cannot rename " + tmp);
}

}  // namespace cpbench
