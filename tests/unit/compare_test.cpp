// The regression gate: decisions from the timed samples (Mann-Whitney U at alpha plus an effect-size
// threshold), inconclusive for too few samples / noisy runs / insignificant drops, ok->failed/skipped/
// missing transitions, pooling of A/B rounds, and the report schema's round trip.
#include <gtest/gtest.h>

#include "reports/compare.hpp"
#include "reports/json_report.hpp"
#include "reports/statistics.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {
// `n` step-time samples around `median_s` with a relative jitter of +-`jitter` (deterministic).
std::vector<double> samples(double median_s, double jitter, int n, unsigned seed = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-jitter, jitter);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(median_s * (1 + u(g)));
  return v;
}
RunResult result(const std::string& name, std::vector<double> steps, const std::string& status = "ok",
                 const std::string& verdict = "quiet") {
  RunResult r;
  r.name = name;
  r.status = status;
  const double m = stats::median(steps);
  r.metrics.push_back({"tokens_per_s", m > 0 ? 1000 / m : 0, "tokens/s", stats::range_spread(steps)});
  r.metrics.push_back({"step_s", m, "s", 0});
  r.measurement.step_s = std::move(steps);
  r.measurement.verdict = verdict;
  if (verdict == "noisy") {
    r.measurement.verdict_reason = "2 runnable threads outside this run";
    r.measurement.machine.others_runnable_mean = 2;
  }
  return r;
}
Report report(std::vector<RunResult> rs) {
  Report r;
  r.results = std::move(rs);
  r.total_cases = static_cast<int64_t>(r.results.size());
  return r;
}
}  // namespace

TEST(Statistics, MedianNoiseShrinksWithSamplesAndMannWhitneyMatchesScipy) {
  EXPECT_DOUBLE_EQ(stats::median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(stats::median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(stats::median_noise({1.0}), 0);
  EXPECT_GT(stats::median_noise(samples(1, 0.2, 10)), stats::median_noise(samples(1, 0.2, 400)));
  EXPECT_LT(stats::median_noise(samples(1, 0.2, 400)), 0.05);
  // scipy.stats.mannwhitneyu([1,2,3,4,5], [6,7,8,9,10], method="exact"): U = 0, p = 2/252 = 0.007937
  // (the asymptotic method said 0.01218; few samples without ties are counted exactly now).
  const stats::MannWhitney u = stats::mann_whitney({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_DOUBLE_EQ(u.u, 0);
  EXPECT_TRUE(u.exact);
  EXPECT_NEAR(u.p_two_sided, 2.0 / 252, 1e-12);
  // With ties: mannwhitneyu([1,2,2,3], [2,3,3,4], method="asymptotic") -> U = 3, p = 0.17203 (tie-corrected).
  const stats::MannWhitney t = stats::mann_whitney({1, 2, 2, 3}, {2, 3, 3, 4});
  EXPECT_DOUBLE_EQ(t.u, 3);
  EXPECT_NEAR(t.p_two_sided, 0.17203, 1e-4);
  EXPECT_DOUBLE_EQ(stats::mann_whitney({1, 1}, {1, 1}).p_two_sided, 1.0);
}

TEST(Compare, SameSamplesPassHalvedThroughputFails) {
  const Report base = report({result("a", samples(0.1, 0.02, 20)), result("b", samples(0.2, 0.02, 20, 2))});
  EXPECT_EQ(compare_reports(base, base).exit_status(), 0);
  const Report half = report({result("a", samples(0.2, 0.02, 20, 3)), result("b", samples(0.2, 0.02, 20, 4))});
  const Comparison c = compare_reports(base, half);
  EXPECT_TRUE(c.cases[0].regression);
  EXPECT_FALSE(c.cases[1].regression);
  EXPECT_LT(c.cases[0].p_value, 1e-6);
  EXPECT_NEAR(c.cases[0].delta, -0.5, 0.03);
  EXPECT_NE(comparison_table(c).find("REGRESSION: throughput fell"), std::string::npos) << comparison_table(c);
  EXPECT_NE(c.cases[0].why.find("Mann-Whitney exact p = "), std::string::npos) << c.cases[0].why;
}

TEST(Compare, ADropBelowTheThresholdIsOkEvenWhenSignificant) {
  const Report base = report({result("a", samples(0.100, 0.005, 40))});
  const Report next = report({result("a", samples(0.103, 0.005, 40, 9))});  // 3% slower, clearly significant
  const Comparison c = compare_reports(base, next, CompareOptions{0.05});
  EXPECT_EQ(c.exit_status(), 0) << comparison_table(c);
  EXPECT_EQ(compare_reports(base, next, CompareOptions{0.02}).exit_status(), 1) << "a 2% threshold sees it";
}

TEST(Compare, EvidenceWidensTheFloorTooFewSamplesOrInsignificantIsInconclusive) {
  const Report base = report({result("a", samples(0.1, 0.02, 20))});
  // Three samples each, 50% slower: the exact U test cannot go below p = 0.1.
  const Comparison few =
      compare_reports(report({result("a", {0.1, 0.101, 0.102})}), report({result("a", {0.2, 0.201, 0.202})}));
  EXPECT_TRUE(few.cases[0].inconclusive);
  EXPECT_EQ(few.exit_status(), kCompareInconclusive);
  EXPECT_NE(few.cases[0].why.find("too few samples (3 and 3: the smallest p they can give is 0.1"), std::string::npos)
      << few.cases[0].why;
  // Four each, twice as slow, no overlap: exact p = 2/70 = 0.029 < 0.05 decides.
  const Comparison four = compare_reports(report({result("a", {0.1, 0.101, 0.102, 0.103})}),
                                          report({result("a", {0.2, 0.202, 0.204, 0.206})}));
  EXPECT_EQ(four.exit_status(), 1) << comparison_table(four);
  EXPECT_NEAR(four.cases[0].p_value, 2.0 / 70, 1e-12);
  EXPECT_NE(four.cases[0].why.find("Mann-Whitney exact p = 0.0286"), std::string::npos) << four.cases[0].why;
  // The new run was measured on a busy machine: its 13% drop is within the busy floor (30%) ...
  const Comparison noisy = compare_reports(base, report({result("a", samples(0.115, 0.02, 20, 5), "ok", "noisy")}));
  EXPECT_EQ(noisy.exit_status(), kCompareInconclusive) << comparison_table(noisy);
  EXPECT_NE(noisy.cases[0].why.find("within the floor 30.0%: the new run was measured on a busy machine"),
            std::string::npos)
      << noisy.cases[0].why;
  // ... a 2x drop on the same busy machine is a regression: busy widens the floor, it vetoes nothing.
  const Comparison busy_double =
      compare_reports(base, report({result("a", samples(0.2, 0.02, 20, 5), "ok", "noisy")}));
  EXPECT_EQ(busy_double.exit_status(), 1) << comparison_table(busy_double);
  EXPECT_NE(busy_double.cases[0].why.find("beyond the floor 30.0%"), std::string::npos) << busy_double.cases[0].why;
  // Noisier than its scenario's own stopping target (measure.max_noise 3%) on a quiet machine, but
  // within the gate's --max-noise: the samples decide, and a 30% drop is a regression.
  RunResult quiet_but_wide = result("a", samples(0.13, 0.02, 20, 5));
  quiet_but_wide.measurement.verdict = "noisy";
  quiet_but_wide.measurement.verdict_reason = "the median's noise 6.8% stayed above max_noise 3%";
  const Comparison wide_run = compare_reports(base, report({quiet_but_wide}));
  EXPECT_EQ(wide_run.exit_status(), 1) << comparison_table(wide_run);
  // The same on the base side: a wide but quiet baseline, a clean 30% slower new run.
  RunResult wide_base_run = result("a", samples(0.1, 0.02, 20, 9));
  wide_base_run.measurement.verdict = "noisy";
  wide_base_run.measurement.verdict_reason = "the median's noise 6.8% stayed above max_noise 3%";
  const Comparison wide_base_cmp =
      compare_reports(report({wide_base_run}), report({result("a", samples(0.13, 0.02, 20, 10))}));
  EXPECT_EQ(wide_base_cmp.exit_status(), 1) << comparison_table(wide_base_cmp);
  // Overlapping wide distributions, a 10% drop of the median: not significant at 5 samples.
  const Report wide_base = report({result("a", {0.08, 0.09, 0.1, 0.11, 0.12})});
  const Report wide_new = report({result("a", {0.085, 0.1, 0.11, 0.115, 0.125})});
  const Comparison insig = compare_reports(wide_base, wide_new, CompareOptions{0.05, 0.05, 2, 1.0});
  EXPECT_EQ(insig.exit_status(), kCompareInconclusive) << comparison_table(insig);
  EXPECT_NE(insig.cases[0].why.find("not significant"), std::string::npos) << insig.cases[0].why;
  // A regression elsewhere wins over an inconclusive case.
  const Report two = report({result("a", samples(0.1, 0.02, 20)), result("b", samples(0.1, 0.02, 20, 6))});
  const Report worse = report({result("a", samples(0.115, 0.02, 20, 7), "ok", "noisy"), result("b", samples(0.2, 0.02, 20, 8))});
  EXPECT_EQ(compare_reports(two, worse).exit_status(), 1);
}

TEST(Compare, NoisyMediansWidenTheFloorByTheirDifferencesIntervalNotTheirSum) {
  // Five samples each whose medians' noise is 30% (range / (2 x median)); the new run 1.82x slower
  // (a 45% drop), one pair of samples overlapping: exact p = 4/252 = 0.016. The difference of the two
  // medians has a 95% half-width of sqrt(0.3^2 + 0.3^2) = 42.4%: a 45% drop is beyond it. Summing the
  // noises (60%, the two intervals kept apart) called a doubled report on a busy machine inconclusive.
  const std::vector<double> a = {0.07, 0.09, 0.1, 0.11, 0.13};
  std::vector<double> b;
  for (double x : a) b.push_back(1.82 * x);
  const Comparison c = compare_reports(report({result("a", a)}), report({result("a", b)}));
  ASSERT_EQ(c.cases.size(), 1u);
  EXPECT_NEAR(c.cases[0].floor, std::hypot(0.3, 0.3), 1e-9) << c.cases[0].why;
  EXPECT_EQ(c.exit_status(), 1) << comparison_table(c);
  // 1.6x slower (a 37.5% drop) is within 42.4%: inconclusive, and the message says what the floor is.
  std::vector<double> b16;
  for (double x : a) b16.push_back(1.6 * x);
  const Comparison near = compare_reports(report({result("a", a)}), report({result("a", b16)}));
  EXPECT_EQ(near.exit_status(), kCompareInconclusive) << comparison_table(near);
  EXPECT_NE(near.cases[0].why.find("the difference's 95% half-width 42.4%"), std::string::npos) << near.cases[0].why;
}

TEST(Compare, ADropWithinThePairsRunToRunNoiseIsInconclusiveAUniformSlowdownIsNot) {
  // Twelve cases whose whole runs shifted by -15% .. +15% between the two reports (a VM's slow phase):
  // each case's samples are tight, so its own U test calls every shift significant.
  std::vector<RunResult> base, next;
  const double shifts[] = {-0.15, -0.12, -0.09, -0.06, -0.03, 0.0, 0.02, 0.05, 0.08, 0.1, 0.12, 0.15};
  for (int i = 0; i < 12; ++i) {
    const std::string name = "c" + std::to_string(10 + i);
    base.push_back(result(name, samples(0.1, 0.005, 15, i + 1)));
    next.push_back(result(name, samples(0.1 / (1 + shifts[i]), 0.005, 15, i + 40)));
  }
  const Comparison noisy_pair = compare_reports(report(base), report(next));
  EXPECT_EQ(noisy_pair.exit_status(), kCompareInconclusive) << comparison_table(noisy_pair);
  EXPECT_GT(noisy_pair.cases[0].between_run, 0.15);
  EXPECT_NE(noisy_pair.cases[0].why.find("within this pair's run-to-run noise"), std::string::npos)
      << noisy_pair.cases[0].why;
  // A change that slows every case by 30% leaves the cases' spread small: all regress.
  std::vector<RunResult> slower;
  for (int i = 0; i < 12; ++i) slower.push_back(result("c" + std::to_string(10 + i), samples(0.1 / 0.7, 0.005, 15, i + 80)));
  const Comparison uniform = compare_reports(report(base), report(slower));
  EXPECT_EQ(uniform.exit_status(), 1);
  for (const auto& d : uniform.cases) EXPECT_TRUE(d.regression) << d.name << ": " << d.why;
}

TEST(Compare, CpuSecondsAreJudgedWhenAskedAndMissingOnesAreInconclusive) {
  // Wall time 40% slower (the neighbours), CPU seconds the same (the work): only wall time regresses.
  RunResult b = result("a", samples(0.1, 0.01, 12));
  b.measurement.cpu_s = samples(0.15, 0.01, 12, 3);
  RunResult n = result("a", samples(0.14, 0.01, 12, 4));
  n.measurement.cpu_s = samples(0.15, 0.01, 12, 5);
  CompareOptions cpu;
  cpu.metric = "cpu_s";
  EXPECT_EQ(compare_reports(report({b}), report({n})).exit_status(), 1);
  const Comparison same_work = compare_reports(report({b}), report({n}), cpu);
  EXPECT_EQ(same_work.exit_status(), 0) << comparison_table(same_work);
  // 30% more CPU seconds: a regression on cpu_s, and named so.
  n.measurement.cpu_s = samples(0.15 * 1.3, 0.01, 12, 6);
  const Comparison more_work = compare_reports(report({b}), report({n}), cpu);
  EXPECT_EQ(more_work.exit_status(), 1) << comparison_table(more_work);
  EXPECT_NE(more_work.cases[0].why.find("CPU work rate fell"), std::string::npos) << more_work.cases[0].why;
  EXPECT_NE(comparison_table(more_work).find("base cpu ms"), std::string::npos);
  // A side without CPU samples (CUDA, older reports): inconclusive when wall time fell.
  n.measurement.cpu_s.clear();
  const Comparison none = compare_reports(report({b}), report({n}), cpu);
  EXPECT_EQ(none.exit_status(), 0) << "no cpu samples: no drop to judge on cpu_s";
  cpu.metric = "nope";
  EXPECT_THROW((void)compare_reports(report({b}), report({n}), cpu), std::invalid_argument);
}

TEST(Compare, StatusTransitionsAndMissingCases) {
  const Report base = report({result("a", samples(0.1, 0.01, 10)), result("b", samples(0.1, 0.01, 10), "failed")});
  const Report next = report({result("a", {}, "failed"), result("b", samples(0.1, 0.01, 10))});
  const Comparison c = compare_reports(base, next);
  EXPECT_TRUE(c.cases[0].regression);
  EXPECT_FALSE(c.cases[1].regression);
  RunResult skipped = result("a", {}, "skipped");
  skipped.reason = "device: cuda requested, but CUDA is not available here";
  const Comparison s = compare_reports(base, report({skipped, result("b", {}, "failed")}));
  EXPECT_NE(s.cases[0].why.find("ran before, skipped now: device: cuda"), std::string::npos) << s.cases[0].why;
  EXPECT_FALSE(compare_reports(report({skipped}), report({skipped})).regressed());
  const Comparison m = compare_reports(base, report({result("c", samples(0.1, 0.01, 10))}));
  EXPECT_EQ(m.only_in_new.size(), 1u);
  EXPECT_EQ(m.cases[0].new_status, "missing");
  EXPECT_TRUE(m.regressed()) << "cases missing from the new report are lost coverage";
  EXPECT_NE(comparison_table(m).find("REGRESSION: missing from the new report"), std::string::npos);
}

TEST(Compare, PoolRunsConcatenatesSamplesAndKeepsTheWorst) {
  Report r1 = report({result("a", {0.1, 0.1, 0.1})});
  Report r2 = report({result("a", {0.2, 0.2, 0.2}, "ok", "noisy")});
  Report r3 = report({result("a", {0.1}, "failed")});
  const Report p = pool_runs({r1, r2, r3});
  ASSERT_EQ(p.results.size(), 1u);
  EXPECT_EQ(p.results[0].measurement.step_s.size(), 7u);
  EXPECT_EQ(p.results[0].status, "failed");
  EXPECT_TRUE(p.results[0].measurement.noisy());
  EXPECT_NEAR(p.results[0].metric("tokens_per_s")->value, 1000 / 0.1, 1e-9);  // median of the pool: 0.1
}

TEST(ReportJson, RoundTripsEveryField) {
  Report r = report({result("a", {0.1, 0.11, 0.12})});
  r.scenario_name = "s";
  r.partial = true;
  r.partial_reason = "interrupted";
  r.env.torch_version = "2.11.0";
  r.results[0].axes = {{"cp", "2"}};
  TensorError e;
  e.tensor = "logits";
  e.criterion = "elementwise";
  e.step = "last";
  e.elements = 4096;
  e.mismatches = 3;
  e.max_abs = 1e-12;
  e.max_rel = 3e-13;
  e.score = 1.5;
  e.rtol = 1e-10;
  e.atol = 1e-12;
  e.ok = false;
  e.worst = "(b=0, s=1, v=2) owned by rank 1";
  r.results[0].errors.push_back(e);
  TensorError p = e;
  p.criterion = "precision";
  p.k = 2;
  p.floor = 1e-6;
  p.quantile = 0.99;
  p.single_rank_max = 0.01;
  p.single_rank_q = 0.005;
  p.cp_q = 0.004;
  r.results[0].errors.push_back(p);
  r.results[0].ranks.push_back({1, 0.5, 2e9, 1e6, 0.1, 0.2, 0.7, 3e9, 0.05, {{"cpu_flash", 4}, {"skipped", 2}}, 0.42});
  MeasurementRecord& m = r.results[0].measurement;
  m.warmup = 2;
  m.min_iters = 7;
  m.max_noise = 0.05;
  m.max_time_s = 1.5;
  m.noise = 0.03;
  m.stopped_by = "noise";
  m.threads_per_rank = 1;
  m.rank_cpus = "1";
  m.omp_wait_policy = "PASSIVE";
  m.slowdown = 0.25;
  m.canary = {0.0123, 0.0045, 3};
  m.cpu_s = {0.2, 0.21, 0.22};
  m.machine = {2, 0.5, 1.5, 0.25, 2, 12, 2400};
  r.results[0].collectives.push_back({"all_gather", 65536, 4, 1e-4, 6.5e8, 3.2e8, 0.5});
  r.results[0].peak = {5e10, "probe: CPU Float GEMM, 1 thread(s)", 8e9, "probe: host memory copy", {}};
  Report back = report_from_json(to_json(r));
  EXPECT_EQ(to_json(back).dump(), to_json(r).dump());
  EXPECT_TRUE(back.partial);
  EXPECT_EQ(back.schema_version, 4);
  EXPECT_DOUBLE_EQ(back.results[0].ranks[0].cpu_s, 0.42);
  EXPECT_EQ(back.results[0].measurement.cpu_s.size(), 3u);
  EXPECT_EQ(back.results[0].measurement.rank_cpus, "1");
  EXPECT_DOUBLE_EQ(back.results[0].measurement.canary.memory_s, 0.0123);
  EXPECT_EQ(back.results[0].measurement.canary.repeats, 3);
  EXPECT_THROW((void)report_from_json(nlohmann::json{{"schema", "other"}}), std::runtime_error);
  // An older report (schema 3: no samples) still reads, and compares as inconclusive, not as a regression.
  nlohmann::json old = to_json(r);
  old["schema_version"] = 3;
  old["results"][0].erase("measurement");
  const Report old_report = report_from_json(old);
  EXPECT_TRUE(old_report.results[0].measurement.step_s.empty());
  Report slower = report({result("a", samples(0.3, 0.01, 10))});
  EXPECT_EQ(compare_reports(old_report, slower).exit_status(), kCompareInconclusive);
}

// The CLI, as a user runs it: the committed baseline against itself passes (exit 0), its samples
// doubled fail (exit 1), on a busy machine too; 10% slower on a busy machine is inconclusive (exit 4); a
// missing file or an unknown --metric is bad input (exit 2).
TEST(CompareCli, DoctoredBaselineSamples) {
  const std::string base_file = std::string(CPBENCH_SOURCE_DIR) + "/reports/baselines/perf_ci.json";
  nlohmann::json base = read_json_file(base_file);
  ASSERT_EQ(base["schema_version"], 4) << "refresh the baseline (reports/baselines/README.md)";
  for (auto& r : base["results"]) {  // judge the samples alone
    r["measurement"]["verdict"] = "quiet";
    r["measurement"]["machine"]["others_runnable_mean"] = 0.0;
  }
  const auto write = [](const std::string& tag, const nlohmann::json& j) {
    const std::string path = "/tmp/cpbench-compare-" + tag + "-" + std::to_string(::getpid()) + ".json";
    write_json_file(path, j);
    return path;
  };
  const std::string quiet = write("quiet", base);
  nlohmann::json doubled = base;
  for (auto& r : doubled["results"])
    for (auto& s : r["measurement"]["step_s"]) s = s.get<double>() * 2;
  const std::string doubled_path = write("doubled", doubled);
  nlohmann::json noisy = doubled;
  for (auto& r : noisy["results"]) {
    r["measurement"]["verdict"] = "noisy";
    r["measurement"]["machine"]["others_runnable_mean"] = 2.0;
  }
  const std::string noisy_path = write("noisy", noisy);
  nlohmann::json busy_tenth = base;
  for (auto& r : busy_tenth["results"]) {
    r["measurement"]["machine"]["others_runnable_mean"] = 2.0;
    for (auto& s : r["measurement"]["step_s"]) s = s.get<double>() * 1.1;
  }
  const std::string busy_tenth_path = write("busy-tenth", busy_tenth);
  nlohmann::json fewer = base;
  fewer["results"].erase(fewer["results"].begin());
  const std::string fewer_path = write("fewer", fewer);
  auto run = [](const std::string& args) {
    const int st = std::system((std::string(CPBENCH_EXE) + " compare " + args + " > /dev/null 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  EXPECT_EQ(run(quiet + " " + quiet), 0);
  EXPECT_EQ(run(quiet + " " + doubled_path), 1);
  EXPECT_EQ(run(quiet + " " + noisy_path), 1) << "twice as slow is a regression on a busy machine too";
  EXPECT_EQ(run(quiet + " " + busy_tenth_path), kCompareInconclusive);
  EXPECT_EQ(run(quiet + " " + quiet + " --metric nope"), 2);
  EXPECT_EQ(run(quiet + " " + fewer_path), 1);
  EXPECT_EQ(run(quiet + " /nonexistent.json"), 2);
  EXPECT_EQ(run(quiet), 2) << "one report without --ab is bad input";
  for (const auto& p : {quiet, doubled_path, noisy_path, busy_tenth_path, fewer_path}) std::remove(p.c_str());
}
