// scripts/gpu-check.sh's budgets proven on the CPU: each step's basis (its key=value counts) against
// what the step really runs (the scenarios' cases and rank launches, the GPU tests, the benchmark's
// points), each budget against its own basis, both paths within the total; and every find_package the
// fallback build needs has its .deb in scripts/gpu-debs.list.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "harness/runner/scenario.hpp"
#include "tests/bench/attention_shapes.hpp"
#include "tests/gpu/gpu_cases.hpp"
#include "tests/test_paths.hpp"

namespace cpbench {
namespace {

std::string read_text(const std::string& relative) {
  std::ifstream in(std::string(CPBENCH_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in) << relative;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Step {
  int budget = -1;
  std::map<std::string, double> basis;  // the key=value counts before the basis's first ':'
  std::string text;
};

// B_<X>=N (or $(... || echo N), the default without nsys) and W_<X>="k=v k=v: words".
std::map<std::string, Step> script_steps(const std::string& script) {
  std::map<std::string, Step> steps;
  const std::regex budget(R"(\nB_([A-Z_0-9]+)=(?:(\d+);|\$\(.*\|\| echo (\d+)\)))");
  for (auto it = std::sregex_iterator(script.begin(), script.end(), budget); it != std::sregex_iterator(); ++it)
    steps[(*it)[1]].budget = std::stoi((*it)[2].matched ? (*it)[2].str() : (*it)[3].str());
  const std::regex basis("\\s(?:W_)([A-Z_0-9]+)=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(script.begin(), script.end(), basis); it != std::sregex_iterator(); ++it) {
    Step& s = steps[(*it)[1]];
    s.text = (*it)[2];
    std::istringstream words(s.text.substr(0, s.text.find(':')));
    for (std::string w; words >> w;)
      if (const size_t eq = w.find('='); eq != std::string::npos) s.basis[w.substr(0, eq)] = std::stod(w.substr(eq + 1));
  }
  return steps;
}

double get(const Step& s, const std::string& key) { return s.basis.count(key) ? s.basis.at(key) : 0.0; }

// The time a step's basis says it needs: its launches' starts, its cases, tests and benchmark runs.
double basis_seconds(const Step& s) {
  return get(s, "start_s") * std::max(1.0, get(s, "launches")) + get(s, "cases") * get(s, "per_case_s") +
         get(s, "tests") * get(s, "per_test_s") + get(s, "binaries") * get(s, "per_binary_s") +
         get(s, "points") * get(s, "runs") * get(s, "iters") * get(s, "per_run_s");
}

// The rank launches `cpbench run` makes for a scenario: one per distinct world size (sweep.cpp).
int64_t launches(const ScenarioSpec& s) {
  std::set<int64_t> worlds;
  for (const CaseSpec& c : s.cases) worlds.insert(c.world_size());
  return static_cast<int64_t>(worlds.size());
}

TEST(GpuCheck, EveryStepsBasisCountsWhatItRunsAndItsBudgetCoversIt) {
  const std::map<std::string, Step> steps = script_steps(read_text("scripts/gpu-check.sh"));
  for (const char* name : {"PREFLIGHT", "PREBUILT", "BUILD", "GPU_TESTS", "W1", "SHARED", "HYBRID", "THROUGHPUT", "WN"}) {
    ASSERT_TRUE(steps.count(name)) << "B_" << name << " / W_" << name;
    EXPECT_GT(steps.at(name).budget, 0) << name;
    EXPECT_FALSE(steps.at(name).text.empty()) << "W_" << name;
  }
  // The scenario steps: the file the basis names, its real case count and launches (wN at two GPUs,
  // the smallest machine it runs on).
  const std::map<std::string, std::pair<std::string, std::vector<std::string>>> scenario_of = {
      {"W1", {"gpu_routes", {}}},
      {"SHARED", {"gpu_shared", {}}},
      {"HYBRID", {"gpu_shared_hybrid", {}}},
      {"WN", {"gpu_nccl_multi", {"cp=[2]"}}}};
  for (const auto& [name, file] : scenario_of) {
    const Step& st = steps.at(name);
    SCOPED_TRACE("W_" + name + ": " + st.text.substr(0, 120));
    EXPECT_NE(st.text.find("scenarios/" + file.first + ".yaml"), std::string::npos) << "the basis names its scenario";
    const ScenarioSpec s = load_scenario(std::string(CPBENCH_SOURCE_DIR) + "/scenarios/" + file.first + ".yaml", file.second);
    EXPECT_EQ(get(st, "cases"), static_cast<double>(s.cases.size())) << "cases in scenarios/" << file.first << ".yaml";
    EXPECT_EQ(get(st, "launches"), static_cast<double>(launches(s))) << "rank launches (distinct world sizes)";
    EXPECT_GT(get(st, "per_case_s"), 0);
    EXPECT_GT(get(st, "start_s"), 0);
  }
  // The GPU tests: every TEST in tests/gpu/gpu_test.cpp, and the runner test's scenario.
  {
    const Step& st = steps.at("GPU_TESTS");
    const std::string src = read_text("tests/gpu/gpu_test.cpp");
    const std::regex test(R"(\nTEST(_F|_P)?\()");
    const auto n = std::distance(std::sregex_iterator(src.begin(), src.end(), test), std::sregex_iterator());
    EXPECT_EQ(get(st, "tests"), static_cast<double>(n)) << "TESTs in tests/gpu/gpu_test.cpp";
    const ScenarioSpec runner = parse_scenario(gpu_cases::runner_scenario_yaml(), "runner_scenario_yaml");
    EXPECT_EQ(get(st, "cases"), static_cast<double>(runner.cases.size())) << "the runner test's cases";
    EXPECT_EQ(get(st, "launches"), static_cast<double>(launches(runner)));
  }
  // The benchmark: its GPU points times its transports, warm-up + timed iterations.
  {
    const Step& st = steps.at("THROUGHPUT");
    EXPECT_EQ(get(st, "points"), static_cast<double>(bench::gpu_attention_points().size() *
                                                     bench::attention_bench_transports().size()));
    EXPECT_EQ(get(st, "iters"), static_cast<double>(1 + bench::kGpuIterations));
    EXPECT_EQ(get(st, "runs"), 3) << "the transport, SDPA pinned to flash, SDPA's own choice";
  }
  for (const auto& [name, st] : steps) {
    if (name == "BUILD" || name == "NSYS" || st.budget <= 0) continue;
    EXPECT_GE(st.budget, basis_seconds(st)) << "B_" << name << " is under its own basis: " << st.text.substr(0, 160);
  }
}

// The two paths' sums as the script checks them (prebuilt <= 420 s, fallback <= 520 s, of 540 s).
TEST(GpuCheck, BothPathsFitTheTotal) {
  const std::string script = read_text("scripts/gpu-check.sh");
  const std::map<std::string, Step> steps = script_steps(script);
  int prebuilt = 0;
  for (const char* n : {"PREFLIGHT", "PREBUILT", "GPU_TESTS", "W1", "SHARED", "HYBRID", "THROUGHPUT", "WN"})
    prebuilt += steps.at(n).budget;
  const auto value = [&](const std::string& var) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(script, m, std::regex("\n" + var + "=(\\d+)"))) << var;
    return m.empty() ? 0 : std::stoi(m[1]);
  };
  EXPECT_LE(prebuilt, value("MAX_STEPS_SUM"));
  EXPECT_LE(value("MAX_STEPS_SUM"), 420);
  EXPECT_LE(prebuilt + steps.at("BUILD").budget, value("MAX_FALLBACK_SUM"));
  EXPECT_LE(value("MAX_FALLBACK_SUM"), value("TOTAL_BUDGET"));
  EXPECT_LE(value("TOTAL_BUDGET"), 540);
}

// The fallback build's find_package / find_path calls each have their Debian packages listed (and so
// fetched, carried and looked for by the preflight), or are the GPU machine's own.
TEST(GpuCheck, EveryFindPackageHasItsDeb) {
  const std::string cmake = read_text("CMakeLists.txt");
  std::set<std::string> needed;
  const std::regex find(R"(\n\s*find_(?:package|path)\((\w[\w-]*))");
  for (auto it = std::sregex_iterator(cmake.begin(), cmake.end(), find); it != std::sregex_iterator(); ++it)
    needed.insert((*it)[1]);
  EXPECT_GE(needed.size(), 8u);
  std::map<std::string, std::string> listed;
  std::istringstream list(read_text("scripts/gpu-debs.list"));
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    ASSERT_NE(colon, std::string::npos) << line;
    const std::string name = line.substr(0, colon);
    if (name == "machine") {
      std::istringstream own(line.substr(colon + 1));
      for (std::string w; own >> w;) listed[w] = "(the GPU machine's own)";
    } else {
      listed[name] = line.substr(colon + 1);
    }
  }
  for (const std::string& n : needed) {
    ASSERT_TRUE(listed.count(n)) << "CMakeLists.txt: find " << n << " has no .deb in scripts/gpu-debs.list";
    EXPECT_NE(listed.at(n).find_first_not_of(' '), std::string::npos) << n << ": no package named";
  }
}

}  // namespace
}  // namespace cpbench
