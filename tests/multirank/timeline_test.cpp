// What a user sees of one step: `cpbench run` under the NVTX recorder (tests/nvtx_recorder), one case
// per transport at W = 2. The NVTX test proves every range docs/timeline.md lists is emitted by every
// rank, with that name, properly nested; the trace test loads trace.json as a Chrome-trace reader would
// and checks each rank's events against the step they belong to; the report test finds the timeline in
// report.json and report.html. One run serves all three (SetUpTestSuite).
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/fs_util.hpp"
#include "spawn_cpbench.hpp"
#include "reports/json_report.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {

constexpr int kW = 2;
// Case 0 and case 1 of the scenario below, in order.
const std::vector<std::pair<std::string, std::string>> kCases = {{"contiguous", "allgather"},
                                                                 {"load_balanced", "ring"}};

const char* kScenario = R"(name: timeline
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64}
dtype: float64
measure: {warmup: 0, iters: 1}
timeout_s: 60
sweep:
  - sharder: contiguous
    transport: allgather
    cp: 2
    mask: causal
  - sharder: load_balanced
    transport: ring
    cp: 2
    mask: causal
)";

// The phase ranges every rank opens per case, under cp:<sharder>: (docs/timeline.md), and what each
// is nested in ("" = top level). `reference` runs on the first rank of each CP group only. `gather`
// (what the check compares) follows a checked step, outside every timed one.
const std::vector<std::pair<std::string, std::string>> kPhases = {
    {"step", ""}, {"shard", "step"}, {"forward", "step"}, {"backward", "step"}, {"gather", ""}, {"check", ""}};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Run {
  std::string dir, out, nvtx_dir;
  int exit_code = -1;
};
Run g_run;

int run_cpbench(const std::string& scenario, const std::string& out, const std::string& nvtx_dir) {
  return test::wait_exit_status(test::spawn_cpbench_run(
      {scenario, "--out", out},
      {std::string("NVTX_INJECTION64_PATH=") + CPBENCH_NVTX_RECORDER, "CPBENCH_NVTX_RECORD_DIR=" + nvtx_dir}));
}

// One range as the recorder saw it: its name, the enclosing range on the same thread ("" = none).
struct Range {
  std::string name, parent;
  long thread = 0;
};

struct RankRanges {
  std::vector<Range> ranges;
  std::vector<std::string> unbalanced;  // threads whose pushes and pops do not pair up
};

// Parses the recorder's files; keyed by the RANK each rank process recorded.
std::map<int, RankRanges> read_ranges(const std::string& dir) {
  std::map<int, RankRanges> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  std::vector<std::string> files;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("nvtx-", 0) == 0) files.push_back(dir + "/" + n);
  }
  ::closedir(d);
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string line;
    std::getline(in, line);  // # pid P rank R
    std::istringstream hdr(line);
    std::string hash, pid_kw, pid, rank_kw, rank;
    hdr >> hash >> pid_kw >> pid >> rank_kw >> rank;
    if (rank == "-" || rank.empty()) continue;  // the launcher, not a rank
    RankRanges& rr = out[std::stoi(rank)];
    std::map<long, std::vector<std::string>> stacks;
    while (std::getline(in, line)) {
      std::vector<std::string> col;
      std::stringstream ls(line);
      std::string c;
      while (std::getline(ls, c, '\t')) col.push_back(c);
      if (col.size() < 4) continue;
      const long tid = std::stol(col[1]);
      auto& st = stacks[tid];
      if (col[0] == "push" && col.size() >= 5) {
        rr.ranges.push_back({col[4], st.empty() ? "" : st.back(), tid});
        st.push_back(col[4]);
      } else if (col[0] == "pop") {
        if (st.empty())
          rr.unbalanced.push_back("thread " + col[1] + ": pop without a push");
        else
          st.pop_back();
      }
    }
    for (const auto& [tid, st] : stacks)
      if (!st.empty()) rr.unbalanced.push_back("thread " + std::to_string(tid) + ": " + st.back() + " never popped");
  }
  return out;
}

class StepTimeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_run.dir = "/tmp/cpbench-timeline-test-" + std::to_string(::getpid());
    fsu::remove_tree(g_run.dir);
    g_run.out = g_run.dir + "/out";
    g_run.nvtx_dir = g_run.dir + "/nvtx";
    fsu::make_dirs(g_run.nvtx_dir);
    const std::string scenario = g_run.dir + "/timeline.yaml";
    std::ofstream(scenario) << kScenario;
    g_run.exit_code = run_cpbench(scenario, g_run.out, g_run.nvtx_dir);
  }
  static void TearDownTestSuite() {
    if (!::testing::Test::HasFailure()) fsu::remove_tree(g_run.dir);
  }
  void SetUp() override { ASSERT_EQ(g_run.exit_code, 0) << "cpbench run failed; output in " << g_run.out; }
};

}  // namespace

TEST_F(StepTimeline, EveryRankEmitsEveryDocumentedNvtxRangeProperlyNested) {
  const std::map<int, RankRanges> by_rank = read_ranges(g_run.nvtx_dir);
  ASSERT_EQ(by_rank.size(), static_cast<size_t>(kW))
      << "expected one recorder file per rank in " << g_run.nvtx_dir << " (was the injection library loaded?)";
  const std::string doc = read_text(std::string(CPBENCH_SOURCE_DIR) + "/docs/timeline.md");
  for (const auto& [rank, rr] : by_rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_TRUE(rr.unbalanced.empty()) << rr.unbalanced.front();
    // (name, parent) pairs seen, and every cp: range name.
    std::set<std::pair<std::string, std::string>> seen;
    std::set<std::string> names;
    for (const auto& r : rr.ranges) {
      seen.insert({r.name, r.parent});
      names.insert(r.name);
    }
    std::set<std::string> expected_names;
    for (const auto& [sharder, transport] : kCases) {
      SCOPED_TRACE(sharder + " / " + transport);
      const std::string p = "cp:" + sharder + ":";
      const auto expect_in = [&](const std::string& name, const std::string& parent) {
        expected_names.insert(p + name);
        const std::string full_parent = parent.empty() ? "" : p + parent;
        EXPECT_TRUE(seen.count({p + name, full_parent}))
            << p << name << " was not emitted " << (parent.empty() ? "at top level" : "inside " + full_parent);
      };
      for (const auto& [phase, parent] : kPhases) expect_in(phase, parent);
      if (rank == 0) {
        expect_in("reference", "");
      } else {
        EXPECT_FALSE(names.count(p + "reference")) << "only the first rank of a CP group runs the reference";
      }
      // The transport's steps, inside the pass they belong to; the attention compute and
      // communication inside a step or its pass.
      std::set<std::string> attn_parents = {p + "forward", p + "backward"};
      for (int s = 0; s < kW; ++s) {
        for (const char* pass : {"fwd", "bwd"}) {
          const std::string step = transport + "_" + pass + ":" + std::to_string(s);
          expect_in(step, pass == std::string("fwd") ? "forward" : "backward");
          attn_parents.insert(p + step);
        }
      }
      for (const char* attn : {"attn_compute", "attn_comm"}) {
        expected_names.insert(p + attn);
        EXPECT_TRUE(names.count(p + attn)) << p << attn << " was not emitted";
        for (const auto& r : rr.ranges) {
          if (r.name == p + attn) {
            EXPECT_TRUE(attn_parents.count(r.parent)) << p << attn << " inside '" << r.parent << "'";
          }
        }
      }
    }
    // Nothing else under cp: (a renamed range shows up here as well as missing above).
    for (const auto& n : names)
      if (n.rfind("cp:", 0) == 0) {
        EXPECT_TRUE(expected_names.count(n)) << "undocumented range " << n;
      }
  }
  // The names are the ones the docs list.
  for (const auto& [phase, parent] : kPhases)
    EXPECT_NE(doc.find("`cp:<sharder>:" + phase + "`"), std::string::npos) << phase << " is not in docs/timeline.md";
  for (const char* n : {"reference", "attn_compute", "attn_comm"})
    EXPECT_NE(doc.find(std::string("`cp:<sharder>:") + n + "`"), std::string::npos)
        << n << " is not in docs/timeline.md";
  for (const char* n : {"<transport>_fwd:<step>", "<transport>_bwd:<step>"})
    EXPECT_NE(doc.find(std::string("`cp:<sharder>:") + n + "`"), std::string::npos)
        << n << " is not in docs/timeline.md";
}

TEST_F(StepTimeline, TraceJsonHasEveryRanksPhasesNestedInTheStep) {
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(std::ifstream(g_run.out + "/trace.json"))) << "not valid JSON";
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  std::set<int> named_processes;
  // (case index, pid) -> events
  std::map<std::pair<int, int>, std::vector<nlohmann::json>> events;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") named_processes.insert(e["pid"].get<int>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    EXPECT_TRUE(std::isfinite(ts) && std::isfinite(dur) && ts >= 0 && dur >= 0) << e.dump();
    events[{e["args"]["case_index"].get<int>(), e["pid"].get<int>()}].push_back(e);
  }
  EXPECT_EQ(named_processes, (std::set<int>{0, 1}));
  for (int c = 0; c < static_cast<int>(kCases.size()); ++c) {
    const std::string transport = kCases[static_cast<size_t>(c)].second;
    for (int rank = 0; rank < kW; ++rank) {
      SCOPED_TRACE("case " + std::to_string(c) + " rank " + std::to_string(rank));
      const auto& ev = events[{c, rank}];
      ASSERT_FALSE(ev.empty()) << "no events";
      const nlohmann::json* step = nullptr;
      for (const auto& e : ev)
        if (e["name"] == "step" && e["tid"] == 0) step = &e;
      ASSERT_NE(step, nullptr) << "no step event";
      const double t0 = (*step)["ts"].get<double>(), t1 = t0 + (*step)["dur"].get<double>();
      EXPECT_GT(t1, t0);
      std::set<std::string> seen;
      const double eps = 1e-3;  // us: the doubles' rounding, not a timing tolerance
      for (const auto& e : ev) {
        const double ts = e["ts"].get<double>(), te = ts + e["dur"].get<double>();
        EXPECT_GE(ts, t0 - eps) << e.dump();
        EXPECT_LE(te, t1 + eps) << e.dump();
        seen.insert(std::to_string(e["tid"].get<int>()) + "/" + e["name"].get<std::string>());
      }
      for (const char* ph : {"shard", "forward", "backward"})
        EXPECT_TRUE(seen.count(std::string("0/") + ph)) << ph;
      EXPECT_FALSE(seen.count("0/gather")) << "the timed step is the training step: no gathers inside it";
      for (int s = 0; s < kW; ++s)
        for (const char* pass : {"_fwd:", "_bwd:"})
          EXPECT_TRUE(seen.count("1/" + transport + pass + std::to_string(s))) << transport << pass << s;
      if (transport == "ring") {
        EXPECT_TRUE(seen.count("2/ring_fwd:0")) << "no K/V transfer in flight";
        EXPECT_TRUE(seen.count("3/ring_bwd:1")) << "no dK/dV transfer in flight";
      } else {
        EXPECT_TRUE(seen.count("2/allgather_fwd:all_gather"));
        EXPECT_TRUE(seen.count("3/allgather_bwd:reduce_scatter"));
      }
    }
  }
}

TEST_F(StepTimeline, ReportsCarryTheTimeline) {
  const Report rep = report_from_json(read_json_file(g_run.out + "/report.json"));
  EXPECT_EQ(rep.schema_version, 4);
  ASSERT_EQ(rep.results.size(), kCases.size());
  for (const auto& r : rep.results) {
    ASSERT_EQ(r.timeline.ranks.size(), static_cast<size_t>(kW)) << r.name;
    EXPECT_EQ(r.timeline.clock, "steady");
  }
  const std::string html = read_text(g_run.out + "/report.html");
  EXPECT_NE(html.find("Timeline of the median timed step"), std::string::npos);
  EXPECT_NE(html.find("rank 1 ring_fwd:1"), std::string::npos) << "no ring step block in the Gantt chart";
}
