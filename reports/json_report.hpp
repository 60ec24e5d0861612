#pragma once
// report.json: the stable, versioned schema (schema_version 3; reads 1 to 3). Reads back what it writes.
#include <nlohmann/json.hpp>

#include <string>

#include "reports/result.hpp"

namespace cpbench {

[[nodiscard]] nlohmann::json to_json(const RunResult& r);
[[nodiscard]] RunResult run_result_from_json(const nlohmann::json& j);
[[nodiscard]] nlohmann::json to_json(const RankTimeline& t);
[[nodiscard]] RankTimeline rank_timeline_from_json(const nlohmann::json& j);
[[nodiscard]] Timeline timeline_from_json(const nlohmann::json& j);
[[nodiscard]] nlohmann::json to_json(const Report& r);
[[nodiscard]] Report report_from_json(const nlohmann::json& j);

// Writes atomically (temp file + rename) so a reader never sees half a report.
void write_json_file(const std::string& path, const nlohmann::json& j);
[[nodiscard]] nlohmann::json read_json_file(const std::string& path);

}  // namespace cpbench
