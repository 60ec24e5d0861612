#pragma once
// What the whole-step suites share (step_*_test.cpp): a small MoE model whose every count is worked by
// hand in the suites, and a case's shape over it.
#include <gtest/gtest.h>

#include "harness/planner/presets.hpp"
#include "harness/planner/step/case_shape.hpp"

namespace cpbench::step_test {

using namespace cpbench::plan;
using namespace cpbench::plan::step;

// h 64, 4 heads / 2 kv heads x 16, 4 layers (all attention), vocab 1000, 4 MLP blocks of which 2 MoE
// (8 experts of width 128, top-2, 1 shared); the 2 dense MLPs are (2 + 1) x 128 = 384 wide; untied.
inline ModelShape small_moe() {
  ModelShape m;
  m.name = "small-moe";
  m.layers = 4, m.hidden = 64, m.heads = 4, m.kv_heads = 2, m.head_dim = 16;
  m.vocab = 1000, m.ffn = 128, m.mlp_layers = 4, m.moe_layers = 2;
  m.experts = 8, m.experts_per_token = 2, m.shared_experts = 1;
  return m;
}

// The same without experts: 4 dense MLPs of width 128.
inline ModelShape small_dense() {
  ModelShape m = small_moe();
  m.name = "small-dense";
  m.moe_layers = 0, m.experts = 0, m.experts_per_token = 0, m.shared_experts = 0;
  return m;
}

inline Cluster h100() { return cluster_preset("h100-nvlink"); }

inline CaseShape shape(const ModelShape& m, const Cluster& c, Parallel p, Recompute rc = Recompute::none,
                       int64_t seq = 1024, int64_t microbatches = 1) {
  Training t;
  t.recompute = rc;
  t.microbatches = microbatches;
  return CaseShape{m, c, p, t, seq};
}

}  // namespace cpbench::step_test
