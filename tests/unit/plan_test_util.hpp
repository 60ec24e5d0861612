#pragma once
// What the planner's test suites share (plan_*_test.cpp): the mixed document lengths, running the
// cpbench executable, finding a case, the planned labels and counts, a case's transport.
#include "harness/planner/plan.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/plan_command.hpp"
#include "harness/planner/mixer_cost.hpp"
#include "harness/model/data.hpp"
#include "kernels/mixers/mamba/mamba.hpp"
#include "kernels/mixers/mamba/mamba_cp_costs.hpp"
#include "kernels/transports/transport.hpp"
#include "reports/json_report.hpp"
#include "sharders/core/check.hpp"
#include "sharders/mask.hpp"
#include "sharders/mask_area.hpp"
#include "sharders/registry.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...


namespace cpbench::plan_test {

using namespace cpbench;

inline const std::vector<int64_t> kMixedDocs = {1800, 100, 700, 300, 650, 40, 250, 60, 196};  // 4096 tokens

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

// `redirect` decides which streams are captured: both by default.
inline CommandResult run_cpbench(const std::string& args, const std::string& redirect = " 2>&1") {
  CommandResult res;
  const std::string cmd = std::string(CPBENCH_EXE) + " " + args + redirect;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return res;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) res.output.append(buf, n);
  const int st = pclose(pipe);
  res.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return res;
}

inline double max_over_mean(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end()) /
         (std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()));
}

inline plan::PlanRequest request(const std::string& model, int64_t S, std::vector<int64_t> cps,
                          const std::string& mask = "causal") {
  plan::PlanRequest r;
  r.model = plan::model_preset(model);
  r.seq_len = S;
  r.cps = std::move(cps);
  r.mask = mask;
  r.cluster = plan::cluster_preset("h100-nvlink");
  return r;
}

inline const plan::PlanCase& find_case(const plan::Plan& p, const std::string& sharder, const std::string& transport,
                                int64_t cp) {
  for (const auto& c : p.cases)
    if (c.sharder == sharder && c.transport == transport && c.cp == cp) return c;
  throw std::runtime_error("no case " + sharder + "/" + transport + " cp=" + std::to_string(cp));
}

// Visible pairs per rank exactly as the runner sets a case up: the global batch of harness/model/data.cpp,
// the Sharder with the case's mask, the stream metadata, and kernels' build_mask of each rank's
// queries against every rank's keys (what the transports sum into AttentionStats::visible_pairs).
inline std::vector<int64_t> runner_visible_pairs(const std::string& sharder, int64_t W, int64_t S,
                                          const std::vector<int64_t>& docs, const std::string& mask_text) {
  BatchSpec spec;
  spec.batch_size = 1;
  spec.seq_len = S;
  if (!docs.empty()) spec.documents = {docs};
  const GlobalData data = make_global_data(spec, ModelConfig::preset_named("tiny"), at::kFloat, at::Device(at::kCPU));
  const MaskSpec mask = MaskSpec::parse(mask_text);
  // Every rank's shard and the attention metadata it returns, concatenated in rank order.
  std::vector<TokenMeta> ranks;
  for (int64_t r = 0; r < W; ++r) {
    Sharder sh(make_layout(sharder), SharderOptions{W, r, spec.padding_token_id, mask, 0});
    const Batch local = sh.shard(data.batch);
    ranks.push_back(sh.attention_meta(local));
  }
  const auto cat = [&](at::Tensor TokenMeta::*field) {
    std::vector<at::Tensor> parts;
    for (const auto& m : ranks) parts.push_back(m.*field);
    return at::cat(parts, 1);
  };
  const TokenMeta all{cat(&TokenMeta::pos), cat(&TokenMeta::segment), cat(&TokenMeta::doc), cat(&TokenMeta::valid)};
  std::vector<int64_t> out;
  // The work rule (sharders/mask.hpp): visible pairs whose query is a real token too.
  for (int64_t r = 0; r < W; ++r) {
    const TokenMeta& q = ranks[static_cast<size_t>(r)];
    out.push_back(build_mask(mask, q, all).logical_and(q.valid.unsqueeze(-1)).sum().item<int64_t>());
  }
  return out;
}

// The transport instances the default plan prices at W for a model of `heads` / `kv_heads` (labels as
// PlanCase::transport): every planned transport, hybrid once per Ulysses degree 1 < U < W dividing
// W, each only where it can split the heads.
inline std::vector<std::string> planned_labels(int64_t W, int64_t heads, int64_t kv_heads) {
  std::vector<std::string> v;
  for (const auto& n : planned_transports()) {
    if (takes_ulysses(n)) {
      for (int64_t u = 2; u < W; ++u)
        if (W % u == 0 && make_transport(n, TransportOptions{u})->unsupported_heads(W, heads, kv_heads).empty())
          v.push_back(n + "-u" + std::to_string(u));
    } else if (make_transport(n)->unsupported_heads(W, heads, kv_heads).empty()) {
      v.push_back(n);
    }
  }
  return v;
}
inline size_t planned_count(std::initializer_list<int64_t> cps, int64_t heads, int64_t kv_heads) {
  size_t n = 0;
  for (int64_t W : cps) n += planned_labels(W, heads, kv_heads).size();
  return n;
}
// The transport of a plan case, configured as the planner configured it.
inline std::shared_ptr<const Transport> case_transport(const plan::PlanCase& c) {
  if (c.ulysses == 0) return make_transport(c.transport);
  return make_transport(c.transport.substr(0, c.transport.rfind("-u")), TransportOptions{c.ulysses});
}
}  // namespace cpbench::plan_test
