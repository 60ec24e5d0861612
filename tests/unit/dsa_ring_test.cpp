// DeepSeek Sparse Attention on the ring transport (kernels/mixers/attention/dsa/dsa_ring.hpp), what one
// process can pin: the running top-k that round 1 keeps while key blocks arrive equals select_topk over
// every key in global order, element for element, for any split of the keys into blocks (rank buffers in
// an order unlike the global one) and any arrival order, on rows full of exact ties (ReLU's zeros, equal
// positive scores), invisible keys and k beyond the visible count; the per-row score of the collected
// index keys equals the all-keys score at the picks, and the rows the kept candidates carry are the picks';
// the ring's bytes per call (allgather's, split over the two rounds). The multi-rank runs (every
// layout, W = 2, 3, 4, 8, both loss stages, the picks and every gradient against the single rank):
// scenarios/dsa_ring*.yaml (CTest scenario_dsa_ring*).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <vector>

#include "kernels/mixers/attention/dsa/dsa.hpp"
#include "kernels/mixers/attention/dsa/dsa_costs.hpp"

namespace cpbench {
namespace {

namespace dsa = kernels::dsa;

// The picks of the running top-k when the keys arrive in W blocks: block j holds the global keys
// owner[j] (in that buffer order), merged in the ring order of rank r (r, r - 1, ...).
at::Tensor ring_picks(const at::Tensor& scores, const at::Tensor& visible, const std::vector<at::Tensor>& owner,
                      int r, int64_t k) {
  const int W = static_cast<int>(owner.size());
  dsa::RunningTopk top;
  for (int s = 0; s < W; ++s) {
    const at::Tensor keys = owner[static_cast<size_t>((r - s + W) % W)];
    dsa::merge_topk(top, scores.index_select(2, keys), visible.index_select(2, keys), keys, k);
  }
  return dsa::running_picks(top);
}

// The keys 0 .. n - 1 dealt to W ranks in a shuffled order, each rank's buffer shuffled too.
std::vector<at::Tensor> deal(int64_t n, int W) {
  const at::Tensor perm = at::randperm(n, at::kLong);
  std::vector<at::Tensor> owner;
  for (int j = 0; j < W; ++j) {
    const at::Tensor mine = perm.slice(0, j * n / W, (j + 1) * n / W);
    owner.push_back(mine.index_select(0, at::randperm(mine.size(0), at::kLong)));
  }
  return owner;
}

TEST(DsaRunningTopk, MergingBlocksInAnyOrderEqualsSelectTopkOnRowsOfTies) {
  at::manual_seed(51);
  const int64_t B = 2, Sq = 24, n = 48;
  // Mostly exact zeros (ReLU), some equal positive and negative scores: ties everywhere.
  const at::Tensor table = at::tensor({0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 1.0, -0.25}, at::kDouble);
  int checked = 0;
  for (const int W : {1, 2, 3, 4, 8})
    for (const int64_t k : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{100}}) {
      const at::Tensor s = table.index_select(0, at::randint(8, {B * Sq * n}, at::kLong)).view({B, Sq, n});
      // Causal over keys at Sq - 1 + 1 .. n (query t sees keys 0 .. t + n - Sq), some keys hidden at random.
      const at::Tensor causal = at::ones({Sq, n}, at::kBool).tril(n - Sq).unsqueeze(0).expand({B, Sq, n});
      const at::Tensor vis = causal.logical_and(at::rand({B, Sq, n}).gt(0.2));
      const at::Tensor want = dsa::select_topk(s, vis, k);
      const auto owner = deal(n, W);
      for (int r = 0; r < W; ++r) {
        const at::Tensor got = ring_picks(s, vis, owner, r, k);
        ASSERT_TRUE(got.equal(want)) << "W " << W << " k " << k << " rank " << r << "\n"
                                     << got[0].slice(0, 0, 3) << "\n" << want[0].slice(0, 0, 3);
        ++checked;
      }
    }
  EXPECT_EQ(checked, 4 * (1 + 2 + 3 + 4 + 8));
  // Every score exactly 0 (every head's dot product negative under ReLU): the k lowest global indices.
  const at::Tensor zeros = at::zeros({1, 1, 12}, at::kDouble);
  const at::Tensor all = at::ones({1, 1, 12}, at::kBool);
  const std::vector<at::Tensor> owner{at::tensor({11, 3, 7, 0}, at::kLong), at::tensor({5, 9, 1, 10}, at::kLong),
                                      at::tensor({2, 8, 6, 4}, at::kLong)};
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(ring_picks(zeros, all, owner, r, 5).equal(at::tensor({0, 1, 2, 3, 4}, at::kLong).view({1, 1, 5})));
}

TEST(DsaRunningTopk, ScoresFromTheIndexerWithReluTies) {
  // The real score: 4 heads of either sign, ReLU; most dot products negative, so many scores are exact 0.
  at::manual_seed(52);
  const int64_t B = 1, Sq = 16, n = 40, H = 4, d = 8;
  const at::Tensor q = at::randn({B, Sq, H, d}, at::kDouble) - 0.5, kk = at::randn({B, n, d}, at::kDouble);
  const at::Tensor w = at::randn({B, Sq, H}, at::kDouble);
  const at::Tensor s = dsa::index_scores(q, w, kk, true);
  EXPECT_GT(s.eq(0).sum().item<int64_t>(), B * Sq * n / 10);
  const at::Tensor vis = at::ones({Sq, n}, at::kBool).tril(n - Sq).unsqueeze(0);
  const auto owner = deal(n, 4);
  for (int r = 0; r < 4; ++r) {
    // Each block scored on its own keys (what round 1 computes), not sliced from the all-keys scores; the
    // kept candidates carry their index keys along.
    dsa::RunningTopk top;
    for (int st = 0; st < 4; ++st) {
      const at::Tensor keys = owner[static_cast<size_t>((r - st + 4) % 4)];
      const at::Tensor held = kk.index_select(1, keys);
      dsa::merge_topk(top, dsa::index_scores(q, w, held, true), vis.index_select(2, keys), keys, 9, true, held);
    }
    const at::Tensor picks = dsa::running_picks(top);
    EXPECT_TRUE(picks.equal(dsa::select_topk(s, vis, 9))) << "rank " << r;
    const at::Tensor want = kk.index_select(1, top.index.flatten()).view({B, Sq, 9, d});  // B = 1
    EXPECT_TRUE(top.rows.equal(want)) << "rank " << r << ": the carried rows are not the picks' keys";
  }
}

TEST(DsaRingRows, ScoreOfTheCollectedIndexKeysIsTheAllKeysScoreAtThePicks) {
  at::manual_seed(53);
  const int64_t B = 2, Sq = 6, n = 10, H = 3, d = 8, K = 4;
  const at::Tensor q = at::randn({B, Sq, H, d}, at::kDouble), kk = at::randn({B, n, d}, at::kDouble);
  const at::Tensor w = at::randn({B, Sq, H}, at::kDouble);
  const at::Tensor picks = at::randint(n, {B, Sq, K}, at::kLong);
  const at::Tensor rows = kk.gather(1, picks.view({B, Sq * K, 1}).expand({B, Sq * K, d})).view({B, Sq, K, d});
  const at::Tensor want = dsa::index_scores(q, w, kk, true).gather(-1, picks);
  EXPECT_TRUE(at::allclose(dsa::index_scores_rows(q, w, rows, true), want, 1e-13, 1e-14));
}

TEST(DsaRingCosts, TheTwoRoundsSendAllgathersBytes) {
  dsa_costs::DsaDims d;
  d.mla = MlaDims{512, 64, 128, 128};
  d.heads = 128;
  d.index_heads = 64;
  d.index_head_dim = 128;
  d.topk = 2048;
  // 8 ranks, 16K tokens each, bf16: round 1 the 128 index-key values per token, round 2 the 576 of the latent:
  // allgather's 704 in all.
  EXPECT_EQ(dsa_costs::ring_score_bytes(d, 8, 1, 16384, 2), int64_t{7} * 16384 * 128 * 2);
  EXPECT_EQ(dsa_costs::forward_bytes(d, 8, 1, 16384, 2) - dsa_costs::ring_score_bytes(d, 8, 1, 16384, 2),
            int64_t{7} * 16384 * (512 + 64) * 2);
  EXPECT_EQ(dsa_costs::ring_score_bytes(d, 1, 1, 16384, 2), 0);
}

}  // namespace
}  // namespace cpbench
