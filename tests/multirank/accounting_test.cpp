// Work accounting over CP sizes, as a user reads it from report.json: the same global batch (two rows of
// documents, so thd pads every document and workload_balanced dispatches each row) at cp 1, 2 and 4 on
// every layout and transport. What the model does cannot depend on how it is split: tokens per step,
// model FLOPs and the summed forward attention FLOPs are exactly the cp-1 numbers (real tokens and
// the pairs between them only: the work rule, sharders/mask.hpp), while the computed (hardware) FLOPs
// may grow with padding. MFU is recomputed from its definition: the group's model FLOP/s over
// cp x the peak of one rank, probed in the case's dtype.
// At dp = 2 the rates count both replicas while tokens_per_step and model_flops stay one replica's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "harness/fs_util.hpp"
#include "reports/json_report.hpp"
#include "spawn_cpbench.hpp"

using namespace cpbench;

namespace {

// 2 rows x 100 tokens: thd pads 30, 50, 20, 99 to multiples of 2W (at W = 4: 32, 56, 24, 104).
const char* kScenario = R"(name: accounting
measure: {max_time_s: 0, collectives: false}
model: {preset: tiny, heads: 4, kv_heads: 2}
batch: {batch_size: 2, seq_len: 100, documents: [[30, 50, 20], [99]]}
dtype: float64
device: cpu
timeout_s: 60
sweep:
  - sharder: [contiguous, load_balanced, striped, thd, sdpa_wrap, workload_balanced]
    transport: [allgather, ring, a2a]
    cp: [1, 2, 4]
    mask: causal
  - sharder: [load_balanced, thd, workload_balanced]
    transport: hybrid
    ulysses: 2
    cp: 4
    mask: causal
)";

double metric(const RunResult& r, const std::string& name) {
  const Metric* m = r.metric(name);
  EXPECT_NE(m, nullptr) << r.name << ": no metric " << name;
  return m ? m->value : 0.0;
}

}  // namespace

TEST(WorkAccounting, EveryLayoutAndTransportCountsTheSameWorkAtEveryCp) {
  const std::string dir = "/tmp/cpbench-accounting-test-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  std::ofstream(dir + "/s.yaml") << kScenario;
  const pid_t pid = test::spawn_cpbench_run({dir + "/s.yaml", "--out", dir + "/out"});
  // 1 only for a case failed as an impossible rate (checked per case below).
  const int status = test::wait_exit_status(pid);
  ASSERT_TRUE(status == 0 || status == 1) << status << ", see " << dir << "/out/report.md";
  const Report report = report_from_json(read_json_file(dir + "/out/report.json"));
  ASSERT_EQ(report.results.size(), 57u);

  // The cp-1 numbers (every cp-1 case must agree on them too).
  const RunResult* base = nullptr;
  for (const auto& r : report.results)
    if (r.axes.at("cp") == "1") {
      base = &r;
      break;
    }
  ASSERT_NE(base, nullptr);
  const double tokens = metric(*base, "tokens_per_step");
  const double model_flops = metric(*base, "model_flops");
  double attention = 0;
  for (const auto& rk : base->ranks) attention += rk.attention_flops;
  EXPECT_EQ(tokens, 30 + 50 + 20 + 99);
  ASSERT_GT(attention, 0);

  for (const auto& r : report.results) {
    SCOPED_TRACE(r.name);
    // A CPU peak probed while the machine is busy can read below a tiny case's rate; the case then fails
    // as an impossible rate (case_metrics.hpp) with every metric recorded, which is all this test reads.
    if (r.status != "ok") {
      ASSERT_EQ(r.reason.rfind("impossible rate", 0), 0u) << r.status << ": " << r.reason;
    }
    EXPECT_EQ(r.outcome, "match") << "the reference check";
    const auto cp = std::stoll(r.axes.at("cp"));
    ASSERT_EQ(static_cast<int64_t>(r.ranks.size()), cp);
    EXPECT_EQ(metric(r, "tokens_per_step"), tokens);
    EXPECT_EQ(metric(r, "model_flops"), model_flops);
    double fwd = 0, computed = 0;
    for (const auto& rk : r.ranks) {
      fwd += rk.attention_flops;
      computed += rk.attention_flops_computed;
    }
    EXPECT_EQ(fwd, attention) << "summed forward attention FLOPs (real-token pairs)";
    EXPECT_GE(computed, fwd) << "the kernels compute at least the work";

    // MFU from its definition, with the peak of one rank in the case's dtype (float64).
    const double peak = r.peak.flops;
    ASSERT_GT(peak, 0);
    EXPECT_NE(r.peak.flops_source.find("Double GEMM"), std::string::npos) << r.peak.flops_source;
    const double step_s = metric(r, "step_s");
    EXPECT_NEAR(metric(r, "mfu"), model_flops / step_s / (static_cast<double>(cp) * peak), 1e-9 * metric(r, "mfu"));
    // Training attention FLOPs: forward x 3.5 (FlashAttention's backward = 2.5 x forward).
    const double attention_s = metric(r, "attention_s");
    EXPECT_NEAR(metric(r, "attention_mfu"), 3.5 * fwd / attention_s / (static_cast<double>(cp) * peak),
                1e-9 * metric(r, "attention_mfu"));
  }
}

// The rate identities at dp = 2 (issue 39: tokens_per_s dropping the dp factor passed every test, which
// ran at dp = 1 only). Two replicas of cp 1 over the same batch shape: tokens_per_step and model_flops
// are one replica's (the dp = 1 numbers); tokens_per_s and model_tflops_per_s count both replicas; MFU is
// the job's model FLOP/s over dp x cp peaks.
TEST(WorkAccounting, RateIdentitiesCountEveryReplicaAtTwoReplicas) {
  const std::string dir = "/tmp/cpbench-accounting-dp-test-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  std::ofstream(dir + "/s.yaml") << R"(name: accounting-dp
measure: {max_time_s: 0, collectives: false}
model: {preset: tiny, heads: 4, kv_heads: 2}
batch: {batch_size: 2, seq_len: 100, documents: [[30, 50, 20], [99]]}
dtype: float64
device: cpu
timeout_s: 60
sweep: {sharder: contiguous, transport: allgather, cp: 1, dp: [1, 2], mask: causal}
)";
  const pid_t pid = test::spawn_cpbench_run({dir + "/s.yaml", "--out", dir + "/out"});
  const int status = test::wait_exit_status(pid);
  ASSERT_TRUE(status == 0 || status == 1) << status << ", see " << dir << "/out/report.md";
  const Report report = report_from_json(read_json_file(dir + "/out/report.json"));
  ASSERT_EQ(report.results.size(), 2u);
  const RunResult* one = nullptr;
  const RunResult* two = nullptr;
  for (const auto& r : report.results) (r.axes.at("dp") == "2" ? two : one) = &r;
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  for (const RunResult* r : {one, two})
    if (r->status != "ok") {
      ASSERT_EQ(r->reason.rfind("impossible rate", 0), 0u) << r->status << ": " << r->reason;
    }
  const double tokens = metric(*two, "tokens_per_step"), model_flops = metric(*two, "model_flops");
  EXPECT_EQ(tokens, 30 + 50 + 20 + 99) << "one replica's batch";
  EXPECT_EQ(tokens, metric(*one, "tokens_per_step"));
  EXPECT_EQ(model_flops, metric(*one, "model_flops"));
  const double step_s = metric(*two, "step_s");
  ASSERT_GT(step_s, 0);
  EXPECT_NEAR(metric(*two, "tokens_per_s"), 2 * tokens / step_s, 1e-9 * metric(*two, "tokens_per_s"));
  EXPECT_NEAR(metric(*two, "model_tflops_per_s"), 2 * model_flops / step_s / 1e12,
              1e-9 * metric(*two, "model_tflops_per_s"));
  EXPECT_NEAR(metric(*two, "model_tflops_per_s_per_rank"), model_flops / step_s / 1e12,
              1e-9 * metric(*two, "model_tflops_per_s_per_rank"));
  // Model FLOPs per token are the same whichever way they are counted.
  EXPECT_NEAR(metric(*two, "model_tflops_per_s") * 1e12 / metric(*two, "tokens_per_s"), model_flops / tokens,
              1e-9 * model_flops / tokens);
  const double peak = two->peak.flops;
  ASSERT_GT(peak, 0);
  EXPECT_NEAR(metric(*two, "mfu"), 2 * model_flops / step_s / (2 * peak), 1e-9 * metric(*two, "mfu"));
  // And at dp = 1 the same identities with one replica.
  const double step1 = metric(*one, "step_s");
  EXPECT_NEAR(metric(*one, "tokens_per_s"), tokens / step1, 1e-9 * metric(*one, "tokens_per_s"));
  EXPECT_NEAR(metric(*one, "model_tflops_per_s"), model_flops / step1 / 1e12, 1e-9 * metric(*one, "model_tflops_per_s"));
  fsu::remove_tree(dir);
}
