// The measurement, end to end as a user runs it: `cpbench run` on real ranks writes every timed
// sample, the threads per rank, the machine's state, FLOPs visible and computed, the peak with its
// source and the collectives measured alone; a scenario whose `measure.peak_flops` is below what any
// rank achieves fails every case, naming both numbers; the slow hook lengthens exactly its case's
// steps (recorded, not timed against a target: that is the benchmark's job, docs/measurement.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "harness/fs_util.hpp"
#include "harness/launcher/core_binding.hpp"
#include "harness/runner/scenario.hpp"
#include "reports/json_report.hpp"
#include "spawn_cpbench.hpp"
#include "tests/gpu/gpu_cases.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {

std::string temp_dir(const std::string& tag) {
  std::string d = "/tmp/cpbench-measure-test-" + tag + "-" + std::to_string(::getpid());
  fsu::remove_tree(d);
  fsu::make_dirs(d);
  return d;
}

std::string scenario(const std::string& dir, const std::string& measure) {
  const std::string path = dir + "/s.yaml";
  std::ofstream(path) << "name: measure\nmodel: {preset: tiny}\nbatch: {batch_size: 1, seq_len: 128}\n"
                         "dtype: float32\nmeasure: " << measure << "\n"
                         "sweep:\n  - {sharder: [contiguous, load_balanced], transport: [allgather, ring], cp: 2}\n"
                         "  - {sharder: perturbed, transport: ring, cp: 2, expect: mismatch}\n";
  return path;
}

Report run(const std::string& dir, const std::string& measure, int expect_status, const std::string& env = "") {
  const pid_t pid = test::spawn_cpbench_run({scenario(dir, measure), "--out", dir + "/out"}, {env});
  EXPECT_EQ(test::wait_exit_status(pid), expect_status);
  return report_from_json(read_json_file(dir + "/out/report.json"));
}

}  // namespace

TEST(MeasurementRun, ReportCarriesSamplesMachineStateRatesAndCollectives) {
  const std::string dir = temp_dir("record");
  const Report r = run(dir, "{warmup: 1, iters: 6, max_time_s: 0}", 0, "CPBENCH_FAULT=slow:1:1:50");
  EXPECT_EQ(r.schema_version, 4);
  ASSERT_EQ(r.results.size(), 5u);
  for (const auto& c : r.results) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.status, "ok") << c.reason;
    const MeasurementRecord& m = c.measurement;
    EXPECT_EQ(m.step_s.size(), 6u) << "iters is the minimum, max_time_s 0 stops there";
    EXPECT_EQ(m.threads_per_rank, std::max<int64_t>(1, static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN)) / 2));
    EXPECT_EQ(m.omp_wait_policy, "PASSIVE");
    EXPECT_EQ(m.rank_cpus, cpu_list_text(rank_core_share(affinity_cpus(), 0, 2)))
        << "cpbench spawned the ranks: rank 0 is timed on its share of the cores";
    EXPECT_GE(m.machine.samples, 7);
    EXPECT_TRUE(m.verdict == "quiet" || m.verdict == "noisy");
    EXPECT_DOUBLE_EQ(m.slowdown, c.index == 1 ? 0.5 : 0.0);
    for (const char* k : {"step_s", "attention_s", "other_s", "attention_flops_visible", "attention_flops_computed",
                          "attention_kernel_efficiency", "attention_tflops_per_s", "model_tflops_per_s", "mfu"})
      EXPECT_NE(c.metric(k), nullptr) << k;
    EXPECT_GT(c.metric("attention_flops_visible")->value, 0);
    EXPECT_GT(c.metric("mfu")->value, 0);
    EXPECT_LT(c.metric("mfu")->value, 1);
    EXPECT_NE(c.peak.flops_source.find("probe: CPU Float GEMM"), std::string::npos) << c.peak.flops_source;
    EXPECT_EQ(c.peak.link_source, "probe: host memory copy");
    ASSERT_FALSE(c.collectives.empty()) << "W = 2: the step's collectives are measured alone";
    for (const auto& cb : c.collectives) {
      EXPECT_GT(cb.busbw, 0) << cb.collective;
      EXPECT_DOUBLE_EQ(cb.busbw, cb.algbw * cb.bus_factor) << cb.collective;
    }
    const bool ring = c.axes.at("transport") == "ring";
    const bool has_sendrecv = std::any_of(c.collectives.begin(), c.collectives.end(),
                                          [](const CollectiveBandwidth& b) { return b.collective == "sendrecv"; });
    EXPECT_EQ(has_sendrecv, ring) << "the ring's hops are send/recv; allgather's are not";
    ASSERT_EQ(c.ranks.size(), 2u);
    for (const auto& rs : c.ranks) EXPECT_GT(rs.step_s, 0);
    // CPU seconds: every rank's per step, and per step the group's, which is their sum (not one rank's).
    ASSERT_EQ(m.cpu_s.size(), m.step_s.size());
    double rank_sum = 0;
    for (const auto& rs : c.ranks) {
      EXPECT_GT(rs.cpu_s, 0);
      rank_sum += rs.cpu_s;
    }
    EXPECT_NEAR(c.metric("cpu_s")->value, rank_sum, 0.25 * rank_sum) << "the group's CPU seconds sum its ranks'";
  }
  // Every rank's forward blocks per kernel route: what the step's plans say (gpu_cases::case_routes,
  // the same prediction scripts/gpu-check.sh's scenarios rely on for CUDA) times the attention layers.
  const ScenarioSpec spec = load_scenario(dir + "/s.yaml");
  int64_t attention_layers = 0;
  for (int64_t l = 0; l < spec.model.layers; ++l) attention_layers += spec.model.mixer(l) == 'A' ? 1 : 0;
  ASSERT_GT(attention_layers, 0);
  for (const auto& c : r.results) {
    const CaseSpec& cs = spec.cases.at(static_cast<size_t>(c.index));
    ASSERT_EQ(cs.name(), c.name);
    if (cs.expect != Expect::match) continue;  // a control's layout is not a registered one
    const auto predicted = gpu_cases::case_routes(spec, cs, at::kCPU);
    for (size_t rk = 0; rk < c.ranks.size(); ++rk) {
      gpu_cases::RouteCounts want;
      for (const auto& [route, n] : predicted.at(rk)) want[route] = n * attention_layers;
      EXPECT_EQ(c.ranks[rk].kernel_blocks, want) << c.name << " rank " << rk;
    }
  }
  const auto& contiguous0 = r.results[0].ranks[0].kernel_blocks;  // its diagonal, and rank 1's block unseen
  EXPECT_EQ(contiguous0.count("skipped"), 1u) << r.results[0].name;
  EXPECT_EQ(contiguous0.count("cpu_flash"), 1u) << r.results[0].name;
  // The slow hook on rank 1 of case 1 (+50% of each of its steps): the group's samples carry it.
  const double slowed = r.results[1].metric("step_s")->value, rank1_alone = r.results[1].ranks[1].step_s;
  EXPECT_GE(slowed, rank1_alone * 1.4) << "the group's step is at least the slowed rank's";
}

TEST(MeasurementRun, ARateAboveThePeakFailsEveryCaseNamingBothNumbers) {
  const std::string dir = temp_dir("peak");
  // collectives: false (the correctness sweeps' setting): the step's collectives are not measured.
  const Report r = run(dir, "{iters: 1, max_time_s: 0, peak_flops: 1e6, collectives: false}", 1);
  ASSERT_EQ(r.results.size(), 5u);
  for (const auto& c : r.results) {
    EXPECT_EQ(c.status, "failed") << c.name;
    EXPECT_TRUE(c.collectives.empty()) << c.name << ": measure.collectives is false";
    EXPECT_NE(c.reason.find("FLOP/s"), std::string::npos) << c.reason;
    EXPECT_NE(c.reason.find("above the peak 1e+06 FLOP/s (measure.peak_flops)"), std::string::npos) << c.reason;
  }
}

// The `routes` key, as a user pins a case to its kernels: a case whose blocks all ran on the listed
// route passes; one that lists a route its blocks did not run on (here: a CUDA route on CPU ranks, as
// a fused kernel that fell back would show on a GPU) fails, naming the routes that ran and those listed.
TEST(MeasurementRun, TheRoutesKeyFailsACaseWhoseBlocksRanElsewhere) {
  const std::string dir = temp_dir("routes");
  const std::string path = dir + "/s.yaml";
  std::ofstream(path) << "name: routes\nmodel: {preset: tiny}\nbatch: {batch_size: 1, seq_len: 128}\n"
                         "dtype: float32\nmeasure: {max_time_s: 0, collectives: false}\n"
                         "sweep:\n  - {sharder: load_balanced, transport: ring, cp: 2, routes: [cpu_flash, cuda_flash_window]}\n"
                         "  - {sharder: contiguous, transport: ring, cp: 2, routes: cpu_flash}\n"
                         "  - {sharder: sdpa_wrap, transport: allgather, cp: 2, routes: cpu_flash}\n"
                         "  - {sharder: thd, transport: a2a, cp: 2, mask: document, routes: cpu_flash}\n"
                         "  - {sharder: workload_balanced, transport: hybrid, ulysses: 2, cp: 4, routes: cpu_flash}\n";
  const pid_t pid = test::spawn_cpbench_run({path, "--out", dir + "/out"}, {});
  EXPECT_EQ(test::wait_exit_status(pid), 1);
  const Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  ASSERT_EQ(r.results.size(), 5u);
  EXPECT_EQ(r.results[0].status, "failed");
  EXPECT_NE(r.results[0].reason.find("kernel routes: the attention blocks ran on {cpu_flash 8}"), std::string::npos)
      << r.results[0].reason;
  EXPECT_NE(r.results[0].reason.find("expects exactly [cpu_flash, cuda_flash_window]"), std::string::npos)
      << r.results[0].reason;
  // Every layout's and transport's blocks are counted (the sdpa_wrap hook, the head-parallel rings).
  for (size_t i = 1; i < r.results.size(); ++i) {
    EXPECT_EQ(r.results[i].status, "ok") << r.results[i].name << ": " << r.results[i].reason;
    int64_t blocks = 0;
    for (const auto& rk : r.results[i].ranks) blocks += rk.kernel_blocks.count("cpu_flash") ? rk.kernel_blocks.at("cpu_flash") : 0;
    EXPECT_GT(blocks, 0) << r.results[i].name;
  }
}
