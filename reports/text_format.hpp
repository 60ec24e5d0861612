#pragma once
// Number and markup formatting shared by the text reporters (Markdown, HTML, the terminal summary).
#include <string>

#include "reports/result.hpp"

namespace cpbench {

// `v` with `digits` significant digits ("inf", "nan" where not finite).
[[nodiscard]] std::string num(double v, int digits = 3);
// A result's metric as num(), "" when it has none.
[[nodiscard]] std::string metric_text(const RunResult& r, const std::string& name, int digits = 3);
// `s` with <, >, &, " escaped for HTML.
[[nodiscard]] std::string html_escape(const std::string& s);

}  // namespace cpbench
