// `cpbench layout`: the library functions behind it (compute_layout_for_command, layout_to_json,
// layout_to_table, spans_text, run_layout_command) and the real binary for all five sharders.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cli/layout_command.hpp"
#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;
using json = nlohmann::json;

namespace {

LayoutCommandOptions opts(const std::string& sharder, int64_t cp, int64_t seq_len, std::vector<int64_t> docs = {},
                          const std::string& format = "table") {
  LayoutCommandOptions o;
  o.sharder = sharder;
  o.cp = cp;
  o.seq_len = seq_len;
  o.doc_lens = std::move(docs);
  o.format = format;
  return o;
}

std::set<std::string> keys_of(const json& j) {
  std::set<std::string> k;
  for (const auto& [key, _] : j.items()) k.insert(key);
  return k;
}

const std::set<std::string> kUnpackedKeys = {"sharder", "cp", "original_seq_len", "padded_seq_len", "ranks"};
const std::set<std::string> kPackedKeys = {"sharder",        "cp",        "original_seq_len", "padded_seq_len",
                                           "ranks",          "cu_seqlens", "cu_seqlens_padded"};

std::string usage_error(const LayoutCommandOptions& o) {
  try {
    (void)compute_layout_for_command(o);
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UsageError: " << e.what();
    return {};
  }
  ADD_FAILURE() << "accepted bad options for " << o.sharder;
  return {};
}

// "(N padding)" of each rank line of a table; 0 where the line has none.
std::vector<int64_t> padding_column(const std::string& table) {
  std::vector<int64_t> out;
  std::istringstream is(table);
  std::string line;
  const std::regex rank_line(R"(^\s+\d+\s+\d+\s+.*$)");
  const std::regex pads(R"(\((\d+) padding\)$)");
  while (std::getline(is, line)) {
    if (!std::regex_match(line, rank_line)) continue;
    std::smatch m;
    out.push_back(std::regex_search(line, m, pads) ? std::stoll(m[1]) : 0);
  }
  return out;
}

}  // namespace

TEST(LayoutCommand, JsonShapeForAllFiveSharders) {
  for (const std::string& name : std::vector<std::string>{"contiguous", "load_balanced", "striped", "sdpa_wrap"}) {
    const GlobalLayout g = compute_layout_for_command(opts(name, 3, 10));
    const json j = layout_to_json(g);
    EXPECT_EQ(keys_of(j), kUnpackedKeys) << name;
    EXPECT_EQ(j["sharder"], name);
    EXPECT_EQ(j["cp"], 3);
    EXPECT_EQ(j["original_seq_len"], 10);
    EXPECT_EQ(j["padded_seq_len"], 12);  // 10 -> a multiple of 3 and of 6
    LayoutRequest req;
    req.cp = 3;
    req.seq_len = 10;
    EXPECT_EQ(j["ranks"].get<std::vector<std::vector<int64_t>>>(), make_layout(name)->compute(req).ranks) << name;
  }
  // cp 4, S 10: W-multiples pad to 12, 2W-multiples to 16.
  EXPECT_EQ(layout_to_json(compute_layout_for_command(opts("striped", 4, 10)))["padded_seq_len"], 12);
  EXPECT_EQ(layout_to_json(compute_layout_for_command(opts("sdpa_wrap", 4, 10)))["padded_seq_len"], 16);
  // An alias reports the canonical name.
  EXPECT_EQ(layout_to_json(compute_layout_for_command(opts("round_robin", 2, 8)))["sharder"], "load_balanced");

  const json t = layout_to_json(compute_layout_for_command(opts("thd", 2, 0, {3, 5})));
  EXPECT_EQ(keys_of(t), kPackedKeys);
  EXPECT_EQ(t["sharder"], "thd");
  EXPECT_TRUE(t["original_seq_len"].is_null());
  EXPECT_EQ(t["padded_seq_len"], 12);
  EXPECT_EQ(t["cu_seqlens"], json::parse("[0, 3, 8]"));
  EXPECT_EQ(t["cu_seqlens_padded"], json::parse("[0, 4, 12]"));
  EXPECT_EQ(t["ranks"], json::parse("[[0, 3, 4, 5, 10, 11], [1, 2, 6, 7, 8, 9]]"));
  // thd with only --seq-len: one document.
  const json one = layout_to_json(compute_layout_for_command(opts("thd", 2, 6)));
  EXPECT_EQ(one["cu_seqlens"], json::parse("[0, 6]"));
  EXPECT_EQ(one["cu_seqlens_padded"], json::parse("[0, 8]"));
}

TEST(LayoutCommand, UnpackedLayoutsTakeTheDocumentSumAsSeqLen) {
  const GlobalLayout g = compute_layout_for_command(opts("contiguous", 2, 0, {3, 4}));
  EXPECT_EQ(g.original_seq_len, 7);
  EXPECT_EQ(g.padded_seq_len, 8);
}

TEST(LayoutCommand, BadOptionsAreUsageErrors) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                               : ::testing::AssertionFailure() << "no \"" << part << "\" in: " << msg;
  };
  EXPECT_TRUE(has(usage_error(opts("bogus", 2, 8)), "unknown sharder 'bogus'; known sharders: " + known_layouts_text()));
  EXPECT_TRUE(has(usage_error(opts("load_balanced", 0, 8)), "--cp: expected a positive integer, got 0"));
  EXPECT_TRUE(has(usage_error(opts("load_balanced", 2, 8, {}, "xml")), "--format: expected table or json, got 'xml'"));
  EXPECT_TRUE(has(usage_error(opts("thd", 2, 0, {3, 0, 4})), "--doc-lens[1]: expected a positive length, got 0"));
  EXPECT_TRUE(has(usage_error(opts("thd", 2, 0)), "--doc-lens (or --seq-len for one document) is required for thd"));
  EXPECT_TRUE(has(usage_error(opts("thd", 2, 6, {3, 5})), "--doc-lens sum to 8 tokens, more than --seq-len 6"));
  EXPECT_TRUE(has(usage_error(opts("striped", 2, 0)), "--seq-len: expected a positive integer for striped, got 0"));
  EXPECT_TRUE(has(usage_error(opts("striped", 2, 4, {3, 5})), "--doc-lens sum to 8 tokens, more than --seq-len 4"));
}

TEST(LayoutCommand, SpansText) {
  EXPECT_EQ(spans_text({}), "");
  EXPECT_EQ(spans_text({5}), "5");
  EXPECT_EQ(spans_text({0, 1, 2, 3, 12, 13, 14, 15, 20}), "0-3, 12-15, 20");
  EXPECT_EQ(spans_text({0, 3, 4, 5, 10, 11}), "0, 3-5, 10-11");
  EXPECT_EQ(spans_text({7, 6}), "7, 6");  // local order, not sorted
}

TEST(LayoutCommand, TableForUnpackedLayouts) {
  EXPECT_EQ(layout_to_table(compute_layout_for_command(opts("contiguous", 2, 7))),
            "sharder contiguous, cp 2, seq_len 7, padded to 8 (4 tokens per rank)\n"
            "rank  tokens  global positions (local order)\n"
            "   0  4  0-3\n"
            "   1  4  4-7   (1 padding)\n");
  EXPECT_EQ(layout_to_table(compute_layout_for_command(opts("load_balanced", 2, 5))),
            "sharder load_balanced, cp 2, seq_len 5, padded to 8 (4 tokens per rank)\n"
            "rank  tokens  global positions (local order)\n"
            "   0  4  0-1, 6-7   (2 padding)\n"
            "   1  4  2-5   (1 padding)\n");
}

TEST(LayoutCommand, TableShowsThdPaddingPerRank) {
  // docs 3 and 5 at cp 2 -> slots of 4 and 8; padding at 3 (doc 0) and 9, 10, 11 (doc 1).
  EXPECT_EQ(layout_to_table(compute_layout_for_command(opts("thd", 2, 0, {3, 5}))),
            "sharder thd, cp 2, padded to 12 (6 tokens per rank)\n"
            "documents (real lengths):  cu_seqlens        [0, 3, 8]\n"
            "documents (padded stream): cu_seqlens_padded [0, 4, 12]\n"
            "rank  tokens  global positions (local order)\n"
            "   0  6  0, 3-5, 10-11   (3 padding)\n"
            "   1  6  1-2, 6-9   (1 padding)\n");
  // Over many mixes: each rank's count equals an independent count, and they sum to P - sum(docs).
  const std::vector<std::vector<int64_t>> mixes = {{1}, {3, 5, 7}, {8, 8}, {1, 17, 64}, {100, 1, 31}, {2, 3, 5, 7, 11}};
  for (int64_t W = 1; W <= 8; ++W)
    for (const auto& docs : mixes) {
      const GlobalLayout g = compute_layout_for_command(opts("thd", W, 0, docs));
      const std::vector<int64_t> column = padding_column(layout_to_table(g));
      ASSERT_EQ(static_cast<int64_t>(column.size()), W) << layout_to_table(g);
      int64_t real_total = 0, pad_total = 0;
      for (auto d : docs) real_total += d;
      for (int64_t r = 0; r < W; ++r) {
        int64_t expected = 0;
        for (int64_t p : g.ranks[static_cast<size_t>(r)]) {
          size_t d = 0;
          while (g.cu_seqlens_padded[d + 1] <= p) ++d;
          expected += p - g.cu_seqlens_padded[d] >= docs[d];
        }
        EXPECT_EQ(column[static_cast<size_t>(r)], expected) << "W=" << W << " rank " << r;
        pad_total += column[static_cast<size_t>(r)];
      }
      EXPECT_EQ(pad_total, g.padded_seq_len - real_total) << "W=" << W;
    }
}

TEST(LayoutCommand, RunLayoutCommandPrintsJsonOrTable) {
  for (const auto& o : {opts("thd", 3, 0, {5, 9}, "json"), opts("striped", 3, 10, {}, "json"),
                        opts("load_balanced", 2, 6, {}, "table")}) {
    ::testing::internal::CaptureStdout();
    const int rc = run_layout_command(o);
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(rc, 0);
    const GlobalLayout g = compute_layout_for_command(o);
    if (o.format == "json")
      EXPECT_EQ(json::parse(out), layout_to_json(g));
    else
      EXPECT_EQ(out, layout_to_table(g));
  }
}

// ---- the real binary ----
#ifdef CPBENCH_EXE
namespace {
struct CliRun {
  int status = -1;
  std::string out;
};
CliRun run_cpbench(const std::string& args, bool merge_stderr) {
  const std::string cmd = std::string(CPBENCH_EXE) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}
}  // namespace

TEST(LayoutCommandBinary, JsonForAllFiveSharders) {
  for (const std::string& name : std::vector<std::string>{"contiguous", "load_balanced", "striped", "thd", "sdpa_wrap"}) {
    const bool thd = name == "thd";
    const std::string args =
        "layout --sharder " + name + " --cp 3" + (thd ? " --doc-lens 3,7,12" : " --seq-len 10") + " --format json";
    const CliRun r = run_cpbench(args, false);
    ASSERT_EQ(r.status, 0) << args << "\n" << r.out;
    const json j = json::parse(r.out);
    EXPECT_EQ(keys_of(j), thd ? kPackedKeys : kUnpackedKeys) << name;
    EXPECT_EQ(j, layout_to_json(compute_layout_for_command(thd ? opts(name, 3, 0, {3, 7, 12}) : opts(name, 3, 10))))
        << name;
  }
}

TEST(LayoutCommandBinary, TableAndErrors) {
  const CliRun table = run_cpbench("layout --sharder thd --cp 2 --doc-lens 3,5", false);
  EXPECT_EQ(table.status, 0);
  EXPECT_EQ(table.out, layout_to_table(compute_layout_for_command(opts("thd", 2, 0, {3, 5}))));
  const CliRun bad = run_cpbench("layout --sharder bogus --cp 2 --seq-len 8", true);
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.out.find("cpbench: unknown sharder 'bogus'; known sharders: " + known_layouts_text()), std::string::npos)
      << bad.out;
  const CliRun zero = run_cpbench("layout --sharder striped --cp 0 --seq-len 8", true);
  EXPECT_EQ(zero.status, 2);
  EXPECT_NE(zero.out.find("--cp"), std::string::npos) << zero.out;
  EXPECT_EQ(run_cpbench("layout --sharder striped --cp 2 --seq-len 8 --format xml", true).status, 2);
}
#else
TEST(LayoutCommandBinary, JsonForAllFiveSharders) { GTEST_SKIP() << "CPBENCH_EXE is not defined for this build"; }
#endif
