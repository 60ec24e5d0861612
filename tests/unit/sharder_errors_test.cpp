// Bad input gets a clear cpbench::Error naming the key, the shapes or lengths, the sharder, cp and rank
// (DESIGN.md, rules of the house); an unknown sharder name is a UsageError listing the known names.
#include <gtest/gtest.h>

#include "sharder_test_util.hpp"

using namespace cpbench;
using namespace cpbench::test;

namespace {

// B = 2, S = 8, load_balanced at cp 2, rank 1.
Batch good() {
  BatchSpec sp;
  return make_batch(sp);
}

Sharder rank1(const std::string& name = "load_balanced") { return std::move(sharders_for(name, 2)[1]); }

std::string shard_error(Batch b, const std::string& name = "load_balanced") {
  Sharder s = rank1(name);
  return error_of([&] { (void)s.shard(b); });
}

const char* kWho = "load_balanced (cp=2, rank 1)";

}  // namespace

TEST(SharderErrors, WrongLengthOfAKeyNamesKeyAndBothShapes) {
  {
    Batch b = good();
    b.labels = at::zeros({2, 9}, at::kLong);
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "labels", "[B, S] = [2, 8]", "got [2, 9]"}));
  }
  {
    Batch b = good();
    b.loss_mask = at::zeros({2, 7});
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "loss_mask", "[2, 8]", "got [2, 7]"}));
  }
  {
    Batch b = good();
    b.padding_mask = at::zeros({3, 8}, at::kBool);
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "padding_mask", "[2, 8]", "got [3, 8]"}));
  }
  {
    Batch b = good();
    b.position_ids = at::zeros({2, 9}, at::kLong);
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "position_ids", "[2, 8]", "got [2, 9]"}));
  }
  {
    Batch b = good();
    b.position_ids = at::zeros({3, 2, 7}, at::kLong);  // mRoPE with the wrong length
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "position_ids", "mRoPE [C, 2, 8]", "got [3, 2, 7]"}));
  }
  {
    Batch b = good();
    b.extras["teacher_logits"].tensor = at::zeros({2, 9, 4});
    EXPECT_TRUE(contains_all(shard_error(b),
                             {kWho, "extra_seq_buffers['teacher_logits']", "length 9 on dim 1", "[2, 9, 4]", "is 8"}));
  }
  {
    Batch b = good();
    b.extras["teacher_logits"].seq_dim = 3;
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "extra_seq_buffers['teacher_logits']", "seq_dim 3", "[2, 8, 4]"}));
  }
  {
    Batch b = good();
    b.input_ids = at::zeros({2, 8, 1}, at::kLong);
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "input_ids must be [B, S]", "got [2, 8, 1]"}));
  }
  {
    Batch b = good();
    b.input_ids.reset();
    b.inputs_embeds = at::zeros({2, 8});
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "inputs_embeds must be [B, S, H]", "got [2, 8]"}));
  }
  {
    Batch b = good();
    b.input_ids = at::zeros({2, 0}, at::kLong);
    b.labels = at::zeros({2, 0}, at::kLong);
    EXPECT_TRUE(contains_all(shard_error(b), {kWho, "input_ids", "[2, 0]", "no tokens"}));
  }
}

TEST(SharderErrors, ExactlyOneOfInputIdsAndInputsEmbeds) {
  Batch neither = good();
  neither.input_ids.reset();
  EXPECT_TRUE(contains_all(shard_error(neither), {kWho, "exactly one of input_ids", "inputs_embeds", "neither"}));
  Batch both = good();
  both.inputs_embeds = at::zeros({2, 8, 3});
  EXPECT_TRUE(contains_all(shard_error(both), {kWho, "both", "input_ids [2, 8]", "inputs_embeds [2, 8, 3]"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)neither.primary(); }), {"neither"}));
}

TEST(SharderErrors, MissingLabels) {
  Batch b = good();
  b.labels.reset();
  b.loss_mask.reset();  // a loss_mask would be promoted to labels (the seed's rule)
  EXPECT_TRUE(contains_all(shard_error(b), {kWho, "labels", "[B, S] = [2, 8]", "got none"}));
  EXPECT_TRUE(contains_all(shard_error(b, "thd"), {"thd (cp=2, rank 1)", "labels"}));
}

TEST(SharderErrors, UnknownSharderIsAUsageErrorListingKnownNames) {
  const std::string msg = error_of<UsageError>([] { (void)make_layout("ring_attention"); });
  EXPECT_TRUE(contains_all(msg, {"unknown sharder 'ring_attention'", "contiguous", "load_balanced", "round_robin",
                                 "head_tail", "zigzag", "striped", "thd", "sdpa_wrap"}));
  EXPECT_EQ(msg, "unknown sharder 'ring_attention'; known sharders: " + known_layouts_text());
  EXPECT_NE(known_layouts_text().find("load_balanced (aliases round_robin, head_tail, zigzag)"), std::string::npos);
}

TEST(SharderErrors, DataDependentVerbsBeforeTheFirstShard) {
  Sharder s = rank1("thd");
  for (auto&& fn : std::vector<std::function<void()>>{
           [&] { (void)s.local_token_global_indices(8); },
           [&] { (void)s.shard_token_tensor(at::zeros({1, 8})); },
           [&] { (void)s.gather_token_tensor({at::zeros({1, 4}), at::zeros({1, 4})}, 1, false); },
       }) {
    EXPECT_TRUE(contains_all(error_of(fn), {"thd (cp=2, rank 1)", "'thd' is a data-dependent layout", "first shard()"}));
  }
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.shard_layout(); }), {"thd (cp=2, rank 1)", "shard() first"}));
  // Closed-form layouts have no shard layout before a shard either, and trim needs one.
  Sharder lb = rank1();
  EXPECT_FALSE(lb.has_shard_layout());
  EXPECT_THROW((void)lb.shard_layout(), Error);
  EXPECT_TRUE(contains_all(
      error_of([&] { (void)lb.gather_token_tensor({at::zeros({1, 4}), at::zeros({1, 4})}, 1, true); }),
      {kWho, "trim", "shard()"}));
}

TEST(SharderErrors, BadSeqLens) {
  auto thd_batch = [](at::Tensor lens, std::optional<at::Tensor> slots) {
    Batch b = good();
    b.extras.erase("seq_first");
    b.seq_lens = std::move(lens);
    b.seq_lens_padded = std::move(slots);
    return b;
  };
  auto t2 = [](std::vector<int64_t> v, int64_t rows) {
    return at::tensor(at::ArrayRef<int64_t>(v), at::kLong).view({rows, -1});
  };
  const char* who = "thd (cp=2, rank 1)";
  // slot shorter than the document
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({3, 3, 8, -1000}, 2), t2({3, 2, 8, -1000}, 2)), "thd"),
                           {who, "seq_lens_padded[0][1] = 2", "shorter than seq_lens[0][1] = 3"}));
  // documents overflow their row
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({3, 3, 5, 4}, 2), std::nullopt), "thd"),
                           {who, "row 1 need 9 tokens", "S=8", "input_ids [2, 8]"}));
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({3, 3, 8, -1000}, 2), t2({4, 5, 8, -1000}, 2)), "thd"),
                           {who, "row 0 need 9 tokens", "S=8"}));
  // wrong batch size / shape
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({3, 3, 3}, 3), std::nullopt), "thd"),
                           {who, "seq_lens must be [B, D] with B=2", "got [3, 1]"}));
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({3, 3, 8, -1000}, 2), t2({3, 3, 8}, 1)), "thd"),
                           {who, "seq_lens_padded [1, 3]", "shape of seq_lens [2, 2]"}));
  // sentinel in one tensor only, non-positive length, no document at all, slots without lengths
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({3, -1000, 8, -1000}, 2), t2({3, 4, 8, -1000}, 2)), "thd"),
                           {who, "seq_lens[0][1] is the sentinel -1000", "seq_lens_padded[0][1] = 4"}));
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({3, 0, 8, -1000}, 2), std::nullopt), "thd"),
                           {who, "seq_lens[0][1] = 0", "not a document length"}));
  EXPECT_TRUE(contains_all(shard_error(thd_batch(t2({-1000, -1000}, 2), std::nullopt), "thd"),
                           {who, "seq_lens [2, 1] holds no document"}));
  Batch no_lens = thd_batch(t2({3, 3, 8, -1000}, 2), t2({3, 3, 8, -1000}, 2));
  no_lens.seq_lens.reset();
  EXPECT_TRUE(contains_all(shard_error(no_lens, "thd"), {who, "seq_lens_padded [2, 2] given without seq_lens"}));
}

TEST(SharderErrors, ThdExtrasNeedTheBatchDimBeforeTheSequenceDim) {
  Batch b = good();  // seq_first [S, 2] has seq_dim 0: nothing to flatten
  EXPECT_TRUE(contains_all(shard_error(b, "thd"),
                           {"thd (cp=2, rank 1)", "extra_seq_buffers['seq_first']", "[8, 2]", "seq_dim 0"}));
  b.extras.erase("seq_first");
  b.extras["per_token"] = ExtraBuffer{at::zeros({4, 8}), 1, std::nullopt};  // batch 4 != B 2
  EXPECT_TRUE(contains_all(shard_error(b, "thd"), {"extra_seq_buffers['per_token']", "[4, 8]", "[2, 8]"}));
}

TEST(SharderErrors, CpAndRankOutOfRange) {
  auto make = [](int64_t cp, int64_t rank) {
    SharderOptions o;
    o.cp_size = cp;
    o.cp_rank = rank;
    Sharder s(make_layout("striped"), o);
  };
  EXPECT_TRUE(contains_all(error_of([&] { make(0, 0); }), {"striped", "cp must be a positive integer, got 0"}));
  EXPECT_TRUE(contains_all(error_of([&] { make(-3, 0); }), {"got -3"}));
  EXPECT_TRUE(contains_all(error_of([&] { make(2, 2); }), {"striped", "rank 2 is outside cp=2"}));
  EXPECT_TRUE(contains_all(error_of([&] { make(4, -1); }), {"rank -1 is outside cp=4"}));
  EXPECT_NO_THROW(make(4, 3));
  EXPECT_TRUE(contains_all(error_of([] { Sharder s(nullptr, SharderOptions{}); }), {"needs a layout"}));
  // A rank asked of the verbs must be in range too.
  Sharder s = rank1("striped");
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.local_token_global_indices(8, 2); }),
                           {"striped (cp=2, rank 1)", "rank 2 is outside cp=2"}));
}

TEST(SharderErrors, GatherChecksItsParts) {
  Sharder s = rank1();
  BatchSpec sp;
  sp.S = 6;  // padded to 8
  const Batch out = s.shard(make_batch(sp));
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.gather_token_tensor({*out.labels}); }),
                           {kWho, "one shard per rank (2), got 1"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.gather_token_tensor({at::zeros({2, 4}), at::zeros({2, 3})}); }),
                           {kWho, "rank 1's shard [2, 3]", "rank 0's [2, 4]"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.gather_token_tensor({at::zeros({2, 6}), at::zeros({2, 6})}, 1, true); }),
                           {kWho, "gathered length 12", "padded_seq_len 8"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.gather_token_tensor({at::zeros({2, 4}), at::zeros({2, 4})}, 2); }),
                           {kWho, "seq_dim 2", "[2, 4]"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.shard_token_tensor(at::zeros({2, 8}), 2); }),
                           {kWho, "seq_dim 2", "[2, 8]"}));
}

TEST(SharderErrors, ThdTokenVerbsRejectForeignLengths) {
  Sharder s = rank1("thd");
  Batch b = good();
  b.extras.erase("seq_first");
  b.seq_lens = at::tensor({3, 5, 8, -1000}, at::kLong).view({2, 2});
  const Batch out = s.shard(b);  // docs 3, 5, 8 -> 4, 8, 8: stream of 20... padded to 4s
  const int64_t P = s.shard_layout().padded_seq_len;
  EXPECT_EQ(P, 20);
  const std::string msg = error_of([&] { (void)s.shard_token_tensor(at::zeros({1, 12})); });
  EXPECT_TRUE(contains_all(msg, {"thd (cp=2, rank 1)", "length 12", "padded_seq_len=20", "input rows [2, 8]"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)s.local_token_global_indices(24); }),
                           {"padded stream of 20 tokens", "padded_seq_len=24"}));
  // trimming a stream that is not [1, P] on (seq_dim-1, seq_dim)
  EXPECT_TRUE(contains_all(
      error_of([&] { (void)s.gather_token_tensor({at::zeros({10, 1}), at::zeros({10, 1})}, 0, true, 0); }),
      {"thd (cp=2, rank 1)", "flat stream"}));
  (void)out;
}
