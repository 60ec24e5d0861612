#pragma once
// Text helpers shared by the planner's prose and tables (internal to harness/planner). Formats only:
// the numbers come from the cost model.
#include <string>
#include <vector>

namespace cpbench::plan {

// "a, b, c" (or joined by `sep`).
[[nodiscard]] std::string join(const std::vector<std::string>& v, const char* sep = ", ");
// Seconds with 3 significant digits in s, ms or us: "3.28 s", "412 ms", "0 us".
[[nodiscard]] std::string fmt_time(double s);
// Bytes with 3 significant digits in B, KiB, MiB, GiB or TiB.
[[nodiscard]] std::string fmt_bytes(double b);
// `precision` significant digits (std::setprecision default notation).
[[nodiscard]] std::string fmt(double x, int precision = 3);
// Fixed notation with `decimals` decimals.
[[nodiscard]] std::string fmt_fixed(double x, int decimals);
// A fraction as a whole percentage: 0.533 -> "53%".
[[nodiscard]] std::string pct(double x);

}  // namespace cpbench::plan
