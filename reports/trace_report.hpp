#pragma once
// trace.json: the cases' step timelines (RunResult::timeline) in the Chrome trace event format, which
// Perfetto (ui.perfetto.dev) and chrome://tracing open. One process per CP rank (pid = rank, named
// "rank r"), threads for the lanes (tid 0 phases, 1 attention compute and waits, 2 K/V transfers,
// 3 dK/dV transfers); "X" complete events with ts and dur in microseconds. Cases follow each other on
// the time axis, each starting after the previous one's longest rank plus a gap; every event carries
// its case in args. docs/timeline.md says how to read it.
#include <nlohmann/json.hpp>

#include "reports/result.hpp"

namespace cpbench {

// Thread ids of the lanes, and their names.
[[nodiscard]] int trace_tid(const std::string& lane);
[[nodiscard]] const char* trace_thread_name(int tid);

[[nodiscard]] nlohmann::json chrome_trace(const Report& report);

}  // namespace cpbench
