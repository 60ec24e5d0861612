#include "harness/cli/layout_command.hpp"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"
#include "sharders/stream.hpp"

namespace cpbench {

void parse_doc_lens(const std::string& text, LayoutCommandOptions& o) {
  std::vector<std::vector<int64_t>> rows(1);
  std::string item;
  const auto flush = [&](char sep) {
    CP_CHECK_USAGE(!item.empty(), "--doc-lens '", text, "': expected lengths separated by ',' (rows by '/'), got an "
                   "empty item before '", sep, "'");
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    CP_CHECK_USAGE(used == item.size(), "--doc-lens '", text, "': '", item, "' is not an integer");
    rows.back().push_back(v);
    item.clear();
  };
  for (char ch : text) {
    if (ch == ',' || ch == '/') {
      flush(ch);
      if (ch == '/') rows.emplace_back();
    } else if (ch != ' ') {
      item += ch;
    }
  }
  flush('$');
  o.doc_lens.clear();
  o.rows.clear();
  if (rows.size() == 1)
    o.doc_lens = rows.front();
  else
    o.rows = rows;
}

GlobalLayout compute_layout_for_command(const LayoutCommandOptions& o_in) {
  LayoutCommandOptions o = o_in;
  auto layout = make_layout(o.sharder);
  CP_CHECK_USAGE(o.cp >= 1, "--cp: expected a positive integer, got ", o.cp);
  CP_CHECK_USAGE(o.format == "table" || o.format == "json", "--format: expected table or json, got '", o.format, "'");
  CP_CHECK_USAGE(o.rows.empty() || o.doc_lens.empty(), "--doc-lens: give one row or rows, not both");
  for (size_t b = 0; b < o.rows.size(); ++b)
    for (size_t i = 0; i < o.rows[b].size(); ++i)
      CP_CHECK_USAGE(o.rows[b][i] >= 1, "--doc-lens row ", b, "[", i, "]: expected a positive length, got ",
                     o.rows[b][i]);
  if (o.rows.size() == 1) {
    o.doc_lens = o.rows.front();
    o.rows.clear();
  }
  if (!o.rows.empty() && layout->packed()) {
    // thd packs every row's documents into one stream, in order.
    for (const auto& r : o.rows) o.doc_lens.insert(o.doc_lens.end(), r.begin(), r.end());
    o.rows.clear();
  }
  if (!o.rows.empty()) {
    CP_CHECK_USAGE(layout->data_dependent(), "--doc-lens: rows ('/') are for a layout whose map depends on the batch "
                   "(workload_balanced, thd); ", layout->name(), " maps every row alike: give one row");
    int64_t longest = 0;
    for (const auto& r : o.rows) {
      int64_t total = 0;
      for (auto d : r) total += d;
      longest = std::max(longest, total);
    }
    LayoutRequest req;
    req.cp = o.cp;
    req.mask = MaskSpec::parse(o.mask);
    req.chunk_size = o.chunk_size;
    req.seq_len = o.seq_len >= 1 ? o.seq_len : longest;
    CP_CHECK_USAGE(longest <= req.seq_len, "--doc-lens: a row's documents sum to ", longest,
                   " tokens, more than --seq-len ", req.seq_len);
    req.rows = o.rows;
    try {
      return layout->compute(req);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  for (size_t i = 0; i < o.doc_lens.size(); ++i)
    CP_CHECK_USAGE(o.doc_lens[i] >= 1, "--doc-lens[", i, "]: expected a positive length, got ", o.doc_lens[i]);
  LayoutRequest req;
  req.cp = o.cp;
  req.mask = MaskSpec::parse(o.mask);
  req.chunk_size = o.chunk_size;
  if (layout->packed()) {
    CP_CHECK_USAGE(!o.doc_lens.empty() || o.seq_len >= 1, "--doc-lens (or --seq-len for one document) is required for ",
                   layout->name());
    req.doc_lens = o.doc_lens;
    req.seq_len = o.seq_len;
    if (!o.doc_lens.empty() && o.seq_len > 0) {
      int64_t total = 0;
      for (auto d : o.doc_lens) total += d;
      CP_CHECK_USAGE(total <= o.seq_len, "--doc-lens sum to ", total, " tokens, more than --seq-len ", o.seq_len);
    }
  } else {
    CP_CHECK_USAGE(o.seq_len >= 1 || !o.doc_lens.empty(), "--seq-len: expected a positive integer for ", layout->name(),
                   ", got ", o.seq_len);
    int64_t total = 0;
    for (auto d : o.doc_lens) total += d;
    req.seq_len = o.seq_len >= 1 ? o.seq_len : total;
    CP_CHECK_USAGE(total <= req.seq_len, "--doc-lens sum to ", total, " tokens, more than --seq-len ", req.seq_len);
    req.doc_lens = o.doc_lens;
  }
  try {
    return layout->compute(req);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

nlohmann::json layout_to_json(const GlobalLayout& g) {
  nlohmann::json j;
  j["sharder"] = g.layout;
  j["cp"] = g.cp;
  j["original_seq_len"] = g.original_seq_len >= 0 ? nlohmann::json(g.original_seq_len) : nlohmann::json(nullptr);
  j["padded_seq_len"] = g.padded_seq_len;
  if (g.rows > 1) j["rows"] = g.rows;
  j["ranks"] = g.ranks;
  if (!g.cu_seqlens_padded.empty()) {
    j["cu_seqlens"] = g.cu_seqlens;
    j["cu_seqlens_padded"] = g.cu_seqlens_padded;
  }
  return j;
}

std::string spans_text(const std::vector<int64_t>& pos) {
  std::ostringstream os;
  for (size_t i = 0; i < pos.size();) {
    size_t j = i;
    while (j + 1 < pos.size() && pos[j + 1] == pos[j] + 1) ++j;
    if (i) os << ", ";
    os << pos[i];
    if (j > i) os << "-" << pos[j];
    i = j + 1;
  }
  return os.str();
}

std::string layout_to_table(const GlobalLayout& g, const std::vector<std::vector<int64_t>>& rows) {
  std::ostringstream os;
  os << "sharder " << g.layout << ", cp " << g.cp;
  if (g.original_seq_len >= 0) os << ", seq_len " << g.original_seq_len;
  os << ", padded to " << g.padded_seq_len << " (" << g.local_len() << " tokens per rank)\n";
  if (!g.cu_seqlens_padded.empty()) {
    os << "documents (real lengths):  cu_seqlens        " << shape_str(g.cu_seqlens) << "\n";
    os << "documents (padded stream): cu_seqlens_padded " << shape_str(g.cu_seqlens_padded) << "\n";
  }
  if (g.rows > 1)
    os << "rows " << g.rows << ", each padded to " << g.padded_seq_len / g.rows << ": row b holds positions [b * "
       << g.padded_seq_len / g.rows << ", (b + 1) * " << g.padded_seq_len / g.rows << ")\n";
  // Which positions are padding: the stream metadata of the layout (sharders/stream.hpp).
  const Stream stream = stream_of(g, {}, rows);
  os << "rank  tokens  global positions (local order)\n";
  for (size_t r = 0; r < g.ranks.size(); ++r) {
    int64_t pads = 0;
    for (auto p : g.ranks[r]) pads += stream.tokens[static_cast<size_t>(p)].valid == 0;
    os << (r < 10 ? "   " : "  ") << r << "  " << g.ranks[r].size() << "  " << spans_text(g.ranks[r]);
    if (pads) os << "   (" << pads << " padding)";
    os << "\n";
  }
  return os.str();
}

int run_layout_command(const LayoutCommandOptions& o) {
  GlobalLayout g = compute_layout_for_command(o);
  if (o.format == "json")
    std::cout << layout_to_json(g).dump() << "\n";
  else
    std::cout << layout_to_table(g, g.rows > 1 ? o.rows : std::vector<std::vector<int64_t>>{});
  return 0;
}

}  // namespace cpbench
