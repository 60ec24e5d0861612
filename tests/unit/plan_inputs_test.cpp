// The planner's inputs: document distributions, presets and explicit shapes, one-line exit-2 errors for bad
// input, the README's example.
#include "tests/unit/plan_test_util.hpp"

using namespace cpbench;
using namespace cpbench::plan_test;

TEST(PlanInputs, DocumentDistributionsAreDeterministicAndFillTheSequence) {
  const auto a = plan::draw_documents("lognormal:mean=4096,sigma=1,seed=1", 1 << 20);
  EXPECT_EQ(a, plan::draw_documents("lognormal:mean=4096,sigma=1,seed=1", 1 << 20));
  EXPECT_NE(a, plan::draw_documents("lognormal:mean=4096,sigma=1,seed=2", 1 << 20));
  EXPECT_EQ(std::accumulate(a.begin(), a.end(), int64_t{0}), int64_t{1} << 20);
  const double mean = static_cast<double>(1 << 20) / static_cast<double>(a.size());
  EXPECT_GT(mean, 4096 * 0.7);
  EXPECT_LT(mean, 4096 * 1.3);
  const auto u = plan::draw_documents("uniform:min=100,max=200,seed=3", 100000);
  EXPECT_EQ(std::accumulate(u.begin(), u.end(), int64_t{0}), 100000);
  for (size_t i = 0; i + 1 < u.size(); ++i) {
    EXPECT_GE(u[i], 100);
    EXPECT_LE(u[i], 200);
  }
  EXPECT_THROW((void)plan::draw_documents("zipf:s=1", 100), UsageError);
  EXPECT_THROW((void)plan::draw_documents("uniform:min=10", 100), UsageError);
  EXPECT_THROW((void)plan::draw_documents("lognormal:mean=10,shape=2", 100), UsageError);
  EXPECT_THROW((void)plan::draw_documents("lognormal:mean=4096", 0), UsageError);
}

TEST(PlanInputs, PresetsAndExplicitShapes) {
  const auto m = plan::model_preset("llama3-70b");
  EXPECT_EQ(std::vector<int64_t>({m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim}),
            std::vector<int64_t>({80, 8192, 64, 8, 128}));
  const auto q = plan::model_preset("qwen2.5-7b");
  EXPECT_EQ(std::vector<int64_t>({q.layers, q.hidden, q.heads, q.kv_heads, q.head_dim}),
            std::vector<int64_t>({28, 3584, 28, 4, 128}));
  EXPECT_EQ(plan::model_preset("tiny").head_dim, 16);
  PlanCommandOptions o;
  o.layers = 2;
  o.hidden = 256;
  o.heads = 8;
  o.kv_heads = 2;
  o.seq_len = 1024;
  o.cps = {2};
  const auto r = plan_request_from_options(o);
  EXPECT_EQ(r.model.head_dim, 32);  // hidden / heads
  EXPECT_EQ(plan::make_plan(r).cases.size(), 5u * planned_count({2}, 8, 2));
  for (const auto& c : plan::cluster_presets()) {
    EXPECT_GT(c.attention_flops, 0) << c.name;
    EXPECT_TRUE(c.gpus_per_node == 8 || c.gpus_per_node == 72) << c.name;  // HGX nodes or NVL72 racks
  }
}

TEST(PlanInputs, BadInputIsOneLineAndExitStatusTwo) {
  struct Case {
    std::string args;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"--model llama9 --seq-len 1024 --cp 8", {"unknown model preset 'llama9'", "llama3-8b", "mistral-7b"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --cluster b900", {"unknown cluster preset 'b900'", "h100-ib400"}},
      {"--model llama3-8b --seq-len 1024 --cp 8,0", {"--cp[1]: 0 is not a CP size"}},
      {"--model llama3-8b --seq-len 1000 --doc-lens 800,300 --cp 8", {"1100 tokens", "longer than the sequence"}},
      {"--model llama3-8b --seq-len 1000 --doc-lens 1200 --cp 8", {"1200 tokens is longer than the sequence"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --mask banded", {"unknown attention mask 'banded'", "document"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --mask sliding_window:0", {"sliding_window", "window"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --sharders zigzag,ringo",
       {"unknown sharder 'ringo'", "workload_balanced"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --transports pigeon", {"unknown attention transport 'pigeon'"}},
      {"--seq-len 1024 --cp 8", {"give --model or all five"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --dtype int8", {"unknown dtype 'int8'"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --doc-dist zipf:a=1", {"unknown distribution"}},
      {"--model llama3-8b --seq-len 1024 --cp 8 --calibrate /nonexistent/report.json", {"--calibrate", "cannot read"}},
  };
  for (const auto& c : cases) {
    const CommandResult res = run_cpbench("plan " + c.args, " 2>&1 >/dev/null");  // stderr only
    EXPECT_EQ(res.status, 2) << c.args << "\n" << res.output;
    EXPECT_EQ(std::count(res.output.begin(), res.output.end(), '\n'), 1) << c.args << "\n" << res.output;
    for (const auto& s : c.says)
      EXPECT_NE(res.output.find(s), std::string::npos) << c.args << " lacks '" << s << "':\n" << res.output;
  }
}

TEST(PlanInputs, DoneWhenExample) {
  // Since the head-parallel transports (issue 12) the example's best transport is hybrid (Ulysses
  // inside a node, ring across nodes); the layout stays load-balanced.
  const CommandResult res = run_cpbench("plan --model llama3-8b --seq-len 131072 --cp 8,16,64");
  EXPECT_EQ(res.status, 0) << res.output;
  EXPECT_NE(res.output.find("recommendation: load_balanced + hybrid"), std::string::npos) << res.output;
}

// a2a wins where it should: many heads and short local sequences inside one node (its all-to-alls
// move O(S/W) per rank and every rank computes an even share, while the ring moves every K/V block).
// Where the heads do not split over W it is not planned, and the note says why.
