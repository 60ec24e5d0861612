#include "reports/text_format.hpp"

#include <cmath>
#include <iomanip>
#include <sstream>

namespace cpbench {

std::string num(double v, int digits) {
  if (!std::isfinite(v)) return v > 0 ? "inf" : (v < 0 ? "-inf" : "nan");
  std::ostringstream os;
  os << std::setprecision(digits) << v;
  return os.str();
}

std::string metric_text(const RunResult& r, const std::string& name, int digits) {
  const Metric* m = r.metric(name);
  return m ? num(m->value, digits) : "";
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string percent(double fraction, bool show_sign) {
  std::ostringstream os;
  if (show_sign) os << std::showpos;
  os << std::fixed << std::setprecision(1) << fraction * 100 << "%";
  return os.str();
}

}  // namespace cpbench
