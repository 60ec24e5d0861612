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
  // A batch of rows (--doc-lens 300,500,200/999): each row's document lengths, two or more rows; then
  // doc_lens is empty. For workload_balanced (one map for the batch, rows dispatched one by one, as
  // the runner's Sharder does) and thd (the rows' documents packed into one stream).
  std::vector<std::vector<int64_t>> rows;
  std::string format = "table";  // table | json
  std::string mask = "causal";
  int64_t chunk_size = 0;
};

// "7,12,5" -> doc_lens {7, 12, 5}; "300,500,200/999" -> rows {{300, 500, 200}, {999}} (a '/' between
// rows). UsageError naming --doc-lens on anything else.
void parse_doc_lens(const std::string& text, LayoutCommandOptions& options);
// Validates (UsageError on bad input) and computes the layout.
[[nodiscard]] GlobalLayout compute_layout_for_command(const LayoutCommandOptions& options);
[[nodiscard]] nlohmann::json layout_to_json(const GlobalLayout& layout);
// Human-readable: one line per rank with its owned spans, e.g. "0-3, 12-15", and how many of them are
// padding (past original_seq_len; thd: past the document's real length inside its padded slot).
// `rows`: the documents of each row of a layout over several rows (GlobalLayout::rows > 1).
[[nodiscard]] std::string layout_to_table(const GlobalLayout& layout, const std::vector<std::vector<int64_t>>& rows = {});
// "0-3, 12-15, 20"
[[nodiscard]] std::string spans_text(const std::vector<int64_t>& positions);

int run_layout_command(const LayoutCommandOptions& options);

}  // namespace cpbench
