// The parallel degrees of a whole step (harness/planner/step/parallel.hpp): enumeration under the
// model's and cluster's constraints, and bad input as one line naming the flag, exit status 2.
#include "harness/planner/step/parallel.hpp"

#include <set>

#include "tests/unit/plan_test_util.hpp"
#include "tests/unit/step_test_util.hpp"

namespace cpbench::step_test {

TEST(StepParallel, EnumerationHonoursTheConstraints) {
  StepRequest r;
  r.attention.model = model_preset("deepseek-v3");
  r.attention.seq_len = 131072;
  r.attention.cluster = cluster_preset("h100-ib400");
  r.gpus = 256;
  const auto all = enumerate_parallel(r);
  ASSERT_FALSE(all.empty());
  for (const auto& p : all) {
    EXPECT_EQ(p.gpus(), 256);
    EXPECT_LE(p.tp, 8);                 // within a node
    EXPECT_EQ(128 % p.tp, 0);           // heads
    EXPECT_EQ(61 % (p.pp * p.vp), 0);   // layers: 61 is prime, so pp = 1
    EXPECT_EQ(256 % p.ep, 0);
    EXPECT_EQ((p.dp * p.cp) % p.ep, 0);
    EXPECT_TRUE(p.zero == 1 || p.zero == 3);
  }
  r.tp = 8, r.ep = 32, r.zero = 3;
  for (const auto& p : enumerate_parallel(r)) EXPECT_TRUE(p.tp == 8 && p.ep == 32 && p.zero == 3);
  // Spans: tp innermost, cp next.
  Parallel p{8, 2, 1, 4, 2, 8, 3};
  EXPECT_EQ(span(p, Dim::cp), 16);
  EXPECT_EQ(span(p, Dim::dp), 64);
  EXPECT_EQ(span(p, Dim::ep), 64);
  EXPECT_EQ(group_bandwidth(cluster_preset("h100-ib400"), span(p, Dim::tp)), 400e9);
  EXPECT_EQ(group_bandwidth(cluster_preset("h100-ib400"), span(p, Dim::cp)), 50e9);
  EXPECT_EQ(group_bandwidth(cluster_preset("gb200"), span(p, Dim::dp)), 750e9);  // NVL72: 64 ranks in one domain
}

TEST(StepParallel, VirtualStagesAreSearchedWhenNotGiven) {
  // Llama 3 8B (32 layers) on 16 GPUs at pp 4: vp 1, 2, 4, 8 (32 / (4 vp) whole); pp 1: vp 1 only.
  StepRequest r;
  r.attention.model = model_preset("llama3-8b");
  r.attention.seq_len = 8192;
  r.attention.cluster = cluster_preset("h100-nvlink");
  r.gpus = 16, r.tp = 1, r.zero = 3;
  r.attention.cps = {1};
  std::set<int64_t> at_pp4, at_pp1;
  for (const auto& p : enumerate_parallel(r)) {
    EXPECT_EQ(32 % (p.pp * p.vp), 0);
    if (p.pp == 4) at_pp4.insert(p.vp);
    if (p.pp == 1) at_pp1.insert(p.vp);
  }
  EXPECT_EQ(at_pp4, (std::set<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(at_pp1, (std::set<int64_t>{1}));
  // --vp given: that one only.
  r.vp = 2;
  for (const auto& p : enumerate_parallel(r)) EXPECT_EQ(p.vp, 2);
}

TEST(StepParallel, BadDegreesAreOneLineNamingTheFlag) {
  struct Case {
    std::string args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"--model llama3-8b --seq-len 8192 --gpus 64 --tp 8 --pp 2 --dp 2 --cp 1", "--gpus 64: the degrees"},
      {"--model llama3-8b --seq-len 8192 --gpus 64 --tp 16", "--tp 16: tensor parallelism across nodes"},
      {"--model deepseek-v3 --seq-len 8192 --gpus 64 --ep 7", "--ep 7: model 'deepseek-v3' has 256 experts"},
      {"--model llama3-8b --seq-len 8192 --gpus 48 --pp 3", "--pp 3: model 'llama3-8b' has 32 layers"},
      {"--model llama3-8b --seq-len 8192 --gpus 64 --zero 4", "--zero: expected 0, 1, 2 or 3"},
      {"--model llama3-8b --seq-len 8192 --gpus 64 --recompute some", "--recompute: unknown policy 'some'"},
      {"--model llama3-8b --seq-len 8192 --gpus 8 --precision fp8 --cluster a100-nvlink", "--precision fp8"},
      {"--model llama3-8b --seq-len 8192 --tp 2", "--gpus: the whole-step flags"},
      {"--model llama3-8b --seq-len 8192", "--cp: give at least one CP size"},
  };
  for (const auto& c : cases) {
    const auto res = plan_test::run_cpbench("plan " + c.args);
    EXPECT_EQ(res.status, 2) << c.args << "\n" << res.output;
    EXPECT_NE(res.output.find(c.says), std::string::npos) << c.args << "\n" << res.output;
    EXPECT_EQ(std::count(res.output.begin(), res.output.end(), '\n'), 1) << c.args << "\n" << res.output;
  }
}

}  // namespace cpbench::step_test
