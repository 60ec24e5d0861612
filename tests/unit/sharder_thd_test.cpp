// THD through the Sharder, one Sharder per rank in one process: rows without seq_lens are one document
// each, packed documents round-trip for every cp, the reference's worked example (§6.1/6.4), Transformer
// Engine's partition, the trailing pad rules, aligned rows, synthesized and mRoPE positions.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "sharder_verbs_util.hpp"

using namespace cpbench;
using namespace cpbench::test;

namespace {

struct ThdCase {
  std::string what;
  int64_t B, S;
  RowDocs rows;         // empty: no seq_lens (each row one document)
  bool with_slots = true;  // pass seq_lens_padded
};

void check_thd_round_trip(const ThdCase& c, int64_t W, BatchSpec sp) {
  sp.B = c.B;
  sp.S = c.S;
  sp.seq_first_extra = false;  // thd flattens the batch dim: seq_dim 0 has none before it
  SCOPED_TRACE(describe("thd " + c.what, W, sp));
  Batch in = make_batch(sp);
  RowDocs rows = c.rows;
  if (rows.empty()) {
    rows.assign(static_cast<size_t>(c.B), {DocSpec{c.S, c.S}});
  } else {
    auto [lens, slots] = seq_lens_of(rows);
    in.seq_lens = lens;
    if (c.with_slots) in.seq_lens_padded = slots;
  }
  const StreamPlan plan = plan_stream(W, c.B, c.S, rows);
  const int64_t P = plan.P(), B = c.B, S = c.S;

  auto sh = sharders_for("thd", W);
  std::vector<Batch> locals;
  for (auto& s : sh) locals.push_back(s.shard(in));

  const ShardLayout& L = sh[0].shard_layout();
  ASSERT_EQ(L.padded_seq_len, P);
  EXPECT_FALSE(L.original_seq_len.has_value());
  ASSERT_TRUE(L.input_row_shape.has_value());
  EXPECT_EQ(*L.input_row_shape, (std::vector<int64_t>{B, S}));
  EXPECT_EQ(L.global.cu_seqlens_padded, plan.cu_padded);
  EXPECT_EQ(L.global.cu_seqlens, plan.cu_real) << "GlobalLayout::cu_seqlens holds real lengths";
  std::vector<int64_t> source;
  for (const auto& sl : plan.slots) source.push_back(sl.col >= 0 ? sl.row * S + sl.col : -1);
  EXPECT_EQ(L.stream_source, source);
  EXPECT_EQ(L.input_token_stream_positions.has_value(), !plan.identity);
  if (L.input_token_stream_positions) {
    EXPECT_EQ(L.input_token_stream_positions->sizes(), (std::vector<int64_t>{B, S}));
    EXPECT_EQ(to_vec(*L.input_token_stream_positions), plan.input_pos);
  }
  for (int64_t r = 0; r < W; ++r) {
    const Batch& l = locals[static_cast<size_t>(r)];
    ASSERT_TRUE(l.cu_seqlens && l.cu_seqlens_padded);
    EXPECT_EQ(l.cu_seqlens->scalar_type(), at::kInt);
    EXPECT_EQ(l.cu_seqlens_padded->scalar_type(), at::kInt);
    ASSERT_TRUE(l.cu_seqlens_real.has_value());
    EXPECT_EQ(to_vec(*l.cu_seqlens_real), plan.cu_real);
    EXPECT_EQ(to_vec(*l.cu_seqlens), W > 1 ? plan.cu_padded : plan.cu_real)
        << "cu_seqlens: padded boundaries under CP, real ones at W = 1 (as the seed)";
    EXPECT_EQ(to_vec(*l.cu_seqlens_padded), plan.cu_padded);
    EXPECT_EQ(l.max_seqlen, plan.max_padded);
    EXPECT_EQ(l.primary().size(0), 1);
    EXPECT_EQ(l.primary().size(1), P / W);
  }
  const GlobalLayout& g = L.global;
  ASSERT_EQ(static_cast<int64_t>(g.ranks.size()), W);
  for (int64_t r = 0; r < W; ++r)
    EXPECT_EQ(to_vec(sh[static_cast<size_t>(r)].local_token_global_indices(P)), g.ranks[static_cast<size_t>(r)]);

  const bool dropped = std::find(plan.input_pos.begin(), plan.input_pos.end(), -1) != plan.input_pos.end();
  for (const Key& key : keys_of(in)) {
    SCOPED_TRACE(key.name);
    const std::vector<at::Tensor> parts = parts_of(locals, key);
    ASSERT_EQ(static_cast<int64_t>(parts.size()), W);
    at::Tensor input = *key.get(in);
    if (key.name == "position_ids" && input.dim() == 2 && input.size(0) != B) input = input.expand({B, S});
    at::Tensor stream = key.name == "padding_mask" ? expected_stream_padding(plan, in.padding_mask)
                                                   : expected_stream(input, key.seq_dim, plan, S, key.fill);
    for (int64_t r = 0; r < W; ++r)
      EXPECT_TRUE(same(parts[static_cast<size_t>(r)],
                       stream.index_select(key.seq_dim, idx_tensor(g.ranks[static_cast<size_t>(r)]))))
          << "rank " << r;
    EXPECT_TRUE(same(sh[0].gather_token_tensor(parts, key.seq_dim, false), stream));
    // trim: back to the [B, S] rows; dropped input slots need (and get) the fill.
    const at::Scalar trim_fill = key.fill.value_or(at::Scalar(-1));
    at::Tensor rows_back = sh[0].gather_token_tensor(parts, key.seq_dim, true, trim_fill);
    at::Tensor expected_rows = input;
    if (key.name == "padding_mask")  // the pack layout marks in-slot padding too
      expected_rows = stream.squeeze(0).index_select(0, idx_tensor([&] {
                                           std::vector<int64_t> v;
                                           for (int64_t p : plan.input_pos) v.push_back(std::max<int64_t>(p, 0));
                                           return v;
                                         }()))
                          .view({B, S});
    EXPECT_TRUE(same(rows_back, with_dropped(expected_rows, key.seq_dim, plan, B, S, trim_fill)));
    if (!dropped) {
      EXPECT_TRUE(same(sh[0].gather_token_tensor(parts, key.seq_dim, true), expected_rows));
    }
    // shard_token_tensor of the input-row tensor reproduces the sharded key (fill only matters for new slots).
    if (key.fill && key.name != "padding_mask") {
      for (int64_t r = 0; r < W; ++r)
        EXPECT_TRUE(same(sh[static_cast<size_t>(r)].shard_token_tensor(input, key.seq_dim, key.fill),
                         parts[static_cast<size_t>(r)]))
            << "shard_token_tensor, rank " << r;
    }
  }
  if (!in.position_ids) {
    const at::Tensor offsets = expected_stream_offsets(plan);
    for (int64_t r = 0; r < W; ++r)
      EXPECT_TRUE(same(*locals[static_cast<size_t>(r)].position_ids,
                       offsets.index_select(1, idx_tensor(g.ranks[static_cast<size_t>(r)]))));
  }
  if (!in.padding_mask) {
    const at::Tensor pm = expected_stream_padding(plan, std::nullopt);
    for (int64_t r = 0; r < W; ++r) {
      ASSERT_TRUE(locals[static_cast<size_t>(r)].padding_mask.has_value());
      EXPECT_TRUE(same(*locals[static_cast<size_t>(r)].padding_mask,
                       pm.index_select(1, idx_tensor(g.ranks[static_cast<size_t>(r)]))));
    }
  }
}

const std::vector<ThdCase>& thd_cases() {
  static const std::vector<ThdCase> all = {
      {"reference 6.1 example", 2, 6, {{{3, 4}, {2, 2}}, {{6, 6}}}, true},
      {"slots and trailing pad", 2, 16, {{{5, 5}, {7, 8}}, {{1, 1}, {2, 3}, {4, 4}}}, true},
      {"three rows", 3, 8, {{{8, 8}}, {{3, 3}, {3, 3}}, {{1, 1}}}, true},
      {"empty row", 2, 5, {{{5, 5}}, {}}, true},
      {"seq_lens without seq_lens_padded", 2, 9, {{{3, 3}, {4, 4}}, {{9, 9}}}, false},
      {"aligned documents", 2, 16, {{{8, 8}, {8, 8}}, {{16, 16}}}, true},
  };
  return all;
}

}  // namespace

TEST(SharderThd, RowsWithoutSeqLensAreOneDocumentEach) {
  for (int64_t W = 1; W <= 8; ++W)
    for (size_t i = 0; i < kLengths.size(); ++i) {
      BatchSpec sp = variant(W + static_cast<int64_t>(i), kLengths[i]);
      check_thd_round_trip({"rows", sp.B, kLengths[i], {}, true}, W, sp);
    }
}

TEST(SharderThd, PackedDocumentsRoundTripForEveryCp) {
  for (const auto& c : thd_cases())
    for (int64_t W = 1; W <= 8; ++W)
      for (int64_t v = 0; v < 4; ++v) {
        if (v == 3) continue;  // variant 3 is B=3; thd cases fix their own B
        check_thd_round_trip(c, W, variant(v, c.S));
      }
}

// shared/reference/nemo-automodel-cp.md §6.1: ids [[1,2,3,99,4,5],[6..11]], seq_lens [[3,2],[6,-1000]],
// padded [[4,2],[6,-1000]] -> cu_seqlens [0,3,5,11], cu_seqlens_padded [0,4,6,12], max_seqlen 6.
TEST(SharderThd, ReferenceWorkedExample) {
  Batch in;
  in.input_ids = at::tensor({1, 2, 3, 99, 4, 5, 6, 7, 8, 9, 10, 11}, at::kLong).view({2, 6});
  in.labels = in.input_ids->clone() + 100;
  in.seq_lens = at::tensor({3, 2, 6, -1000}, at::kLong).view({2, 2});
  in.seq_lens_padded = at::tensor({4, 2, 6, -1000}, at::kLong).view({2, 2});
  {
    SharderOptions o;  // cp 1: pad multiple 2, every slot already even -> pure flatten
    Sharder s(make_layout("thd"), o);
    const Batch out = s.shard(in);
    EXPECT_EQ(to_vec(*out.cu_seqlens), (std::vector<int64_t>{0, 3, 5, 11}));
    EXPECT_EQ(to_vec(*out.cu_seqlens_padded), (std::vector<int64_t>{0, 4, 6, 12}));
    EXPECT_EQ(out.max_seqlen, 6);
    EXPECT_EQ(to_vec(*out.input_ids), (std::vector<int64_t>{1, 2, 3, 99, 4, 5, 6, 7, 8, 9, 10, 11}));
    EXPECT_EQ(to_vec(*out.position_ids), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(to_vec(out.padding_mask->to(at::kLong)), (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
    EXPECT_FALSE(s.shard_layout().input_token_stream_positions.has_value());
  }
  {
    // cp 2: documents padded to multiples of 4 -> [0,4,8,16]; TE's partition per document.
    auto sh = sharders_for("thd", 2, 0);
    const Batch r0 = sh[0].shard(in), r1 = sh[1].shard(in);
    EXPECT_EQ(to_vec(*r0.cu_seqlens_real), (std::vector<int64_t>{0, 3, 5, 11}));
    EXPECT_EQ(to_vec(*r0.cu_seqlens), (std::vector<int64_t>{0, 4, 8, 16})) << "TE's cu_seqlens under CP";
    EXPECT_EQ(to_vec(*r0.cu_seqlens_padded), (std::vector<int64_t>{0, 4, 8, 16}));
    EXPECT_EQ(r0.max_seqlen, 8);
    EXPECT_EQ(to_vec(sh[0].local_token_global_indices(16)), (std::vector<int64_t>{0, 3, 4, 7, 8, 9, 14, 15}));
    EXPECT_EQ(to_vec(sh[1].local_token_global_indices(16)), (std::vector<int64_t>{1, 2, 5, 6, 10, 11, 12, 13}));
    // stream ids: [1,2,3,99 | 4,5,0,0 | 6..11,0,0]
    EXPECT_EQ(to_vec(*r0.input_ids), (std::vector<int64_t>{1, 99, 4, 0, 6, 7, 0, 0}));
    EXPECT_EQ(to_vec(*r1.input_ids), (std::vector<int64_t>{2, 3, 5, 0, 8, 9, 10, 11}));
    EXPECT_EQ(to_vec(*r0.labels), (std::vector<int64_t>{101, 199, 104, -100, 106, 107, -100, -100}));
    EXPECT_EQ(to_vec(*r0.position_ids), (std::vector<int64_t>{0, 3, 0, 3, 0, 1, 6, 7}));
    EXPECT_EQ(to_vec(*r1.position_ids), (std::vector<int64_t>{1, 2, 1, 2, 2, 3, 4, 5}));
    EXPECT_EQ(to_vec(r0.padding_mask->to(at::kLong)), (std::vector<int64_t>{0, 1, 0, 1, 0, 0, 1, 1}));
    EXPECT_EQ(to_vec(r1.padding_mask->to(at::kLong)), (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 0}));
    EXPECT_EQ(r0.input_ids->sizes(), (std::vector<int64_t>{1, 8}));
  }
}

// §6.4 worked values through the sharder: one row holding documents of 8 and 4 tokens at cp 2.
TEST(SharderThd, TransformerEnginePartitionThroughTheSharder) {
  BatchSpec sp;
  sp.B = 1;
  sp.S = 12;
  sp.seq_first_extra = false;
  Batch in = make_batch(sp);
  in.seq_lens = at::tensor({8, 4}, at::kLong).view({1, 2});
  auto sh = sharders_for("thd", 2);
  (void)sh[0].shard(in);
  (void)sh[1].shard(in);
  EXPECT_EQ(to_vec(sh[0].local_token_global_indices(12)), (std::vector<int64_t>{0, 1, 6, 7, 8, 11}));
  EXPECT_EQ(to_vec(sh[1].local_token_global_indices(12)), (std::vector<int64_t>{2, 3, 4, 5, 9, 10}));
  // Aligned: no token moves, so [1, 12] input rows are already the stream.
  EXPECT_FALSE(sh[0].shard_layout().input_token_stream_positions.has_value());
  at::Tensor t = at::arange(12, at::kLong).view({1, 12}) * 3;
  EXPECT_EQ(to_vec(sh[0].shard_token_tensor(t)), (std::vector<int64_t>{0, 3, 18, 21, 24, 33}));
}

TEST(SharderThd, TrailingPadFoldsIntoTheLastDocumentByDefault) {
  // Row of 8 holding documents of 4 and 2 tokens: the last 2 input slots join document 1's slot
  // (4 + 4 = 8, aligned at W = 1), so nothing moves and trim needs no fill.
  Batch in;
  in.input_ids = at::arange(1, 9, at::kLong).view({1, 8});
  in.labels = at::arange(1, 9, at::kLong).view({1, 8});
  in.seq_lens = at::tensor({4, 2}, at::kLong).view({1, 2});
  auto sh = sharders_for("thd", 1);
  const Batch out = sh[0].shard(in);
  EXPECT_FALSE(sh[0].shard_layout().input_token_stream_positions.has_value());
  EXPECT_EQ(to_vec(*out.cu_seqlens_padded), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(to_vec(*out.cu_seqlens_real), (std::vector<int64_t>{0, 4, 6}));
  EXPECT_EQ(out.max_seqlen, 4);
  EXPECT_EQ(to_vec(*out.input_ids), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(to_vec(out.padding_mask->to(at::kLong)), (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(to_vec(*out.position_ids), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_TRUE(same(sh[0].gather_token_tensor({*out.labels}, 1, true), *in.labels));
}

TEST(SharderThd, TrailingPadIsDroppedOnRequestAndTrimNeedsFill) {
  // Row of 8 holding documents of 3 and 2 tokens: the last 3 input slots are pack padding.
  Batch in;
  in.input_ids = at::arange(1, 9, at::kLong).view({1, 8});
  in.labels = at::arange(1, 9, at::kLong).view({1, 8});
  in.seq_lens = at::tensor({3, 2}, at::kLong).view({1, 2});
  SharderOptions drop;
  drop.thd_trailing = SharderOptions::ThdTrailing::drop;
  auto sh = sharders_for("thd", 1, kPadId, drop);
  const Batch out = sh[0].shard(in);
  // docs padded to multiples of 2: [0, 4, 6]
  EXPECT_EQ(to_vec(*out.cu_seqlens_padded), (std::vector<int64_t>{0, 4, 6}));
  EXPECT_EQ(to_vec(*out.input_ids), (std::vector<int64_t>{1, 2, 3, kPadId, 4, 5}));
  const auto& L = sh[0].shard_layout();
  ASSERT_TRUE(L.input_token_stream_positions.has_value());
  EXPECT_EQ(to_vec(*L.input_token_stream_positions), (std::vector<int64_t>{0, 1, 2, 4, 5, -1, -1, -1}));
  const std::string msg = error_of([&] { (void)sh[0].gather_token_tensor({*out.input_ids}, 1, true); });
  EXPECT_TRUE(contains_all(msg, {"fill", "[1, 8]", "thd"}));
  EXPECT_EQ(to_vec(sh[0].gather_token_tensor({*out.input_ids}, 1, true, 0)),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 0, 0, 0}));
  // shard_token_tensor in input coordinates needs a fill too (tokens moved).
  const std::string msg2 = error_of([&] { (void)sh[0].shard_token_tensor(*in.labels); });
  EXPECT_TRUE(contains_all(msg2, {"fill", "[1, 8]"}));
  EXPECT_EQ(to_vec(sh[0].shard_token_tensor(*in.labels, 1, -100)), (std::vector<int64_t>{1, 2, 3, -100, 4, 5}));
  // A stream-length tensor is sharded as is.
  EXPECT_EQ(to_vec(sh[0].shard_token_tensor(at::arange(6, at::kLong).view({1, 6}))),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(SharderThd, AlignedRowsArePureFlatten) {
  BatchSpec sp;
  sp.B = 3;
  sp.S = 8;
  sp.seq_first_extra = false;
  const Batch in = make_batch(sp);
  auto sh = sharders_for("thd", 2);
  std::vector<Batch> locals;
  for (auto& s : sh) locals.push_back(s.shard(in));
  const auto& L = sh[0].shard_layout();
  EXPECT_FALSE(L.input_token_stream_positions.has_value());
  EXPECT_EQ(*L.input_row_shape, (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(L.padded_seq_len, 24);
  std::vector<int64_t> identity(24);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(L.stream_source, identity);
  // Stream == flattened rows, so no fill is needed either way.
  at::Tensor t = at::arange(24, at::kLong).view({3, 8});
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_TRUE(same(sh[static_cast<size_t>(r)].shard_token_tensor(t),
                     t.view({1, 24}).index_select(1, idx_tensor(L.global.ranks[static_cast<size_t>(r)]))));
  std::vector<at::Tensor> parts = {*locals[0].input_ids, *locals[1].input_ids};
  EXPECT_TRUE(same(sh[0].gather_token_tensor(parts, 1, true), *in.input_ids));
  // Each row restarts its positions.
  at::Tensor pos = sh[0].gather_token_tensor({*locals[0].position_ids, *locals[1].position_ids}, 1, true);
  EXPECT_TRUE(same(pos, *in.position_ids));
  // teacher_logits [B, S, V] -> [1, T_local, V] and back
  std::vector<at::Tensor> tl = {locals[0].extras.at("teacher_logits").tensor, locals[1].extras.at("teacher_logits").tensor};
  EXPECT_EQ(tl[0].sizes(), (std::vector<int64_t>{1, 12, sp.V}));
  EXPECT_TRUE(same(sh[1].gather_token_tensor(tl, 1, true), in.extras.at("teacher_logits").tensor));
}

TEST(SharderThd, SynthesizedPositionsRestartPerDocumentAndContinueIntoPadSlots) {
  Batch in;
  in.input_ids = at::arange(1, 11, at::kLong).view({1, 10});
  in.labels = in.input_ids->clone();
  in.seq_lens = at::tensor({3, 5}, at::kLong).view({1, 2});
  in.seq_lens_padded = at::tensor({4, 6}, at::kLong).view({1, 2});
  auto sh = sharders_for("thd", 1);
  const Batch out = sh[0].shard(in);
  // slots 4 and 6 padded to even: 4 and 6 -> stream equals the row; positions restart at each document.
  EXPECT_EQ(to_vec(*out.position_ids), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(to_vec(out.padding_mask->to(at::kLong)), (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(out.max_seqlen, 6);
  // Given position ids are kept and continue counting into new pad slots (cp 2: slots -> 4 and 8).
  in.position_ids = at::tensor({5, 6, 7, 8, 20, 21, 22, 23, 24, 25}, at::kLong).view({1, 10});
  auto sh2 = sharders_for("thd", 2);
  const Batch o0 = sh2[0].shard(in), o1 = sh2[1].shard(in);
  at::Tensor full = sh2[0].gather_token_tensor({*o0.position_ids, *o1.position_ids}, 1, false);
  EXPECT_EQ(to_vec(full), (std::vector<int64_t>{5, 6, 7, 8, 20, 21, 22, 23, 24, 25, 26, 27}));
}

TEST(SharderThd, MropePositionsFlattenOnDimTwo) {
  BatchSpec sp;
  sp.B = 2;
  sp.S = 5;
  sp.positions = Positions::mrope;
  sp.seq_first_extra = false;
  const Batch in = make_batch(sp);
  auto sh = sharders_for("thd", 2);
  const Batch o0 = sh[0].shard(in), o1 = sh[1].shard(in);
  EXPECT_EQ(o0.position_ids->sizes(), (std::vector<int64_t>{3, 1, 8}));  // 2 docs of 5 -> 8 each, 16 / 2
  at::Tensor back = sh[0].gather_token_tensor({*o0.position_ids, *o1.position_ids}, 2, true);
  EXPECT_TRUE(same(back, *in.position_ids));
}

