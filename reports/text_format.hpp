#pragma once
// Number and markup formatting shared by the text reporters (Markdown, HTML, the terminal summary).
#include <string>

#include "reports/result.hpp"

namespace cpbench {

// `v` with `digits` significant digits ("inf", "nan" where not finite).
[[nodiscard]] std::string num(double v, int digits = 3);
// A fraction as a percentage with one decimal ("12.3%"; "+12.3%" / "-4.0%" with show_sign).
[[nodiscard]] std::string percent(double fraction, bool show_sign = false);
// A result's metric as num(), "" when it has none.
[[nodiscard]] std::string metric_text(const RunResult& r, const std::string& name, int digits = 3);
// `s` with <, >, &, " escaped for HTML.
[[nodiscard]] std::string html_escape(const std::string& s);

}  // namespace cpbench
