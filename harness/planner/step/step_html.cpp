#include "harness/planner/step/step_html.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "harness/planner/format.hpp"
#include "harness/planner/step/step_output.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan::step {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

// A colour per component family, stable across cases.
std::string colour(const std::string& name) {
  static const std::map<std::string, std::string> fixed = {
      {"mlp", "#4e79a7"},       {"moe", "#59a14f"},      {"embedding+head+loss", "#9c755f"},
      {"comm:cp", "#e15759"},   {"comm:tp", "#f28e2b"},  {"comm:ep", "#edc948"},
      {"comm:fsdp", "#b07aa1"}, {"comm:dp", "#b07aa1"},  {"comm:pp", "#ff9da7"},
      {"bubble", "#bab0ac"},    {"optimizer", "#76b7b2"}};
  if (auto it = fixed.find(name); it != fixed.end()) return it->second;
  static const char* attention[] = {"#1f3b73", "#3a6fb0", "#8cb4e0", "#2f7f6f", "#6a3d9a"};
  size_t h = 0;
  for (char c : name) h = h * 31 + static_cast<unsigned char>(c);
  return attention[h % 5];
}

void bars(std::ostringstream& os, const StepPlan& plan) {
  const size_t n = std::min<size_t>(plan.cases.size(), 8);
  double max_s = 0;
  for (size_t i = 0; i < n; ++i) max_s = std::max(max_s, plan.cases[i].step_s);
  const int W = 1100, left = 330, row = 34, top = 10;
  const int H = top + static_cast<int>(n) * row + 30;
  os << "<svg width='" << W << "' height='" << H << "' xmlns='http://www.w3.org/2000/svg' font-family='sans-serif' font-size='12'>\n";
  std::map<std::string, bool> seen;
  for (size_t i = 0; i < n; ++i) {
    const StepCase& c = plan.cases[i];
    const int y = top + static_cast<int>(i) * row;
    os << "<text x='0' y='" << y + 15 << "'>" << i + 1 << ". " << esc(degrees_text(c.parallel)) << " "
       << esc(to_string(c.training.recompute)) << (c.fits_memory ? "" : " (no fit)") << "</text>\n";
    os << "<text x='0' y='" << y + 28 << "' fill='#555' font-size='10'>" << esc(layout_text(c).substr(0, 60)) << "</text>\n";
    double x = left;
    for (const auto& comp : c.components) {
      if (comp.time_s <= 0) continue;
      const double w = (W - left - 110) * comp.time_s / max_s;
      seen[comp.name] = true;
      os << "<rect x='" << x << "' y='" << y + 4 << "' width='" << w << "' height='" << row - 10 << "' fill='"
         << colour(comp.name) << "'><title>" << esc(comp.name) << ": " << esc(fmt_time(comp.time_s)) << " ("
         << esc(pct(comp.time_s / c.step_s)) << ")</title></rect>\n";
      x += w;
    }
    os << "<text x='" << x + 6 << "' y='" << y + 20 << "'>" << esc(fmt_time(c.step_s)) << ", "
       << esc(fmt(c.tokens_per_s_per_gpu, 4)) << " tok/s</text>\n";
  }
  os << "</svg>\n<div class='legend'>";
  for (const auto& [name, _] : seen)
    os << "<span><i style='background:" << colour(name) << "'></i>" << esc(name) << "</span>";
  os << "</div>\n";
}

// One bar per CP size of `value`, with an optional horizontal limit line.
template <class F>
void per_cp(std::ostringstream& os, const StepPlan& plan, const std::string& title, F value, double limit) {
  const auto& v = plan.best_per_cp;
  if (v.empty()) return;
  double max_v = limit;
  for (const auto& c : v) max_v = std::max(max_v, value(c));
  const int W = 520, H = 260, left = 70, bottom = 40, top = 30;
  const double bw = (W - left - 20) / static_cast<double>(v.size());
  os << "<svg width='" << W << "' height='" << H << "' xmlns='http://www.w3.org/2000/svg' font-family='sans-serif' font-size='12'>\n";
  os << "<text x='" << left << "' y='16' font-weight='bold'>" << esc(title) << "</text>\n";
  os << "<line x1='" << left << "' y1='" << H - bottom << "' x2='" << W - 10 << "' y2='" << H - bottom << "' stroke='#333'/>\n";
  const auto Y = [&](double x) { return H - bottom - (H - bottom - top) * x / max_v; };
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = left + bw * static_cast<double>(i) + 4;
    const double val = value(v[i]);
    os << "<rect x='" << x << "' y='" << Y(val) << "' width='" << bw - 8 << "' height='" << (H - bottom) - Y(val)
       << "' fill='" << (v[i].fits_memory ? "#4e79a7" : "#e15759") << "'><title>" << esc(degrees_text(v[i].parallel))
       << "</title></rect>\n";
    os << "<text x='" << x + (bw - 8) / 2 << "' y='" << H - bottom + 15 << "' text-anchor='middle'>cp " << v[i].parallel.cp
       << "</text>\n";
  }
  for (int t = 0; t <= 4; ++t)
    os << "<text x='" << left - 6 << "' y='" << Y(max_v * t / 4) + 4 << "' text-anchor='end' font-size='10'>"
       << esc(title.find("memory") != std::string::npos ? fmt_bytes(max_v * t / 4) : fmt_time(max_v * t / 4))
       << "</text>\n";
  if (limit > 0)
    os << "<line x1='" << left << "' y1='" << Y(limit) << "' x2='" << W - 10 << "' y2='" << Y(limit)
       << "' stroke='#e15759' stroke-dasharray='6 4'/><text x='" << W - 12 << "' y='" << Y(limit) - 4
       << "' text-anchor='end' fill='#e15759' font-size='10'>usable " << esc(fmt_bytes(limit)) << "</text>\n";
  os << "</svg>\n";
}

}  // namespace

std::string step_plan_to_html(const StepPlan& plan) {
  const StepRequest& r = plan.request;
  const ModelShape& m = r.attention.model;
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>cpbench plan: " << esc(m.name) << " on " << r.gpus
     << " GPUs</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:20px}"
        "h2{font-size:16px;margin-top:28px}.legend span{margin-right:14px;font-size:12px;white-space:nowrap}"
        ".legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:middle}"
        "table{border-collapse:collapse;font-size:12px}td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child,td.l{text-align:left}</style></head><body>\n";
  os << "<h1>" << esc(m.name) << ": " << r.attention.seq_len << " tokens, " << r.gpus << " x "
     << esc(r.attention.cluster.name) << ", " << esc(to_string(r.precision)) << "</h1>\n<p>";
  os << esc(fmt(plan.params / 1e9)) << "B parameters (" << esc(fmt(plan.active_params / 1e9)) << "B active)";
  for (const auto& f : plan.features) os << "; " << esc(f);
  os << ". " << plan.searched << " cases priced.</p>\n";
  os << "<h2>Step split of the top cases (per GPU)</h2>\n";
  bars(os, plan);
  os << "<h2>The best case at each CP size</h2>\n<div>";
  per_cp(os, plan, "step time", [](const StepCase& c) { return c.step_s; }, 0);
  per_cp(os, plan, "memory per GPU", [](const StepCase& c) { return c.memory_per_gpu_bytes(); },
         plan.cases.empty() ? 0 : plan.cases.front().memory_budget);
  os << "</div>\n<h2>Cases</h2>\n<table><tr><th>#</th><th>degrees</th><th>recompute</th><th>tokens/s/GPU</th>"
        "<th>TFLOP/s</th><th>MFU</th><th>step</th><th>memory</th><th>fits</th><th class='l'>layout</th></tr>\n";
  int i = 0;
  for (const auto& c : plan.cases)
    os << "<tr><td>" << ++i << "</td><td class='l'>" << esc(degrees_text(c.parallel)) << "</td><td class='l'>"
       << esc(to_string(c.training.recompute)) << "</td><td>" << esc(fmt(c.tokens_per_s_per_gpu, 4)) << "</td><td>"
       << esc(fmt(c.model_tflops_per_gpu, 3)) << "</td><td>" << esc(pct(c.mfu)) << "</td><td>" << esc(fmt_time(c.step_s))
       << "</td><td>" << esc(fmt_bytes(c.memory_per_gpu_bytes())) << "</td><td>" << (c.fits_memory ? "yes" : "no")
       << "</td><td class='l'>" << esc(layout_text(c)) << "</td></tr>\n";
  os << "</table>\n";
  for (const auto& n : plan.notes) os << "<p>note: " << esc(n) << "</p>\n";
  os << "</body></html>\n";
  return os.str();
}

void write_step_html(const StepPlan& plan, const std::string& path) {
  std::ofstream out(path);
  CP_CHECK_USAGE(out.good(), "--html: cannot write '", path, "'");
  out << step_plan_to_html(plan);
  CP_CHECK_USAGE(out.good(), "--html: cannot write '", path, "'");
}

}  // namespace cpbench::plan::step
