#pragma once
// Human-readable reports from a Report: a terminal summary, Markdown tables, and a self-contained
// HTML page with SVG charts (opens offline). Formatting only; every number comes from the records.
#include <string>

#include "reports/result.hpp"

namespace cpbench {

[[nodiscard]] std::string summary_table(const Report& report);
[[nodiscard]] std::string markdown_report(const Report& report);
[[nodiscard]] std::string html_report(const Report& report);
// Atomic write (temp + rename).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace cpbench
