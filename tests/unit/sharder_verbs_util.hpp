#pragma once
// What the sharder verb suites share (sharder_verbs_test.cpp, sharder_thd_test.cpp): the lengths and
// layouts swept, the batch variants and how a batch is described in failures.
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "sharder_test_util.hpp"

namespace cpbench::test {


inline const std::vector<int64_t> kLengths = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 64, 100, 257};
inline const std::vector<std::string> kUnpacked = {"contiguous", "load_balanced", "striped", "sdpa_wrap", "round_robin"};

inline BatchSpec variant(int64_t v, int64_t S) {
  BatchSpec sp;
  sp.S = S;
  switch (v % 4) {
    case 0: break;  // input_ids, position_ids [B, S], loss/padding masks, extras
    case 1:
      sp.embeds = true;
      sp.positions = Positions::mrope;
      sp.padding_mask = false;
      break;
    case 2:
      sp.positions = Positions::none;
      sp.padding_mask = false;
      sp.extras = false;
      sp.seq_first_extra = false;
      break;
    case 3:
      sp.B = 3;
      sp.positions = Positions::one_s;
      sp.loss_mask = false;
      break;
  }
  return sp;
}

inline std::string describe(const std::string& name, int64_t W, const BatchSpec& sp) {
  return cpbench::detail::concat(name, " W=", W, " B=", sp.B, " S=", sp.S, sp.embeds ? " embeds" : " ids",
                        " positions=", static_cast<int>(sp.positions));
}

inline std::vector<at::Tensor> parts_of(const std::vector<Batch>& locals, const Key& key) {
  std::vector<at::Tensor> parts;
  for (const auto& l : locals) {
    auto t = key.get(l);
    EXPECT_TRUE(t.has_value()) << key.name << " missing from a local batch";
    if (t) parts.push_back(*t);
  }
  return parts;
}

inline void check_unpacked_round_trip(const std::string& name, int64_t W, const BatchSpec& sp) {
  SCOPED_TRACE(describe(name, W, sp));
  const Batch in = make_batch(sp);
  const int64_t B = sp.B, S = sp.S;
  auto sh = sharders_for(name, W);
  std::vector<Batch> locals;
  for (auto& s : sh) locals.push_back(s.shard(in));
  LayoutRequest req;
  req.cp = W;
  req.seq_len = S;
  const GlobalLayout g = make_layout(name)->compute(req);
  const int64_t P = g.padded_seq_len;

  for (int64_t r = 0; r < W; ++r) {
    const ShardLayout& L = sh[static_cast<size_t>(r)].shard_layout();
    ASSERT_EQ(L.original_seq_len, S);
    ASSERT_EQ(L.padded_seq_len, P);
    EXPECT_FALSE(L.input_row_shape.has_value());
    EXPECT_FALSE(L.input_token_stream_positions.has_value());
    EXPECT_EQ(to_vec(sh[static_cast<size_t>(r)].local_token_global_indices(P)), g.ranks[static_cast<size_t>(r)]);
    EXPECT_FALSE(locals[static_cast<size_t>(r)].cu_seqlens.has_value());
  }

  for (const Key& key : keys_of(in)) {
    SCOPED_TRACE(key.name);
    const std::vector<at::Tensor> parts = parts_of(locals, key);
    ASSERT_EQ(static_cast<int64_t>(parts.size()), W);
    at::Tensor input = *key.get(in);
    if (key.name == "position_ids" && input.dim() == 2 && input.size(0) != B) input = input.expand({B, S});
    const at::Tensor padded = expected_padded(input, key.seq_dim, P, key.fill);
    for (int64_t r = 0; r < W; ++r)
      EXPECT_TRUE(same(parts[static_cast<size_t>(r)],
                       padded.index_select(key.seq_dim, idx_tensor(g.ranks[static_cast<size_t>(r)]))))
          << "rank " << r;
    EXPECT_TRUE(same(sh[0].gather_token_tensor(parts, key.seq_dim, false), padded));
    EXPECT_TRUE(same(sh[static_cast<size_t>(W - 1)].gather_token_tensor(parts, key.seq_dim, true), input));
    // restore_gathered is what gather does after an all-gather.
    EXPECT_TRUE(same(sh[0].restore_gathered(at::cat(parts, key.seq_dim), key.seq_dim, true), input));
  }

  // Keys the sharder synthesizes.
  if (!in.position_ids) {
    at::Tensor expected = at::arange(P, at::kLong).unsqueeze(0).expand({B, P});
    for (int64_t r = 0; r < W; ++r)
      EXPECT_TRUE(same(*locals[static_cast<size_t>(r)].position_ids,
                       expected.index_select(1, idx_tensor(g.ranks[static_cast<size_t>(r)]))));
  }
  if (!in.padding_mask) {
    for (int64_t r = 0; r < W; ++r) {
      const auto& pm = locals[static_cast<size_t>(r)].padding_mask;
      if (P == S) {
        EXPECT_FALSE(pm.has_value()) << "no padding, no mask asked for";
        continue;
      }
      ASSERT_TRUE(pm.has_value());
      at::Tensor expected = (at::arange(P, at::kLong) >= S).unsqueeze(0).expand({B, P});
      EXPECT_TRUE(same(*pm, expected.index_select(1, idx_tensor(g.ranks[static_cast<size_t>(r)]))));
    }
  }
}


}  // namespace cpbench::test
