// Planner micro-benchmarks (Google Benchmark): how long `cpbench plan` takes at scale.
//   BM_Plan_1M_W1024/<mask>      the whole plan (5 default sharders x every registered transport) of
//                                Llama-3-8B over 1,048,576 tokens at W = 1024; mask causal, or document
//                                over lognormal documents (mean 4096). The target: well under a second.
//   BM_PlanHybrid_1M_W1024/<mask> the same for Nemotron-H-8B (4 attention + 24 Mamba layers, both SSM strategies)
//   BM_PlanSharder_1M_W1024/<s>  one sharder's share of it (layout + per-rank work + every transport)
//   BM_Plan_128K_Llama8B         the README example: 131,072 tokens at W = 8, 16, 64
// Counters: cases planned, and seconds per case. The default kernel model (fitted) prices 8 ranks block
// by block at W = 1024 (docs/planner.md, "Scale").
#include <benchmark/benchmark.h>

#include "harness/planner/plan.hpp"

using namespace cpbench;

namespace {

plan::PlanRequest big_request(const std::string& mask, const std::string& model = "llama3-8b") {
  plan::PlanRequest r;
  r.model = plan::model_preset(model);
  r.seq_len = int64_t{1} << 20;
  r.cps = {1024};
  r.mask = mask;
  if (mask == "document") r.doc_lens = plan::draw_documents("lognormal:mean=4096,sigma=1,seed=1", r.seq_len);
  r.cluster = plan::cluster_preset("h100-ib400");
  return r;
}

void run(benchmark::State& state, const plan::PlanRequest& r) {
  size_t cases = 0;
  for (auto _ : state) {
    plan::Plan p = plan::make_plan(r);
    cases = p.cases.size();
    benchmark::DoNotOptimize(p.cases.data());
  }
  state.counters["cases"] = static_cast<double>(cases);
  state.counters["s_per_case"] = benchmark::Counter(
      static_cast<double>(cases), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_Plan_1M_W1024(benchmark::State& state, const std::string& mask) { run(state, big_request(mask)); }

// A hybrid model (Nemotron-H-8B: 4 attention, 24 Mamba layers): every case also priced under each SSM
// CP strategy that can run it (state passing's layout rule computes every layout at two more lengths).
void BM_PlanHybrid_1M_W1024(benchmark::State& state, const std::string& mask) {
  run(state, big_request(mask, "nemotron-h-8b"));
}

void BM_PlanSharder_1M_W1024(benchmark::State& state, const std::string& sharder) {
  plan::PlanRequest r = big_request("document");
  r.sharders = {sharder};
  run(state, r);
}

void BM_Plan_128K_Llama8B(benchmark::State& state) {
  plan::PlanRequest r;
  r.model = plan::model_preset("llama3-8b");
  r.seq_len = 131072;
  r.cps = {8, 16, 64};
  r.cluster = plan::cluster_preset("h100-nvlink");
  run(state, r);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Plan_1M_W1024, causal, std::string("causal"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Plan_1M_W1024, document, std::string("document"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanHybrid_1M_W1024, causal, std::string("causal"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanHybrid_1M_W1024, document, std::string("document"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanSharder_1M_W1024, contiguous, std::string("contiguous"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanSharder_1M_W1024, load_balanced, std::string("load_balanced"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanSharder_1M_W1024, striped, std::string("striped"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanSharder_1M_W1024, thd, std::string("thd"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanSharder_1M_W1024, workload_balanced, std::string("workload_balanced"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Plan_128K_Llama8B)->Unit(benchmark::kMillisecond);
