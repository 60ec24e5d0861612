#pragma once
// The performance sections of report.md and report.html: per case, the step and its parts, achieved
// TFLOP/s and MFU against the peak (and its source), kernel efficiency, each collective's busbw next to
// the link's nominal, and the noise verdict; the HTML adds a strip plot of every timed step's sample.
#include <string>

#include "reports/result.hpp"

namespace cpbench {

[[nodiscard]] std::string markdown_performance(const Report& rep);
[[nodiscard]] std::string html_performance(const Report& rep);

}  // namespace cpbench
