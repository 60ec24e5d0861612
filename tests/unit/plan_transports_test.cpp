// The planner prices every case by its transport's own formulas, for exactly the registered transports, and
// its sources name no transport.
#include "tests/unit/plan_test_util.hpp"

using namespace cpbench;
using namespace cpbench::plan_test;

TEST(PlanTransports, CasesUseEachTransportsOwnFormulas) {
  plan::PlanRequest r = request("llama3-8b", 65536, {1, 8, 16});
  r.kernel = plan::Kernel::pairs;  // recomputed below from visible pairs (the fitted model: next test)
  r.cluster = plan::cluster_preset("h100-ib400");  // W = 16 crosses nodes: the inter-node link
  r.sharders = {"contiguous", "load_balanced"};
  r.dtype = "fp16";
  const plan::Plan p = plan::make_plan(r);
  ASSERT_EQ(p.cases.size(), 2u * planned_count({1, 8, 16}, r.model.heads, r.model.kv_heads));
  const plan::ModelShape& m = r.model;
  const int64_t e = 2, L = m.layers;
  const double unit = 4.0 * static_cast<double>(m.heads * m.head_dim), F = r.cluster.attention_flops;
  const MaskSpec mask = MaskSpec::parse("causal");
  for (const auto& c : p.cases) {
    SCOPED_TRACE(c.sharder + "/" + c.transport + " cp=" + std::to_string(c.cp));
    const auto t = case_transport(c);
    const int64_t W = c.cp, s = c.local_tokens;
    const CallShape shape_of_call{W, 1, m.heads, m.kv_heads, s, m.head_dim, e};
    const int64_t call = t->bytes_per_call(shape_of_call);
    const int64_t fwd = t->forward_bytes_per_call(shape_of_call);
    EXPECT_EQ(c.bytes_per_rank, L * call);

    plan::StreamCache cache;
    const plan::LayoutWork w =
        plan::layout_work(*make_layout(c.sharder), W, r.seq_len, {}, mask, plan::Kernel::pairs, cache);
    std::vector<double> c_fwd, c_local;
    for (size_t i = 0; i < w.pairs.size(); ++i) {
      c_fwd.push_back(unit * static_cast<double>(w.pairs[i]) / F);
      c_local.push_back(unit * static_cast<double>(w.local_pairs[i]) / F);
    }
    CallCostInputs in;
    in.cp = W;
    in.c_fwd_max = *std::max_element(c_fwd.begin(), c_fwd.end());
    in.fwd_bytes = static_cast<double>(fwd);
    in.bwd_bytes = static_cast<double>(call - fwd);
    in.bandwidth = W <= 8 ? r.cluster.intra_bandwidth : r.cluster.inter_bandwidth;
    in.latency_s = r.cluster.latency_s;
    in.c_fwd = c_fwd;
    in.c_local = c_local;
    in.call = shape_of_call;
    if (c.ulysses > 0 && c.ulysses <= 8) in.group_bandwidth = r.cluster.intra_bandwidth;
    // The whole row's work split evenly over W: the pairs kernel prices visible pairs alone.
    const double all_pairs = std::accumulate(w.pairs.begin(), w.pairs.end(), 0.0);
    in.c_even_fwd = unit * all_pairs / F / static_cast<double>(W);
    in.c_even_bwd = kBackwardFactor * in.c_even_fwd;
    std::vector<double> rank_work(w.pairs.begin(), w.pairs.end());
    in.rank_work = rank_work;
    const CallTime ct = t->time_per_call(in);
    EXPECT_NEAR(c.predicted_step_s, static_cast<double>(L) * ct.step_s, 1e-12 * c.predicted_step_s);
    EXPECT_NEAR(c.exposed_comm_s, static_cast<double>(L) * ct.exposed_s, 1e-12 * c.predicted_step_s);
    EXPECT_NEAR(c.transfer_s, static_cast<double>(L) * ct.transfer_s, 1e-12 * c.predicted_step_s);
    // a2a splits the whole row's work evenly over heads; hybrid-u<U>: the most loaded Ulysses group's
    // work over its U ranks; the others: the slowest rank's.
    double want_c = in.c_fwd_max;
    if (c.transport == "a2a") want_c = in.c_even_fwd;
    if (c.ulysses > 0) {
      want_c = 0;
      for (int64_t g = 0; g < W / c.ulysses; ++g) {
        double sum = 0;
        for (int64_t u = 0; u < c.ulysses; ++u) sum += c_fwd[static_cast<size_t>(g * c.ulysses + u)];
        want_c = std::max(want_c, sum / static_cast<double>(c.ulysses));
      }
    }
    EXPECT_NEAR(c.compute_s, static_cast<double>(L) * kStepFactor * want_c, 1e-9 * c.predicted_step_s);

    ActivationShape shape;
    shape.cp = W;
    shape.layers = L;
    shape.q_heads = m.heads;
    shape.kv_heads = m.kv_heads;
    shape.local_tokens = s;
    shape.head_dim = m.head_dim;
    shape.element_size = e;
    const int64_t per_layer =
        s * (2 * m.hidden * e + 2 * m.heads * m.head_dim * e + 2 * m.kv_heads * m.head_dim * e + 4 * m.heads);
    EXPECT_EQ(c.peak_activation_bytes, L * per_layer + t->peak_activation_bytes(shape));
    if (W == 1) {
      EXPECT_EQ(c.bytes_per_rank, 0);
      EXPECT_EQ(c.exposed_comm_s, 0.0);
    }
  }
}

// The forward's share of the shipped transports' bytes (transport.hpp): both send the W-1 other K/V
// blocks in the input dtype. Any registered transport: 0 <= forward <= all, nothing at W = 1.
TEST(PlanTransports, ForwardBytesPerCall) {
  const int64_t kv = 2 * 2 * 8 * 1024 * 128 * 2;  // B = 2, Hkv = 8, S = 1024, D = 128, bf16
  for (int64_t W : {1, 2, 8}) {
    const CallShape call{W, 2, 8, 8, 1024, 128, 2};
    EXPECT_EQ(make_transport("ring")->forward_bytes_per_call(call), (W - 1) * kv);
    EXPECT_EQ(make_transport("allgather")->forward_bytes_per_call(call), (W - 1) * kv);
    for (const auto& n : known_transports()) {
      const auto t = make_transport(n, takes_ulysses(n) ? TransportOptions{W >= 2 ? 2 : 1} : TransportOptions{});
      const int64_t fwd = t->forward_bytes_per_call(call);
      EXPECT_GE(fwd, 0) << n;
      EXPECT_LE(fwd, t->bytes_per_call(call)) << n;
      if (W == 1) {
        EXPECT_EQ(fwd, 0) << n;
      }
    }
  }
}

// A transport registered under a new name is planned without touching the planner: the default plan
// and the CLI cover exactly known_transports(), in registry order.
TEST(PlanTransports, DefaultPlanCoversExactlyTheRegisteredTransports) {
  plan::PlanRequest r = request("llama3-8b", 16384, {2, 4});
  r.sharders = {"load_balanced", "contiguous"};
  ASSERT_TRUE(r.transports.empty());  // the default: every registered transport
  const plan::Plan p = plan::make_plan(r);
  EXPECT_EQ(p.request.transports, planned_transports());
  std::vector<std::string> planned;
  for (const auto& c : p.cases)
    if (c.cp == 4 && c.sharder == "load_balanced") planned.push_back(c.transport);
  EXPECT_EQ(planned, planned_labels(4, r.model.heads, r.model.kv_heads));
  EXPECT_EQ(planned, (std::vector<std::string>{"allgather", "ring", "a2a", "hybrid-u2"}));
  EXPECT_EQ(p.cases.size(), 2u * planned_count({2, 4}, r.model.heads, r.model.kv_heads));
  for (const auto& cr : p.recommendation.per_cp)
    EXPECT_EQ(cr.ranking.size(), 2u * planned_labels(cr.cp, r.model.heads, r.model.kv_heads).size());

  const auto json = run_cpbench("plan --model llama3-8b --seq-len 16384 --cp 2 --sharders load_balanced --format json",
                                " 2>/dev/null");
  ASSERT_EQ(json.status, 0) << json.output;
  std::vector<std::string> from_cli;
  const nlohmann::json parsed = nlohmann::json::parse(json.output);
  for (const auto& c : parsed["cases"]) from_cli.push_back(c["transport"]);
  EXPECT_EQ(from_cli, planned_labels(2, 32, 8));

  const auto help = run_cpbench("plan --help");
  std::string listed;
  for (const auto& n : planned_transports()) listed += (listed.empty() ? "" : ", ") + n;
  EXPECT_NE(help.output.find("--transports"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find(listed), std::string::npos) << "help should list " << listed << ":\n" << help.output;
}

// Nothing in harness/planner names a transport in code: a string literal "<name>" of a registered
// transport there would be a formula or a default the transport should own.
TEST(PlanTransports, PlannerSourcesNameNoTransport) {
  const std::filesystem::path dir = std::filesystem::path(CPBENCH_SOURCE_DIR) / "harness" / "planner";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    ++files;
    for (const auto& n : known_transports())
      EXPECT_EQ(text.str().find("\"" + n + "\""), std::string::npos)
          << entry.path().filename().string() << " names transport \"" << n << "\"";
  }
  EXPECT_GT(files, 0);
}

// ---------------------------------------------------------------------------------------------------
// Plans, JSON, recommendation
// ---------------------------------------------------------------------------------------------------
