// The planner's output: the JSON schema, the recommendation on packed documents and near ties, its speed,
// and calibration from a synthetic report.
#include "tests/unit/plan_test_util.hpp"

using namespace cpbench;
using namespace cpbench::plan_test;

TEST(PlanOutput, JsonHasTheDocumentedSchema) {
  const plan::Plan p = plan::make_plan(request("llama3-8b", 131072, {8, 16, 64}));
  const nlohmann::json j = plan::plan_to_json(p);
  ASSERT_TRUE(j.contains("cases") && j["cases"].is_array());
  EXPECT_EQ(j["cases"].size(), 5u * planned_count({8, 16, 64}, 32, 8));  // default sharders x W x transports
  for (const auto& c : j["cases"]) {
    for (const char* k :
         {"sharder", "transport", "cp", "imbalance", "attention_flops_per_rank", "bytes_per_rank", "predicted_step_s",
          "efficiency", "exposed_comm_s", "peak_activation_bytes", "max_segments", "rank"})
      EXPECT_TRUE(c.contains(k)) << k;
    EXPECT_EQ(c["attention_flops_per_rank"].size(), c["cp"].get<size_t>());
  }
  std::set<std::string> sharders;
  for (const auto& c : j["cases"]) sharders.insert(c["sharder"].get<std::string>());
  EXPECT_EQ(sharders, (std::set<std::string>{"contiguous", "load_balanced", "striped", "thd", "workload_balanced"}));
  const auto& rec = j["recommendation"];
  for (const char* k : {"sharder", "transport", "cp", "reason", "per_cp"}) EXPECT_TRUE(rec.contains(k)) << k;
  EXPECT_EQ(rec["per_cp"].size(), 3u);
  EXPECT_FALSE(rec["reason"].get<std::string>().empty());
  EXPECT_NE(rec["sharder"], "contiguous");
  const std::string table = plan::plan_to_table(p);
  EXPECT_NE(table.find("recommendation:"), std::string::npos);
}

TEST(PlanOutput, PackedDocumentsRecommendWorkloadBalanced) {
  plan::PlanRequest r = request("tiny", 4096, {4}, "document");
  r.doc_lens = kMixedDocs;
  r.sharders = {"load_balanced", "workload_balanced"};
  r.transports = {"ring"};
  r.cluster.intra_bandwidth = r.cluster.inter_bandwidth = 1e15;  // compute-bound: balance decides
  r.cluster.latency_s = 0;
  // The tiny model's blocks are so small that the fitted kernel model's per-call and per-row costs
  // dominate them; balance decides under the pairs model.
  r.kernel = plan::Kernel::pairs;
  const plan::Plan p = plan::make_plan(r);
  const auto& wb = find_case(p, "workload_balanced", "ring", 4);
  const auto& lb = find_case(p, "load_balanced", "ring", 4);
  EXPECT_LE(wb.imbalance, 1.05);
  EXPECT_GE(lb.imbalance, 1.15);
  EXPECT_EQ(wb.rank, 1);
  EXPECT_EQ(p.recommendation.per_cp.at(0).sharder, "workload_balanced");
  EXPECT_NE(p.recommendation.per_cp.at(0).reason.find("load_balanced/ring is"), std::string::npos)
      << p.recommendation.per_cp.at(0).reason;
}

TEST(PlanOutput, FragmentationBreaksNearTies) {
  plan::PlanRequest r = request("llama3-8b", 131072, {8}, "document");
  r.doc_lens = plan::draw_documents("lognormal:mean=4096,sigma=1,seed=1", 131072);
  r.transports = {"ring"};
  // Under the fitted kernel model this is no tie: every striped block has all s rows active (each
  // document spans every rank), so its per-row and merge costs are far higher; checked last.
  r.kernel = plan::Kernel::pairs;
  const plan::Plan p = plan::make_plan(r);
  const auto& striped = find_case(p, "striped", "ring", 8);
  const auto& wb = find_case(p, "workload_balanced", "ring", 8);
  EXPECT_EQ(striped.max_segments, 131072 / 8);  // one segment per token
  EXPECT_LT(wb.max_segments, 200);
  EXPECT_NEAR(striped.predicted_step_s / wb.predicted_step_s, 1.0, 0.01);
  EXPECT_LT(wb.rank, striped.rank);
  EXPECT_EQ(find_case(p, "contiguous", "ring", 8).max_segments >= 1, true);
  // One causal sequence: head-tail has two segments per rank and wins the tie with workload_balanced.
  plan::PlanRequest c = request("llama3-8b", 131072, {8});
  c.transports = {"ring"};
  const plan::Plan q = plan::make_plan(c);
  EXPECT_EQ(find_case(q, "load_balanced", "ring", 8).max_segments, 2);
  EXPECT_EQ(find_case(q, "contiguous", "ring", 8).max_segments, 1);
  EXPECT_EQ(q.recommendation.per_cp.at(0).sharder, "load_balanced");
  r.kernel = plan::Kernel::fitted;
  const plan::Plan f = plan::make_plan(r);
  EXPECT_GT(find_case(f, "striped", "ring", 8).predicted_step_s,
            1.1 * find_case(f, "workload_balanced", "ring", 8).predicted_step_s);
}

TEST(PlanOutput, PlansAreFastEnoughToRunInUnitTests) {
  // Not a timing test (bench/plan_bench.cpp is): W = 1024 over 256K tokens must simply complete.
  plan::PlanRequest r = request("llama3-8b", 262144, {1024});
  r.doc_lens = plan::draw_documents("lognormal:mean=4096,sigma=1,seed=1", 262144);
  r.mask = "document";
  const plan::Plan p = plan::make_plan(r);
  EXPECT_EQ(p.cases.size(), 5u * planned_count({1024}, 32, 8));  // default sharders x transports
  EXPECT_LE(find_case(p, "workload_balanced", "ring", 1024).imbalance,
            find_case(p, "load_balanced", "ring", 1024).imbalance);
}

// ---------------------------------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------------------------------

namespace {
// A report whose numbers follow the planner's own model with known F and B.
Report synthetic_report(double F, double B) {
  Report rep;
  rep.scenario_name = "synthetic";
  struct Spec {
    std::string transport, dtype;
    int64_t cp;
    std::vector<double> flops;
    double bytes;
  };
  const std::vector<Spec> specs = {{"ring", "float32", 4, {1e9, 2e9, 3e9, 4e9}, 1e8},
                                   {"allgather", "bfloat16", 2, {3e9, 1e9}, 4e7},
                                   {"ring", "float64", 3, {2e9, 2e9, 2.5e9}, 3e7}};
  int64_t index = 0;
  for (const auto& sp : specs) {
    RunResult res;
    res.index = index++;
    res.name = sp.transport + "/cp" + std::to_string(sp.cp);
    res.axes = {{"sharder", "contiguous"},
                {"transport", sp.transport},
                {"cp", std::to_string(sp.cp)},
                {"dtype", sp.dtype},
                {"mask", "causal"}};
    const double e = sp.dtype == "bfloat16" ? 2 : sp.dtype == "float32" ? 4 : 8;
    const double unit =
        static_cast<double>(make_transport(sp.transport)->bytes_per_call(CallShape{sp.cp, 1, 1, 1, 1, 1, static_cast<int64_t>(e)}));
    const double share = static_cast<double>(sp.cp - 1) * 2 * e / unit;
    const double c_max = *std::max_element(sp.flops.begin(), sp.flops.end()) / F;
    const double exposed =
        plan::call_time(sp.transport, sp.cp, c_max, sp.bytes * share, sp.bytes * (1 - share), B, 0).exposed_s;
    const double step = 3.5 * c_max + exposed;
    for (size_t r = 0; r < sp.flops.size(); ++r) {
      RankStats rs;
      rs.rank = static_cast<int>(r);
      rs.attention_flops = sp.flops[r];
      const double compute = 3.5 * sp.flops[r] / F;
      rs.comm_s = step - compute;  // faster ranks wait for the slowest
      rs.attention_s = compute;  // attention maths only
      rs.bytes_sent = sp.bytes;
      res.ranks.push_back(rs);
    }
    rep.results.push_back(res);
  }
  RunResult failed;
  failed.status = "failed";
  failed.axes = {{"transport", "ring"}, {"cp", "2"}, {"dtype", "float32"}};
  failed.ranks.push_back(RankStats{0, 1.0, 1e20, 1.0, 0.5, 0, 0, 0, 0, {}});  // must be ignored
  rep.results.push_back(failed);
  return rep;
}
}  // namespace

TEST(PlanCalibration, FitsFlopsAndBandwidthFromASyntheticReport) {
  const double F = 5e10, B = 1e8;
  const plan::Calibration cal = plan::calibrate(synthetic_report(F, B));
  EXPECT_EQ(cal.results, 3);
  EXPECT_EQ(cal.rank_samples, 9);
  EXPECT_EQ(cal.comm_samples, 3);
  EXPECT_NEAR(cal.attention_flops / F, 1.0, 1e-9);
  EXPECT_NEAR(cal.flops_spread, 0.0, 1e-9);
  EXPECT_NEAR(cal.bandwidth / B, 1.0, 0.01);
  EXPECT_LT(cal.bandwidth_rms_error, 0.01);
  const plan::Cluster c = plan::calibrated(plan::cluster_preset("h100-nvlink"), cal);
  EXPECT_EQ(c.attention_flops, cal.attention_flops);
  EXPECT_EQ(c.intra_bandwidth, cal.bandwidth);
  EXPECT_EQ(c.inter_bandwidth, cal.bandwidth);
  EXPECT_EQ(c.latency_s, plan::cluster_preset("h100-nvlink").latency_s);

  // Fully hidden communication: the bandwidth cannot be observed and is left alone.
  Report hidden = synthetic_report(F, 1e15);
  const plan::Calibration h = plan::calibrate(hidden);
  EXPECT_EQ(h.bandwidth, 0.0);
  EXPECT_FALSE(h.notes.empty());
}

TEST(PlanCalibration, CommandReadsTheReportAndPlansWithTheFit) {
  const std::string path = ::testing::TempDir() + "/cpbench_plan_calibration_" + std::to_string(getpid()) + ".json";
  write_json_file(path, to_json(synthetic_report(5e10, 1e8)));
  PlanCommandOptions o;
  o.model = "tiny";
  o.seq_len = 512;
  o.cps = {2, 4};
  o.calibrate = path;
  plan::Calibration cal;
  const plan::PlanRequest r = plan_request_from_options(o, &cal);
  EXPECT_NEAR(r.cluster.attention_flops / 5e10, 1.0, 1e-9);
  EXPECT_NEAR(r.cluster.intra_bandwidth / 1e8, 1.0, 0.01);
  EXPECT_EQ(r.cluster.name, "h100-nvlink+calibrated");
  // Explicit flags win over the fit.
  o.flops = 1e12;
  EXPECT_EQ(plan_request_from_options(o).cluster.attention_flops, 1e12);

  const CommandResult out = run_cpbench("plan --model tiny --seq-len 512 --cp 2,4 --calibrate " + path);
  EXPECT_EQ(out.status, 0) << out.output;
  EXPECT_NE(out.output.find("calibration from 3 ok results"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("attention 5e+10 FLOP/s"), std::string::npos) << out.output;
  const CommandResult js =
      run_cpbench("plan --model tiny --seq-len 512 --cp 2 --format json --calibrate " + path, " 2>/dev/null");
  ASSERT_EQ(js.status, 0) << js.output;
  const auto j = nlohmann::json::parse(js.output);
  EXPECT_NEAR(j["calibration"]["attention_flops"].get<double>() / 5e10, 1.0, 1e-9);
  EXPECT_NEAR(j["cluster"]["attention_flops"].get<double>() / 5e10, 1.0, 1e-9);
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------------
