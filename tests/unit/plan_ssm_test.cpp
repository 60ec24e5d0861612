// The planner on models with a linear mixer (Mamba here): each strategy priced by its own formulas, state
// passing's bytes flat in S, the recommendation naming the strategy, models without SSM layers or attention,
// models from config files.
#include "tests/unit/plan_test_util.hpp"

using namespace cpbench;
using namespace cpbench::plan_test;

namespace {
// The SsmCpShape the planner must hand the strategies' formulas for `c` (batch 1, bf16 activations,
// float32 states, the layout's own runs per rank).
SsmCpShape expected_ssm_shape(const plan::ModelShape& m, const plan::PlanCase& c, int64_t seq_len) {
  LayoutRequest req;
  req.cp = c.cp;
  req.seq_len = seq_len;
  const auto layout = make_layout(c.sharder);  // one document: no doc_lens, as the planner's request
  SsmCpShape s;
  s.batch = 1;
  s.seq_len = c.padded_seq_len;
  s.cp = c.cp;
  s.heads = m.ssm.heads;
  s.head_dim = m.ssm.head_dim;
  s.state = m.ssm.state;
  s.groups = m.ssm.groups;
  s.conv = m.ssm.conv;
  s.elem_bytes = 2;
  s.state_elem_bytes = 4;
  s.chunks_per_rank = max_runs_per_rank(layout->compute(req));
  return s;
}
}  // namespace

TEST(PlanSsm, HybridCasesArePricedByEachStrategysOwnFormulas) {
  const plan::Plan p = plan::make_plan(request("nemotron-h-8b", 131072, {8, 16}));
  const plan::ModelShape& m = p.request.model;
  ASSERT_EQ(m.attention_layers(), 4);
  ASSERT_EQ(m.layers_of('M'), 24);
  EXPECT_EQ(p.request.ssm_strategies, known_cp_strategies<SsmCpStrategy>());
  std::set<std::string> strategies;
  int checked = 0;
  for (const auto& c : p.cases) {
    strategies.insert(c.ssm.strategy);
    // Striped gives every token its own chunk: state passing is not planned on it.
    if (c.sharder == "striped") {
      EXPECT_EQ(c.ssm.strategy, "hidden_parallel");
    }
    const auto strategy = *parse_cp_strategy<SsmCpStrategy>(c.ssm.strategy);
    const SsmCpShape shape = expected_ssm_shape(m, c, 131072);
    EXPECT_EQ(c.ssm.bytes_per_rank, 24 * linear_cp_bytes(ssm_cp_terms, strategy, shape).total())
        << c.sharder << " " << c.ssm.strategy;
    // The attention part: its 4 layers only, by the transport's own formula.
    EXPECT_EQ(c.bytes_per_rank,
              4 * case_transport(c)->bytes_per_call(CallShape{c.cp, 1, 32, 8, c.local_tokens, 128, 2}));
    EXPECT_NEAR(c.predicted_step_s, c.attention_step_s + c.ssm.step_s, 1e-12 * c.predicted_step_s);
    EXPECT_NEAR(c.ssm.step_s, c.ssm.compute_s + c.ssm.comm_s, 1e-12 * c.ssm.step_s);
    EXPECT_EQ(c.ssm.activation_bytes,
              plan::mixer_activation_bytes(m, mixer_for('M'), c.ssm.strategy, 1, c.padded_seq_len, c.cp, 2,
                                           shape.chunks_per_rank));
    // FLOPs: the chunked scan's own count over this rank's token-heads, plus the projections and conv.
    const double s = static_cast<double>(c.local_tokens), P = static_cast<double>(c.padded_seq_len);
    const double proj = s * (2 * 4096.0 * static_cast<double>(m.ssm.in_proj_width()) + 2 * 8192.0 * 4096 +
                             2 * 4.0 * static_cast<double>(m.ssm.conv_channels()));
    const double scan = strategy == SsmCpStrategy::hidden_parallel
                            ? ssm_scan_flops(c.padded_seq_len, 128, 64, 128) * P * 128 / static_cast<double>(c.cp)
                            : ssm_scan_flops(c.local_tokens, 128, 64, 128) * s * 128 + 2.0 * 64 * 128 * s * 128;
    EXPECT_NEAR(c.ssm.flops_per_rank, 24 * (scan + proj), 1e-9 * c.ssm.flops_per_rank);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(strategies, (std::set<std::string>{"hidden_parallel", "state_passing"}));
  bool noted = false;
  for (const auto& n : p.notes) noted = noted || n.find("for striped: ssm_cp state_passing") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(PlanSsm, StatePassingBytesDoNotGrowWithTheSequenceHiddenParallelsDo) {
  auto bytes = [](int64_t S, const std::string& strategy) {
    plan::PlanRequest r = request("nemotron-h-8b", S, {4});
    r.sharders = {"load_balanced"};
    r.transports = {"ring"};
    r.mixer_strategies["ssm_cp"] = {strategy};
    return find_case(plan::make_plan(r), "load_balanced", "ring", 4).ssm.bytes_per_rank;
  };
  EXPECT_EQ(bytes(2048, "state_passing"), bytes(8192, "state_passing"));
  EXPECT_EQ(bytes(8192, "hidden_parallel"), 4 * bytes(2048, "hidden_parallel"));
  EXPECT_GT(bytes(2048, "state_passing"), 0);
}

TEST(PlanSsm, RecommendationNamesTheSsmStrategyInTableAndJson) {
  const plan::Plan p = plan::make_plan(request("nemotron-h-8b", 131072, {8, 16}));
  // At 16K tokens per rank the hidden-parallel all-to-alls move ~9x the state-passing summaries.
  EXPECT_EQ(p.recommendation.ssm_strategy, "state_passing");
  for (const auto& cr : p.recommendation.per_cp) EXPECT_FALSE(cr.ssm_strategy.empty());
  const std::string table = plan::plan_to_table(p);
  for (const char* s : {"ssm time", "ssm sent", "hidden_parallel", "state_passing", "+ SSM state_passing at cp="})
    EXPECT_NE(table.find(s), std::string::npos) << s << "\n" << table;
  const nlohmann::json j = plan::plan_to_json(p);
  EXPECT_EQ(j["model"]["ssm_layers"], 24);
  EXPECT_EQ(j["model"]["ssm"]["chunk"], 128);
  EXPECT_EQ(j["recommendation"]["ssm_strategy"], "state_passing");
  for (const auto& c : j["cases"])
    for (const char* k : {"strategy", "flops_per_rank", "bytes_per_rank", "compute_s", "comm_s", "step_s",
                          "activation_bytes"})
      EXPECT_TRUE(c["ssm"].contains(k)) << k;
  // The runner-up of the other strategy is explained by its SSM time and bytes.
  EXPECT_NE(p.recommendation.per_cp.at(0).reason.find("its SSM layers (hidden_parallel) take"), std::string::npos)
      << p.recommendation.per_cp.at(0).reason;
}

TEST(PlanSsm, ModelsWithoutSsmLayersOrWithoutAttention) {
  // A Llama config plans exactly as before: no SSM part.
  const plan::Plan l = plan::make_plan(request("llama3-8b", 16384, {8}));
  for (const auto& c : l.cases) {
    EXPECT_TRUE(c.ssm.strategy.empty());
    EXPECT_EQ(c.predicted_step_s, c.attention_step_s);
  }
  EXPECT_TRUE(l.recommendation.ssm_strategy.empty());
  EXPECT_EQ(plan::plan_to_table(l).find("ssm"), std::string::npos);
  // Mamba-2: no attention, so no transport; hidden-parallel needs heads % W == 0 (80 heads, W = 32).
  const plan::Plan m = plan::make_plan(request("mamba2-2.7b", 65536, {16, 32}));
  int hidden_parallel_16 = 0, hidden_parallel_32 = 0;
  for (const auto& c : m.cases) {
    EXPECT_EQ(c.transport, "none");
    EXPECT_EQ(c.attention_step_s, 0);
    EXPECT_GT(c.ssm.step_s, 0);
    if (c.ssm.strategy == "hidden_parallel") ++(c.cp == 16 ? hidden_parallel_16 : hidden_parallel_32);
  }
  EXPECT_EQ(hidden_parallel_16, 5);  // one per layout: the transport does not multiply them
  EXPECT_EQ(hidden_parallel_32, 0);
  bool noted = false;
  for (const auto& n : m.notes) noted = noted || n.find("80 is not divisible by cp 32") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(PlanSsm, ModelFromConfigFileFlagsAndSlidingWindow) {
  PlanCommandOptions o;
  o.model = std::string(CPBENCH_SOURCE_DIR) + "/scenarios/models/llama3-8b.json";
  o.seq_len = 8192;
  o.cps = {8};
  const plan::PlanRequest byfile = plan_request_from_options(o);
  const plan::ModelShape preset = plan::model_preset("llama3-8b");
  EXPECT_EQ(std::vector<int64_t>({byfile.model.layers, byfile.model.hidden, byfile.model.heads,
                                  byfile.model.kv_heads, byfile.model.head_dim}),
            std::vector<int64_t>({preset.layers, preset.hidden, preset.heads, preset.kv_heads, preset.head_dim}));
  EXPECT_EQ(byfile.mask, "causal");
  // Mistral-7B slides every layer over 4096 tokens: its plan uses that window unless --mask says otherwise.
  o.model = "mistral-7b";
  EXPECT_EQ(plan_request_from_options(o).mask, "sliding_window:4096");
  o.mask = "causal";
  EXPECT_EQ(plan_request_from_options(o).mask, "causal");
  // --layers on a hybrid keeps its share of attention layers.
  o = PlanCommandOptions{};
  o.model = "nemotron-h-8b";
  o.layers = 7;
  o.seq_len = 8192;
  o.cps = {8};
  const plan::PlanRequest small = plan_request_from_options(o);
  EXPECT_EQ(small.model.mixers, "MMMAMMM");
  EXPECT_EQ(small.model.name, "nemotron-h-8b+custom");
  o.mixer_cp["ssm_cp"] = {"state_passing"};
  const plan::Plan sp = plan::make_plan(plan_request_from_options(o));
  for (const auto& c : sp.cases) EXPECT_EQ(c.ssm.strategy, "state_passing");
  o.mixer_cp["ssm_cp"] = {"ring_passing"};
  EXPECT_THROW((void)plan::make_plan(plan_request_from_options(o)), UsageError);
}

TEST(PlanSsm, DoneWhenHybridAndLlamaConfigs) {
  const std::string models = std::string(CPBENCH_SOURCE_DIR) + "/scenarios/models/";
  const CommandResult h = run_cpbench("plan --model " + models + "nemotron-h-8b.json --seq-len 131072 --cp 8,16");
  EXPECT_EQ(h.status, 0) << h.output;
  for (const char* s : {"24 SSM", "ssm time", "ssm sent", "hidden_parallel", "state_passing", "recommendation: ",
                        " + SSM "})
    EXPECT_NE(h.output.find(s), std::string::npos) << s << "\n" << h.output;
  const CommandResult l = run_cpbench("plan --model " + models + "llama3-8b.json --seq-len 131072 --cp 8,16");
  EXPECT_EQ(l.status, 0) << l.output;
  EXPECT_EQ(l.output.find("ssm"), std::string::npos) << l.output;
  EXPECT_NE(l.output.find("recommendation: "), std::string::npos) << l.output;
}
