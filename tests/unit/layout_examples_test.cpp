// Worked examples from the peers (shared/reference/nemo-automodel-cp.md §1, §6.4): our layouts must
// reproduce them exactly.
#include <gtest/gtest.h>

#include "sharders/registry.hpp"

using namespace cpbench;
using V = std::vector<std::vector<int64_t>>;

namespace {
V ranks_of(const std::string& name, int64_t cp, int64_t S) {
  return make_layout(name)->compute(LayoutRequest{cp, S, {}, MaskSpec{}, 0, {}}).ranks;
}
V thd_ranks(int64_t cp, std::vector<int64_t> docs) {
  LayoutRequest r;
  r.cp = cp;
  r.doc_lens = std::move(docs);
  return make_layout("thd")->compute(r).ranks;
}
}  // namespace

TEST(LayoutExamples, HeadTailMatchesPyTorchAndNeMo) {
  EXPECT_EQ(ranks_of("load_balanced", 2, 8), (V{{0, 1, 6, 7}, {2, 3, 4, 5}}));
  EXPECT_EQ(ranks_of("load_balanced", 4, 8), (V{{0, 7}, {1, 6}, {2, 5}, {3, 4}}));
  EXPECT_EQ(ranks_of("load_balanced", 2, 12), (V{{0, 1, 2, 9, 10, 11}, {3, 4, 5, 6, 7, 8}}));
  EXPECT_EQ(ranks_of("load_balanced", 3, 12), (V{{0, 1, 10, 11}, {2, 3, 8, 9}, {4, 5, 6, 7}}));
  EXPECT_EQ(ranks_of("load_balanced", 4, 16), (V{{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}}));
  EXPECT_EQ(ranks_of("round_robin", 2, 8), ranks_of("load_balanced", 2, 8));
  EXPECT_EQ(ranks_of("sdpa_wrap", 3, 12), ranks_of("load_balanced", 3, 12));
}

TEST(LayoutExamples, ContiguousAndStriped) {
  EXPECT_EQ(ranks_of("contiguous", 2, 8), (V{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(ranks_of("striped", 3, 7), (V{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}));
}

TEST(LayoutExamples, ThdMatchesTransformerEngine) {
  EXPECT_EQ(thd_ranks(2, {8, 4}), (V{{0, 1, 6, 7, 8, 11}, {2, 3, 4, 5, 9, 10}}));
  EXPECT_EQ(thd_ranks(2, {4, 4}), (V{{0, 3, 4, 7}, {1, 2, 5, 6}}));
  EXPECT_EQ(thd_ranks(2, {4, 8, 4}), (V{{0, 3, 4, 5, 10, 11, 12, 15}, {1, 2, 6, 7, 8, 9, 13, 14}}));
  EXPECT_EQ(thd_ranks(4, {8, 8}), (V{{0, 7, 8, 15}, {1, 6, 9, 14}, {2, 5, 10, 13}, {3, 4, 11, 12}}));
  // A single document reduces to the head-tail layout.
  EXPECT_EQ(thd_ranks(3, {24}), ranks_of("load_balanced", 3, 24));
}
