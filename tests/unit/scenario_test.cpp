// Scenario parsing: one place, precise errors naming file and key, cartesian product of cases.
#include <gtest/gtest.h>

#include "harness/runner/scenario.hpp"
#include "sharders/core/check.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    (void)parse_scenario(yaml, "scenarios/x.yaml", overrides);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Scenario, IssueExampleExpandsToTheCartesianProduct) {
  const char* yaml = R"(
name: quick-correctness
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 250, documents: [100, 90, 60], padding_token_id: 0}
mask: causal
dtype: float64
device: cpu
sweep:
  sharder: [contiguous, load_balanced, striped, thd, sdpa_wrap]
  transport: [allgather, ring]
  cp: [1, 2, 3, 4]
expect: match
)";
  ScenarioSpec s = parse_scenario(yaml, "x.yaml");
  EXPECT_EQ(s.name, "quick-correctness");
  ASSERT_EQ(s.cases.size(), 5u * 2u * 4u);
  EXPECT_EQ(s.cases[0].name(), "contiguous/allgather/cp1/causal/float64");
  EXPECT_EQ(s.cases.back().name(), "sdpa_wrap/ring/cp4/causal/float64");
  EXPECT_EQ(s.batch.documents.size(), 1u);
  EXPECT_EQ(s.batch.documents[0], (std::vector<int64_t>{100, 90, 60}));
  for (size_t i = 0; i < s.cases.size(); ++i) EXPECT_EQ(s.cases[i].index, static_cast<int64_t>(i));
}

TEST(Scenario, SweepBlocksAliasesAndOverrides) {
  const char* yaml = R"(
sweep:
  - {sharder: round_robin, transport: ring, cp: [2, 3], mask: [causal, "sliding_window:16"]}
  - {sharder: local_only, cp: 2, expect: mismatch}
)";
  ScenarioSpec s = parse_scenario(yaml, "x.yaml");
  ASSERT_EQ(s.cases.size(), 5u);
  EXPECT_EQ(s.cases[0].sharder, "load_balanced");  // alias resolved
  EXPECT_EQ(s.cases[1].mask.to_string(), "sliding_window:16");
  EXPECT_EQ(s.cases[4].expect, Expect::mismatch);
  ScenarioSpec o = parse_scenario(yaml, "x.yaml", {"cp=[4]", "transport=allgather"});
  ASSERT_EQ(o.cases.size(), 3u);
  for (const auto& c : o.cases) {
    EXPECT_EQ(c.cp, 4);
    EXPECT_EQ(c.transport, "allgather");
  }
  EXPECT_EQ(filter_cases(s.cases, "cp3").size(), 2u);
  EXPECT_EQ(filter_cases(s.cases, "^local_only/").size(), 1u);
}

// ulysses is an axis of hybrid only: the other transports ignore it (one case each).
TEST(Scenario, UlyssesIsAnAxisOfHybridOnly) {
  const ScenarioSpec s = parse_scenario("sweep: {transport: [ring, hybrid], ulysses: [1, 2], cp: 4}", "x.yaml");
  ASSERT_EQ(s.cases.size(), 3u);
  EXPECT_EQ(s.cases[0].name(), "load_balanced/ring/cp4/causal/float64");
  EXPECT_EQ(s.cases[0].ulysses, 0);
  EXPECT_EQ(s.cases[1].name(), "load_balanced/hybrid-u1/cp4/causal/float64");
  EXPECT_EQ(s.cases[2].ulysses, 2);
  EXPECT_EQ(s.cases[2].transport_options().ulysses, 2);
}

TEST(Scenario, ErrorsNameFileAndKey) {
  EXPECT_EQ(error_of("sweep: {cp: [1, 2, four]}"),
            "scenarios/x.yaml: sweep.cp[2]: expected a positive integer, got \"four\"");
  EXPECT_EQ(error_of("sweep: {cp: [0]}"), "scenarios/x.yaml: sweep.cp[0]: expected a positive integer, got \"0\"");
  EXPECT_NE(error_of("batch: {seq_len: -3}").find("scenarios/x.yaml: batch.seq_len: expected a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of("sweep: {sharder: [contiguos]}").find("sweep.sharder[0]: unknown sharder 'contiguos'; known sharders: contiguous"),
            std::string::npos);
  EXPECT_NE(error_of("sweep: {transport: carrier_pigeon}").find("sweep.transport: unknown attention transport 'carrier_pigeon' (known: allgather, ring, a2a, hybrid, a2a_rank_order)"), std::string::npos);
  // Head-parallel combinations that cannot split: one line naming both numbers (exit 2 in the CLI).
  EXPECT_EQ(error_of("model: {preset: tiny}\nsweep: {transport: a2a, cp: [2, 3]}"),
            "scenarios/x.yaml: sweep: cp 3: a2a: 4 query heads are not divisible by the all-to-all degree 3 (the CP "
            "size) (model.heads 4, model.kv_heads 2)");
  EXPECT_NE(error_of("sweep: {transport: hybrid, ulysses: 2, cp: 3}").find("hybrid: ulysses 2 does not divide the CP size 3"),
            std::string::npos);
  EXPECT_NE(error_of("sweep: {transport: hybrid, cp: 4}").find("sweep.ulysses: transport hybrid needs the Ulysses degree"),
            std::string::npos);
  EXPECT_NE(error_of("mask: diagonal").find("scenarios/x.yaml: mask:"), std::string::npos);
  EXPECT_NE(error_of("dtype: float8").find("unknown dtype 'float8'"), std::string::npos);
  EXPECT_NE(error_of("batch: {seq_len: 10, documents: [8, 8]}").find("batch.documents: documents sum to 16 tokens"),
            std::string::npos);
  EXPECT_NE(error_of("model: {preset: huge}").find("model.preset: unknown preset 'huge'"), std::string::npos);
  EXPECT_NE(error_of("model: {hidden: 60, heads: 8}").find("model.heads"), std::string::npos);
  EXPECT_NE(error_of("name: [unclosed").find("scenarios/x.yaml: line 1"), std::string::npos);
  EXPECT_NE(error_of("sweep: {cp: 2}", {"cp=[two]"}).find("-a cp=[two]: cp[0]: expected a positive integer"),
            std::string::npos);
}

TEST(Scenario, UnknownKeysGetADidYouMean) {
  const std::string e = error_of("sweeep: {cp: 2}");
  EXPECT_NE(e.find("scenarios/x.yaml: sweeep: unknown key; did you mean 'sweep'?"), std::string::npos) << e;
  const std::string e2 = error_of("batch: {seqlen: 2}");
  EXPECT_NE(e2.find("batch.seqlen: unknown key; did you mean 'seq_len'?"), std::string::npos) << e2;
  EXPECT_EQ(did_you_mean("transprot", {"sharder", "transport", "cp"}), "transport");
  EXPECT_EQ(did_you_mean("zzzzzz", {"sharder", "transport", "cp"}), "");
}

// `routes` pins a block's cases to kernel routes (not an axis: one case per combination still); an
// unknown route names the known ones, and "skipped" is not one a case can be pinned to.
TEST(Scenario, RoutesPinEveryCaseOfTheirBlock) {
  const ScenarioSpec s = parse_scenario(R"(
routes: cpu_flash
sweep:
  - {sharder: [contiguous, striped], cp: 2, routes: [cuda_flash, cuda_flash_window]}
  - {sharder: thd, cp: 2}
)", "x.yaml");
  ASSERT_EQ(s.cases.size(), 3u);
  EXPECT_EQ(s.cases[0].routes, (std::vector<std::string>{"cuda_flash", "cuda_flash_window"}));
  EXPECT_EQ(s.cases[1].routes, s.cases[0].routes);
  EXPECT_EQ(s.cases[2].routes, (std::vector<std::string>{"cpu_flash"}));
  EXPECT_TRUE(parse_scenario("sweep: {cp: 2}", "x.yaml").cases[0].routes.empty());
  const std::string e = error_of("sweep: {cp: 2, routes: [cuda_flsh]}");
  EXPECT_NE(e.find("sweep.routes[0]: unknown kernel route \"cuda_flsh\"; known: tiled, cpu_flash, cuda_flash, "
                   "cuda_flash_window, cuda_flash_varlen, cuda_efficient"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of("routes: skipped").find("unknown kernel route \"skipped\""), std::string::npos);
}

TEST(Scenario, MissingFileIsOneLine) {
  try {
    (void)load_scenario("/nonexistent/x.yaml");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/x.yaml: cannot open the scenario file");
  }
}

TEST(Scenario, ShippedScenariosParse) {
  for (const char* f : {"scenarios/quickstart.yaml", "scenarios/correctness.yaml"}) {
    ScenarioSpec s = load_scenario(std::string(CPBENCH_SOURCE_DIR) + "/" + f);
    EXPECT_FALSE(s.cases.empty()) << f;
  }
}
