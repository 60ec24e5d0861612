#pragma once
// `cpbench layout`: shows which rank owns which token of a layout.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sharders/layout.hpp"

namespace cpbench {

struct LayoutCommandOptions {
  std::string sharder;
  int64_t cp = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> doc_lens;
  std::string format = "table";  // table | json
  std::string mask = "causal";
  int64_t chunk_size = 0;
};

// Validates (UsageError on bad input) and computes the layout.
[[nodiscard]] GlobalLayout compute_layout_for_command(const LayoutCommandOptions& options);
[[nodiscard]] nlohmann::json layout_to_json(const GlobalLayout& layout);
// Human-readable: one line per rank with its owned spans, e.g. "0-3, 12-15", and how many of them are
// padding (past original_seq_len; thd: past the document's real length inside its padded slot).
[[nodiscard]] std::string layout_to_table(const GlobalLayout& layout);
// "0-3, 12-15, 20"
[[nodiscard]] std::string spans_text(const std::vector<int64_t>& positions);

int run_layout_command(const LayoutCommandOptions& options);

}  // namespace cpbench
