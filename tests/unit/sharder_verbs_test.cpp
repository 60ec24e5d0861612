// The Sharder verbs, one Sharder per rank in one process: shard -> gather round-trips exactly for every
// layout, the pad rule of DESIGN.md holds for every key, THD follows the reference (§6.1/6.4) and the
// token verbs (local_token_global_indices, shard_token_tensor, gather_token_tensor) behave as the
// header says, including gradients through the gather.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "sharder_verbs_util.hpp"

using namespace cpbench;
using namespace cpbench::test;


TEST(SharderVerbs, UnpackedShardGatherRoundTripsForEveryLayoutCpAndLength) {
  for (const auto& name : kUnpacked)
    for (int64_t W = 1; W <= 8; ++W)
      for (size_t i = 0; i < kLengths.size(); ++i) check_unpacked_round_trip(name, W, variant(W + static_cast<int64_t>(i), kLengths[i]));
}

TEST(SharderVerbs, UnpackedEveryBatchVariantAtOneShape) {
  for (const auto& name : kUnpacked)
    for (int64_t v = 0; v < 4; ++v) {
      check_unpacked_round_trip(name, 3, variant(v, 7));
      check_unpacked_round_trip(name, 4, variant(v, 16));
    }
}

TEST(SharderVerbs, LocalBatchCarriesSeqLensThroughForUnpackedLayouts) {
  BatchSpec sp;
  Batch in = make_batch(sp);
  in.seq_lens = at::tensor({3, 5, 4, -1000}, at::kLong).view({2, 2});
  auto sh = sharders_for("load_balanced", 2);
  const Batch out = sh[1].shard(in);
  ASSERT_TRUE(out.seq_lens.has_value());
  EXPECT_TRUE(same(*out.seq_lens, *in.seq_lens));
  EXPECT_EQ(out.input_ids->sizes(), (std::vector<int64_t>{2, 4}));
}

// ---------------------------------------------------------------------------------------------------
// local_token_global_indices
// ---------------------------------------------------------------------------------------------------
TEST(SharderVerbs, LocalIndicesAreClosedFormBeforeAnyShard) {
  for (const char* name : {"contiguous", "load_balanced", "striped", "sdpa_wrap"}) {
    for (int64_t W = 1; W <= 8; ++W) {
      auto sh = sharders_for(name, W);
      const int64_t P = 2 * W * 3;
      LayoutRequest req;
      req.cp = W;
      req.seq_len = P;
      const GlobalLayout g = make_layout(name)->compute(req);
      for (int64_t r = 0; r < W; ++r) {
        EXPECT_FALSE(sh[static_cast<size_t>(r)].has_shard_layout());
        const at::Tensor own = sh[static_cast<size_t>(r)].local_token_global_indices(P);
        EXPECT_EQ(own.scalar_type(), at::kLong);
        EXPECT_EQ(to_vec(own), g.ranks[static_cast<size_t>(r)]) << name << " W=" << W << " r=" << r;
        // Any rank can be asked for explicitly.
        EXPECT_EQ(to_vec(sh[0].local_token_global_indices(P, r)), g.ranks[static_cast<size_t>(r)]);
      }
    }
  }
  auto sh = sharders_for("load_balanced", 2);
  EXPECT_EQ(to_vec(sh[1].local_token_global_indices(8)), (std::vector<int64_t>{2, 3, 4, 5}));
  // Not a multiple of what the layout pads to.
  EXPECT_TRUE(contains_all(error_of([&] { (void)sh[0].local_token_global_indices(6); }),
                           {"padded_seq_len=6", "multiple of 4", "load_balanced"}));
}

TEST(SharderVerbs, LocalIndicesAfterShardComeFromTheShard) {
  // closed-form layout: after a shard, the shard's own length and any other valid length both work.
  {
    auto sh = sharders_for("striped", 3);
    BatchSpec sp;
    sp.S = 7;
    (void)sh[1].shard(make_batch(sp));
    EXPECT_EQ(to_vec(sh[1].local_token_global_indices(9)), (std::vector<int64_t>{1, 4, 7}));
    EXPECT_EQ(to_vec(sh[1].local_token_global_indices(12)), (std::vector<int64_t>{1, 4, 7, 10}));
  }
  // thd: raises before the first shard, returns the shard's map after, and rejects other lengths.
  auto sh = sharders_for("thd", 2);
  const std::string before = error_of([&] { (void)sh[0].local_token_global_indices(8); });
  EXPECT_TRUE(contains_all(before, {"thd", "data-dependent", "shard"}));
  Batch in;
  in.input_ids = at::arange(12, at::kLong).view({1, 12});
  in.labels = in.input_ids->clone();
  in.seq_lens = at::tensor({4, 8}, at::kLong).view({1, 2});
  (void)sh[0].shard(in);
  EXPECT_EQ(to_vec(sh[0].local_token_global_indices(12)), (std::vector<int64_t>{0, 3, 4, 5, 10, 11}));
  EXPECT_EQ(to_vec(sh[0].local_token_global_indices(12, 1)), (std::vector<int64_t>{1, 2, 6, 7, 8, 9}));
  const std::string mismatch = error_of([&] { (void)sh[0].local_token_global_indices(16); });
  EXPECT_TRUE(contains_all(mismatch, {"12", "padded_seq_len=16"}));
}

// ---------------------------------------------------------------------------------------------------
// shard_token_tensor
// ---------------------------------------------------------------------------------------------------
TEST(SharderVerbs, ShardTokenTensorPadsOriginalLengthOnlyWithFill) {
  auto sh = sharders_for("load_balanced", 2);
  BatchSpec sp;
  sp.S = 6;  // padded to 8
  const Batch in = make_batch(sp);
  const Batch out = sh[1].shard(in);
  const at::Tensor labels = *in.labels;
  // original length + fill == the batch's own labels
  EXPECT_TRUE(same(sh[1].shard_token_tensor(labels, 1, kIgnoreIndex), *out.labels));
  // padded length -> sharded as is
  at::Tensor padded = at::arange(16, at::kLong).view({2, 8});
  EXPECT_TRUE(same(sh[1].shard_token_tensor(padded), padded.index_select(1, idx_tensor({2, 3, 4, 5}))));
  // seq_dim other than 1: [S, B] tensor, seq on dim 0
  at::Tensor t = at::arange(8, at::kLong).view({8, 1});
  EXPECT_EQ(to_vec(sh[0].shard_token_tensor(t, 0)), (std::vector<int64_t>{0, 1, 6, 7}));
  // original length without fill
  const std::string no_fill = error_of([&] { (void)sh[1].shard_token_tensor(labels); });
  EXPECT_TRUE(contains_all(no_fill, {"length 6", "padded_seq_len=8", "original_seq_len=6", "fill", "[2, 6]"}));
  // any other length
  const std::string other = error_of([&] { (void)sh[1].shard_token_tensor(at::zeros({2, 7}), 1, 0.0); });
  EXPECT_TRUE(contains_all(other, {"length 7", "padded_seq_len=8", "[2, 7]"}));
  // divisible length: original == padded, no fill needed
  auto sh2 = sharders_for("contiguous", 2);
  BatchSpec sp2;
  sp2.S = 8;
  const Batch out2 = sh2[0].shard(make_batch(sp2));
  EXPECT_TRUE(same(sh2[0].shard_token_tensor(*make_batch(sp2).input_ids), *out2.input_ids));
}

TEST(SharderVerbs, ShardTokenTensorShardsLikeTheBatchForEveryUnpackedLayout) {
  for (const auto& name : kUnpacked)
    for (int64_t W = 1; W <= 8; ++W) {
      BatchSpec sp;
      sp.S = 11;
      const Batch in = make_batch(sp);
      auto sh = sharders_for(name, W);
      for (int64_t r = 0; r < W; ++r) {
        const Batch out = sh[static_cast<size_t>(r)].shard(in);
        const auto& s = sh[static_cast<size_t>(r)];
        EXPECT_TRUE(same(s.shard_token_tensor(*in.input_ids, 1, kPadId), *out.input_ids)) << name << W;
        EXPECT_TRUE(same(s.shard_token_tensor(in.extras.at("teacher_logits").tensor, 1, 0.0f),
                         out.extras.at("teacher_logits").tensor));
        EXPECT_TRUE(same(s.shard_token_tensor(in.extras.at("seq_first").tensor, 0, kSeqFirstFill),
                         out.extras.at("seq_first").tensor));
      }
    }
}

// ---------------------------------------------------------------------------------------------------
// gather_token_tensor is differentiable: d(loss)/d(part r) is exactly rank r's share of d(loss)/d(full).
// ---------------------------------------------------------------------------------------------------
namespace {
void check_gather_gradients(const std::string& name, int64_t W, const Batch& in, bool trim) {
  SCOPED_TRACE(cpbench::detail::concat(name, " W=", W, trim ? " trim" : " no trim"));
  auto sh = sharders_for(name, W);
  std::vector<Batch> locals;
  for (auto& s : sh) locals.push_back(s.shard(in));
  std::vector<at::Tensor> parts;
  for (auto& l : locals) parts.push_back(l.extras.at("teacher_logits").tensor.to(at::kDouble).detach().requires_grad_(true));
  at::Tensor full = sh[0].gather_token_tensor(parts, 1, trim, 0.0);
  // Index-addressed weights over whatever coordinates the gather returned.
  at::Tensor w = at::arange(full.numel(), at::kDouble).view(full.sizes()) * 0.5 + 1.0;
  (full * w).sum().backward();
  for (int64_t r = 0; r < W; ++r) {
    const auto& s = sh[static_cast<size_t>(r)];
    at::Tensor expected = trim ? s.shard_token_tensor(w, 1, 0.0)  // input coordinates -> pad (0 grad) then shard
                               : w.index_select(1, s.local_token_global_indices(s.shard_layout().padded_seq_len));
    ASSERT_TRUE(parts[static_cast<size_t>(r)].grad().defined()) << "rank " << r;
    EXPECT_TRUE(same(parts[static_cast<size_t>(r)].grad(), expected)) << "rank " << r;
  }
}
}  // namespace

TEST(SharderVerbs, GatherIsDifferentiableAndGivesEachPartItsGradient) {
  BatchSpec sp;
  sp.S = 7;
  sp.seq_first_extra = false;
  const Batch in = make_batch(sp);
  for (const auto& name : kUnpacked)
    for (int64_t W : {1, 2, 3, 4}) {
      check_gather_gradients(name, W, in, true);
      check_gather_gradients(name, W, in, false);
    }
  // thd with moved tokens and dropped input slots: the fill positions get no gradient.
  Batch packed = in;
  packed.seq_lens = at::tensor({3, 2, 7, -1000}, at::kLong).view({2, 2});
  for (int64_t W : {1, 2, 3}) {
    check_gather_gradients("thd", W, packed, true);
    check_gather_gradients("thd", W, packed, false);
  }
}

