// The one visibility rule (sharders/mask.hpp), pinned by a hand-written truth table: single tokens
// through visibility() (what build_mask evaluates), position_test on plain integers (mask_area's block
// counts), tile bounds (the transports' tile classification), and Stream::key_range (area counting)
// against the same table. Every caller of the rule is one of these entry points, so a wrong rule fails
// here whichever of them it reaches.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "sharders/core/check.hpp"
#include "sharders/mask.hpp"
#include "sharders/stream.hpp"

namespace cpbench {
namespace {

struct Row {
  std::string mask;
  int64_t q_pos, k_pos, q_doc, k_doc, q_seg, k_seg;
  bool k_valid, visible;
};

// Written from the definition (pos[q] - w < pos[k] <= pos[q] for sliding_window:w), not from the code.
const std::vector<Row> kTruth = {
    {"causal", 5, 5, 0, 0, 0, 0, true, true},
    {"causal", 5, 6, 0, 0, 0, 0, true, false},
    {"causal", 5, 0, 0, 0, 0, 0, true, true},
    {"causal", 5, 3, 0, 0, 0, 1, true, false},
    {"causal", 5, 3, 0, 0, 0, 0, false, false},
    {"causal", 5, 3, 0, 1, 0, 0, true, true},
    {"full", 0, 9, 0, 0, 0, 0, true, true},
    {"full", 9, 0, 0, 0, 0, 0, true, true},
    {"full", 0, 9, 0, 0, 0, 0, false, false},
    {"full", 0, 9, 0, 0, 1, 0, true, false},
    {"document", 5, 3, 0, 0, 0, 0, true, true},
    {"document", 5, 3, 0, 1, 0, 0, true, false},
    {"document", 5, 6, 0, 0, 0, 0, true, false},
    {"document", 5, 5, 2, 2, 0, 0, true, true},
    {"sliding_window:3", 5, 3, 0, 0, 0, 0, true, true},
    {"sliding_window:3", 5, 2, 0, 0, 0, 0, true, false},
    {"sliding_window:3", 5, 5, 0, 0, 0, 0, true, true},
    {"sliding_window:3", 5, 6, 0, 0, 0, 0, true, false},
    {"sliding_window:1", 4, 4, 0, 0, 0, 0, true, true},
    {"sliding_window:1", 4, 3, 0, 0, 0, 0, true, false},
    {"sliding_window:3", 5, 4, 0, 1, 0, 0, true, true},
    // The window within the document (a sliding layer under mask: document): both conditions.
    {"document+sliding_window:3", 5, 4, 0, 0, 0, 0, true, true},
    {"document+sliding_window:3", 5, 4, 0, 1, 0, 0, true, false},
    {"document+sliding_window:3", 5, 2, 1, 1, 0, 0, true, false},
    {"document+sliding_window:3", 5, 3, 1, 1, 0, 0, true, true},
    {"document+sliding_window:3", 5, 6, 1, 1, 0, 0, true, false},
    {"document+sliding_window:3", 5, 5, 1, 1, 0, 0, false, false},
    {"document+sliding_window:3", 5, 4, 1, 1, 0, 1, true, false},
};

// One token's field as the bounds of a [1, 1, 1] group (queries [B, Nq, 1], keys [B, 1, Nk]).
at::Tensor one(int64_t v) { return at::full({1, 1, 1}, v, at::kLong); }

RuleBounds token(int64_t pos, int64_t doc, int64_t seg, bool keys, bool valid) {
  RuleBounds b;
  b.pos_lo = b.pos_hi = one(pos);
  b.doc_lo = b.doc_hi = one(doc);
  b.segment_lo = b.segment_hi = one(seg);
  if (keys) b.valid_any = b.valid_all = at::full({1, 1, 1}, valid, at::kBool);
  return b;
}

TEST(MaskRule, TruthTableOfSingleTokens) {
  for (const Row& r : kTruth) {
    const MaskSpec mask = MaskSpec::parse(r.mask);
    const Visibility v = visibility(mask, token(r.q_pos, r.q_doc, r.q_seg, false, true),
                                    token(r.k_pos, r.k_doc, r.k_seg, true, r.k_valid), true);
    EXPECT_EQ(v.some.item<bool>(), r.visible) << r.mask << " q=" << r.q_pos << " k=" << r.k_pos;
    EXPECT_EQ(v.every.item<bool>(), r.visible) << r.mask << " q=" << r.q_pos << " k=" << r.k_pos;
    // build_mask is the rule on single tokens.
    const auto meta = [](int64_t pos, int64_t doc, int64_t seg, bool valid) {
      return TokenMeta{at::full({1, 1}, pos, at::kLong), at::full({1, 1}, seg, at::kLong),
                       at::full({1, 1}, doc, at::kLong), at::full({1, 1}, valid, at::kBool)};
    };
    EXPECT_EQ(build_mask(mask, meta(r.q_pos, r.q_doc, r.q_seg, true), meta(r.k_pos, r.k_doc, r.k_seg, r.k_valid))
                  .item<bool>(),
              r.visible)
        << r.mask << " q=" << r.q_pos << " k=" << r.k_pos;
    // The coordinate condition alone, on integers (what mask_area's block counts call).
    const bool by_position = position_test<int64_t>(mask, r.q_pos, r.q_pos, r.k_pos, r.k_pos).some.value_or(true);
    if (r.k_valid && r.q_seg == r.k_seg && (r.q_doc == r.k_doc || !mask.same_document())) {
      EXPECT_EQ(by_position, r.visible) << r.mask << " q=" << r.q_pos << " k=" << r.k_pos;
    }
  }
}

TEST(MaskRule, TheDocumentWindowParsesAndPrintsItself) {
  const MaskSpec m = MaskSpec::parse("document+sliding_window:38");
  EXPECT_EQ(m.kind, MaskSpec::Kind::sliding_window);
  EXPECT_EQ(m.window, 38);
  EXPECT_TRUE(m.documents);
  EXPECT_TRUE(m.same_document());
  EXPECT_EQ(m.to_string(), "document+sliding_window:38");
  EXPECT_FALSE(MaskSpec::parse("sliding_window:38").same_document());
  EXPECT_NE(MaskSpec::parse("sliding_window:38"), m);
  EXPECT_THROW((void)MaskSpec::parse("document+causal"), UsageError);
}

TEST(MaskRule, TileBoundsDecideEmptyAndFullCellsExactly) {
  // Queries with positions in [q_lo, q_hi] against keys in [k_lo, k_hi]: {some, every}.
  struct Tile {
    std::string mask;
    int64_t q_lo, q_hi, k_lo, k_hi;
    bool some, every;
  };
  const std::vector<Tile> tiles = {
      {"causal", 4, 7, 0, 3, true, true},
      {"causal", 4, 7, 6, 9, true, false},
      {"causal", 4, 7, 8, 9, false, false},
      {"causal", 4, 7, 5, 7, true, false},
      {"full", 0, 1, 8, 9, true, true},
      {"sliding_window:3", 10, 11, 0, 5, false, false},
      {"sliding_window:3", 10, 11, 9, 10, true, true},
      {"sliding_window:3", 10, 11, 8, 10, true, false},
  };
  for (const Tile& t : tiles) {
    const auto r = position_test<int64_t>(MaskSpec::parse(t.mask), t.q_lo, t.q_hi, t.k_lo, t.k_hi);
    EXPECT_EQ(r.some.value_or(true), t.some) << t.mask << " q[" << t.q_lo << ", " << t.q_hi << "]";
    EXPECT_EQ(r.every.value_or(true), t.every) << t.mask << " q[" << t.q_lo << ", " << t.q_hi << "]";
  }
}

TEST(MaskRule, KeyRangesAgreeWithTheTruthTable) {
  // One row of 12 tokens, documents [0, 6) and [6, 12), every token valid: a key k is in query q's
  // key_range exactly when the table's rule makes it visible.
  const Stream s = unpacked_stream(12, std::vector<int64_t>{6, 6}, 12);
  for (const std::string text :
       {"causal", "full", "document", "sliding_window:1", "sliding_window:3", "document+sliding_window:3"}) {
    const MaskSpec mask = MaskSpec::parse(text);
    for (int64_t q = 0; q < 12; ++q) {
      const auto [lo, hi] = s.key_range(mask, q);
      for (int64_t k = 0; k < 12; ++k) {
        bool want = true;
        if (mask.kind != MaskSpec::Kind::full) want = k <= q;
        if (mask.kind == MaskSpec::Kind::sliding_window) want = want && q - mask.window < k;
        if (mask.kind == MaskSpec::Kind::document || text.starts_with("document+")) want = want && q / 6 == k / 6;
        EXPECT_EQ(lo <= k && k <= hi, want) << text << " q=" << q << " k=" << k;
      }
    }
  }
}

}  // namespace
}  // namespace cpbench
