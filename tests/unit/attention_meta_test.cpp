// Sharder::attention_meta: the mask metadata the runner feeds the transports comes from the shard's
// own outputs (padding_mask, thd cu_seqlens / cu_seqlens_padded) and the one stream producer, and
// equals metadata built here, element by element, from the documents (independently of sharders/).
#include <gtest/gtest.h>

#include "sharder_test_util.hpp"
#include "sharders/registry.hpp"
#include "sharders/sharder.hpp"

namespace cpbench::test {
namespace {

struct Expected {
  std::vector<int64_t> pos, seg, doc;
  std::vector<bool> valid;
};

// thd: stream position p of the plan. Row position: the input column, or (new pad slot) the
// document's row offset + offset in the document; valid: a real token the input does not mark padding.
Expected expected_thd(const StreamPlan& plan, const at::Tensor& in_pad) {
  Expected e;
  for (const auto& sl : plan.slots) {
    const int64_t offset = sl.last_col - sl.slot + 1;
    e.pos.push_back(sl.col >= 0 ? sl.col : offset + sl.k);
    e.seg.push_back(sl.row);
    e.doc.push_back(sl.doc);
    e.valid.push_back(sl.col >= 0 && sl.k < sl.real && !in_pad[sl.row][sl.col].item<bool>());
  }
  return e;
}

void expect_meta(const TokenMeta& m, const Expected& e, const std::vector<int64_t>& positions, int64_t row,
                 const std::string& where) {
  ASSERT_EQ(m.pos.size(1), static_cast<int64_t>(positions.size())) << where;
  for (size_t i = 0; i < positions.size(); ++i) {
    const auto p = static_cast<size_t>(positions[i]);
    const auto j = static_cast<int64_t>(i);
    EXPECT_EQ(m.pos[row][j].item<int64_t>(), e.pos[p]) << where << " position " << p;
    EXPECT_EQ(m.segment[row][j].item<int64_t>(), e.seg[p]) << where << " position " << p;
    EXPECT_EQ(m.doc[row][j].item<int64_t>(), e.doc[p]) << where << " position " << p;
    EXPECT_EQ(m.valid[row][j].item<bool>(), e.valid[p]) << where << " position " << p;
  }
}

TEST(AttentionMeta, ThdFollowsTheDocumentsSlotsAndPadding) {
  const int64_t B = 2, S = 16;
  const RowDocs rows = {{{7, 7}, {5, 8}}, {{3, 3}, {9, 12}}};
  at::Tensor pad = at::zeros({B, S}, at::kBool);
  pad[1][5] = true;  // a caller-marked pad token inside a document
  for (int64_t W : {1, 2, 3}) {
    const StreamPlan plan = plan_stream(W, B, S, rows);
    const Expected e = expected_thd(plan, pad);
    auto sh = sharders_for("thd", W);
    for (int64_t r = 0; r < W; ++r) {
      Batch b = make_batch(BatchSpec{B, S, 3, 4, false, Positions::bs, true, false, false, false});
      auto [lens, slots] = seq_lens_of(rows);
      b.seq_lens = lens;
      b.seq_lens_padded = slots;
      b.padding_mask = pad;
      const Batch local = sh[static_cast<size_t>(r)].shard(b);
      const TokenMeta m = sh[static_cast<size_t>(r)].attention_meta(local);
      const at::Tensor mine = sh[static_cast<size_t>(r)].local_token_global_indices(plan.P());
      std::vector<int64_t> idx(mine.data_ptr<int64_t>(), mine.data_ptr<int64_t>() + mine.numel());
      expect_meta(m, e, idx, 0, "W=" + std::to_string(W) + " rank " + std::to_string(r));
    }
  }
}

TEST(AttentionMeta, ThdConsumesTheReturnedCuSeqlens) {
  auto sh = sharders_for("thd", 2);
  Batch b = make_batch(BatchSpec{1, 12, 3, 4, false, Positions::bs, true, false, false, false});
  auto [lens, slots] = seq_lens_of({{{5, 5}, {7, 7}}});
  b.seq_lens = lens;
  Batch local = sh[0].shard(b);
  const TokenMeta good = sh[0].attention_meta(local);
  // A document boundary moved in the returned metadata changes the documents the mask sees.
  local.cu_seqlens_padded = at::tensor(std::vector<int32_t>{0, 4, 12});
  local.cu_seqlens = local.cu_seqlens_padded;
  local.cu_seqlens_real = at::tensor(std::vector<int32_t>{0, 4, 11});
  EXPECT_THROW((void)sh[0].attention_meta(local), Error) << "cu_seqlens_real disagreeing with the documents";
  Batch local3 = sh[0].shard(b);
  local3.cu_seqlens = local3.cu_seqlens_real;
  EXPECT_THROW((void)sh[0].attention_meta(local3), Error) << "cu_seqlens under CP holds the padded boundaries";
  Batch local2 = sh[0].shard(b);
  local2.padding_mask = local2.padding_mask->logical_not();
  EXPECT_TRUE(sh[0].attention_meta(local2).valid.equal(good.valid.logical_not())) << "valid is !padding_mask";
}

TEST(AttentionMeta, UnpackedRowsKeepTheirOwnDocumentsAndPadding) {
  // Two rows of 10 tokens: row 0 documents [4, 3] then 3 pad, row 1 one document of 6 then 4 pad.
  const int64_t B = 2, S = 10;
  Batch b = make_batch(BatchSpec{B, S, 3, 4, false, Positions::bs, true, false, false, false});
  b.seq_lens = at::tensor(std::vector<int64_t>{4, 3, 6, kSeqLensSentinel}).view({2, 2});
  b.padding_mask = at::zeros({B, S}, at::kBool);
  for (int64_t s = 7; s < S; ++s) b.padding_mask->index_put_({0, s}, true);
  for (int64_t s = 6; s < S; ++s) b.padding_mask->index_put_({1, s}, true);
  for (const std::string name : {"contiguous", "load_balanced", "striped"}) {
    const int64_t W = 3;
    auto sh = sharders_for(name, W);
    for (int64_t r = 0; r < W; ++r) {
      const Batch local = sh[static_cast<size_t>(r)].shard(b);
      const TokenMeta m = sh[static_cast<size_t>(r)].attention_meta(local);
      const int64_t P = sh[static_cast<size_t>(r)].shard_layout().padded_seq_len;
      const at::Tensor mine = sh[static_cast<size_t>(r)].local_token_global_indices(P);
      for (int64_t row = 0; row < B; ++row) {
        Expected e;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t doc = row == 0 ? (p < 4 ? 0 : p < 7 ? 1 : -1) : (p < 6 ? 0 : -1);
          e.pos.push_back(p);
          e.seg.push_back(0);
          e.doc.push_back(doc);
          e.valid.push_back(doc >= 0);
        }
        std::vector<int64_t> idx(mine.data_ptr<int64_t>(), mine.data_ptr<int64_t>() + mine.numel());
        expect_meta(m, e, idx, row, name + " rank " + std::to_string(r) + " row " + std::to_string(row));
      }
    }
  }
}

}  // namespace
}  // namespace cpbench::test
