#pragma once
// Runs one case on one rank: process groups, data, model, the single-rank reference, the CP step
// (shard -> forward with the CP attention -> loss -> backward -> gradient all-reduce -> gather), the
// comparison, and timing. Every rank of the case calls it; the result is meaningful on global rank 0.
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "harness/runner/scenario.hpp"
#include "reports/result.hpp"

namespace cpbench {

struct RankRuntime {
  int rank = 0;        // global rank in the job
  int world_size = 1;
  int local_rank = 0;  // GPU index on this node
  int local_world_size = 1;  // ranks on this node (LOCAL_WORLD_SIZE): decides NCCL vs Gloo
  c10::intrusive_ptr<c10d::Store> store;
};


// Why this case cannot run here ("" if it can). Same answer on every rank.
[[nodiscard]] std::string skip_reason(const ScenarioSpec& scenario, const CaseSpec& c, int job_world_size);

// Throws on errors (the caller records the case as failed and ends the rank, since collectives of
// the other ranks may be out of step).
[[nodiscard]] RunResult run_case(const ScenarioSpec& scenario, const CaseSpec& c, RankRuntime& rt);

// Axes recorded for a case in the report.
[[nodiscard]] RunResult result_skeleton(const ScenarioSpec& scenario, const CaseSpec& c);

}  // namespace cpbench
