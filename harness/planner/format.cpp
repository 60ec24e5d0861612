#include "harness/planner/format.hpp"

#include <iomanip>
#include <sstream>

namespace cpbench::plan {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string fmt_time(double s) {
  std::ostringstream os;
  os << std::setprecision(3);
  if (s >= 1) {
    os << s << " s";
  } else if (s >= 1e-3) {
    os << s * 1e3 << " ms";
  } else {
    os << s * 1e6 << " us";
  }
  return os.str();
}

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  std::ostringstream os;
  os << std::setprecision(3) << b << " " << units[u];
  return os.str();
}

std::string fmt(double x, int precision) {
  std::ostringstream os;
  os << std::setprecision(precision) << x;
  return os.str();
}

std::string fmt_fixed(double x, int decimals) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(decimals) << x;
  return os.str();
}

std::string pct(double x) { return fmt_fixed(100 * x, 0) + "%"; }

}  // namespace cpbench::plan
