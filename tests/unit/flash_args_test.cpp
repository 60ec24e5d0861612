// Flash's own mask arguments (kernels/attention/flash_args.hpp), proven on the CPU:
// - the window rule the module models is flash's documented one (its docstring's examples);
// - every masked band of real plans (the real sharders' metadata, the transports' planner) that gets a
//   window evaluates exactly the band's mask under flash's rule (bool tensor equality), and no window
//   over the band's visible span expresses a band that gets none;
// - every document block that gets varlen segments evaluates exactly its mask, and a block that gets
//   none fails a condition every varlen mask meets;
// - the routes the CUDA blocks take and the pairs they count; the CPU routes unchanged;
// - the GPU test's blocks (tests/gpu/gpu_cases.hpp) and flash's layouts.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "kernels/attention/flash_args.hpp"
#include "kernels/attention/fused_attention.hpp"
#include "kernels/attention/plan_cache.hpp"
#include "kernels/transports/transport.hpp"
#include "tests/gpu/gpu_cases.hpp"

namespace cpbench {
namespace {

using kernels::BlockKind;
using kernels::BlockPlan;
using kernels::FlashWindow;
using kernels::KernelRoute;

// flash_attn_interface's docstring: causal with seqlen_q = 2, seqlen_k = 5 is [[1 1 1 1 0], [1 1 1 1 1]];
// with seqlen_q = 5, seqlen_k = 2 it is [[0 0] x 3, [1 0], [1 1]]; a window (wl, wr) lets query i see
// [i + sk - sq - wl, i + sk - sq + wr].
TEST(FlashArgs, WindowRuleIsFlashsDocumentedRule) {
  const auto mask = [](int64_t sq, int64_t sk, int64_t l, int64_t r) {
    return kernels::flash_window_mask(sq, sk, FlashWindow{0, sq, 0, sk, l, r});
  };
  const auto rows = [](std::vector<std::vector<int>> v) {
    std::vector<at::Tensor> t;
    for (auto& r : v) t.push_back(at::tensor(std::vector<int>(r.begin(), r.end()), at::kInt).to(at::kBool));
    return at::stack(t);
  };
  EXPECT_TRUE(mask(2, 5, -1, 0).equal(rows({{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}})));
  EXPECT_TRUE(mask(5, 2, -1, 0).equal(rows({{0, 0}, {0, 0}, {0, 0}, {1, 0}, {1, 1}})));
  EXPECT_TRUE(mask(4, 4, 1, 0).equal(rows({{1, 0, 0, 0}, {1, 1, 0, 0}, {0, 1, 1, 0}, {0, 0, 1, 1}})));
  EXPECT_TRUE(mask(3, 3, -1, -1).all().item<bool>());                    // no window: no mask
  EXPECT_TRUE(mask(3, 3, 5, 7).all().item<bool>());                      // both sides >= sk: none
  EXPECT_TRUE(mask(3, 4, 0, 0).equal(rows({{0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}})));
}

// Every rank's plans for `layout` at W ranks through the allgather planner, flash arguments attached.
std::vector<BlockPlan> real_plans(const std::string& layout, const std::string& mask_text, int64_t W, int64_t S,
                                  const std::vector<int64_t>& docs) {
  const MaskSpec mask = MaskSpec::parse(mask_text);
  const auto metas = gpu_cases::rank_metas(layout, W, S, docs, mask);
  const auto t = make_transport("allgather");
  std::vector<BlockPlan> plans;
  for (int64_t r = 0; r < W; ++r) {
    const auto cache = t->make_plans(mask, metas[static_cast<size_t>(r)], metas.back(), {}, static_cast<int>(r),
                                     static_cast<int>(W), at::kCPU);
    for (int src = 0; src < W; ++src) {
      BlockPlan p = cache->plan(src);
      kernels::attach_flash_args(p, metas[0].batch(), at::kCPU);
      plans.push_back(std::move(p));
    }
  }
  return plans;
}

at::Tensor band_mask(const BlockPlan& p, const kernels::MaskBand& band, int64_t batch) {
  return kernels::plan_mask(p, batch, band.r0, band.r1 - band.r0, band.c0, band.c1 - band.c0, at::kCPU);
}

// No window over the band's visible span (rows that see a key, keys some row sees) gives this mask:
// every (left, right) in [-1, sk] is tried against each row.
bool some_window_expresses(const at::Tensor& m) {
  const kernels::RowSpans s = kernels::row_spans(m);
  if (!s.intervals) return false;  // a window's rows are runs
  for (int64_t b = 1; b < s.batch; ++b)
    if (!m[b].equal(m[0])) return false;  // one window per call: the same for every batch row
  int64_t q0 = -1, q1 = -1, k0 = s.cols, k1 = -1;
  for (int64_t i = 0; i < s.rows; ++i)
    if (!s.empty(0, i)) {
      if (q0 < 0) q0 = i;
      q1 = i + 1;
      k0 = std::min(k0, s.lo[static_cast<size_t>(i)]);
      k1 = std::max(k1, s.hi[static_cast<size_t>(i)] + 1);
    }
  if (q0 < 0) return false;
  // Rows are runs, so comparing each row's run is comparing the masks (and ~1000x faster than
  // building every candidate's bool mask).
  const int64_t sq = q1 - q0, sk = k1 - k0;
  for (int64_t l = -1; l <= sk; ++l)
    for (int64_t r = -1; r <= sk; ++r) {
      bool same = true;
      for (int64_t i = q0; same && i < q1; ++i) {
        const auto [a, e] = kernels::flash_window_row(i - q0, sq, sk, l, r);
        same = a > e ? s.empty(0, i)
                     : !s.empty(0, i) && a + k0 == s.lo[static_cast<size_t>(i)] && e + k0 == s.hi[static_cast<size_t>(i)];
      }
      if (same) return true;
    }
  return false;
}

struct WindowCase {
  const char* layout;
  const char* mask;
  int64_t W, S;
};

TEST(FlashArgs, EveryWindowedBandOfRealPlansIsExactlyItsMask) {
  const std::vector<WindowCase> cases = {
      {"striped", "causal", 2, 512},         {"striped", "causal", 4, 640},
      {"striped", "sliding_window:100", 2, 512}, {"contiguous", "sliding_window:100", 2, 512},
      {"contiguous", "sliding_window:300", 2, 512},  // longer than a chunk
      {"contiguous", "sliding_window:77", 4, 1024},  {"load_balanced", "sliding_window:90", 2, 768},
      {"load_balanced", "sliding_window:200", 4, 1024}, {"load_balanced", "causal", 2, 520},
  };
  int64_t accepted = 0, rejected = 0, shifted_causal = 0, long_window = 0;
  for (const WindowCase& c : cases) {
    const std::string what = std::string(c.layout) + " " + c.mask + " W=" + std::to_string(c.W) + " S=" + std::to_string(c.S);
    for (const BlockPlan& p : real_plans(c.layout, c.mask, c.W, c.S, {})) {
      if (p.kind != BlockKind::masked || p.causal) continue;
      for (const auto& band : p.bands) {
        if (!band.masked) {
          EXPECT_FALSE(band.window.has_value()) << what << ": a full band got a window";
          continue;
        }
        const at::Tensor m = band_mask(p, band, 1);
        if (band.window) {
          ++accepted;
          const at::Tensor implied = kernels::flash_window_mask(m.size(1), m.size(2), *band.window);
          EXPECT_TRUE(implied.equal(m[0])) << what << ": band [" << band.r0 << ", " << band.r1 << ") x [" << band.c0
                                           << ", " << band.c1 << ") window left " << band.window->left << " right "
                                           << band.window->right << " is not the band's mask";
          shifted_causal += band.window->left == -1 && band.window->k1 - band.window->k0 < band.window->q1 - band.window->q0 + 1 &&
                            std::string(c.mask) == "causal";
          long_window += std::string(c.mask) == "sliding_window:300";
        } else {
          ++rejected;
          EXPECT_FALSE(some_window_expresses(m)) << what << ": band [" << band.r0 << ", " << band.r1 << ") x ["
                                                 << band.c0 << ", " << band.c1 << ") has a window but got none";
        }
      }
    }
  }
  EXPECT_GE(accepted, 20);
  EXPECT_GE(shifted_causal, 2);  // striped off-diagonal: j <= i - 1 on the bottom-right aligned span
  EXPECT_GE(long_window, 1);
  std::cout << "windowed bands " << accepted << ", bands no window expresses " << rejected << "\n";
}

// Constructed masks the window cannot take: a row with a hole, batch rows that differ.
TEST(FlashArgs, WindowRejectsWhatNoWindowExpresses) {
  at::Tensor m = at::ones({1, 8, 8}, at::kBool).tril();
  ASSERT_TRUE(kernels::flash_window_for(m).has_value());
  at::Tensor hole = m.clone();
  hole[0][5][2] = false;
  EXPECT_FALSE(kernels::flash_window_for(hole).has_value());
  EXPECT_FALSE(some_window_expresses(hole));
  at::Tensor two = at::stack({m[0], m[0].roll(1, 1)});
  EXPECT_FALSE(kernels::flash_window_for(two).has_value());
  at::Tensor docs = at::zeros({1, 8, 8}, at::kBool);  // two causal documents: not one window
  docs[0].narrow(0, 0, 4).narrow(1, 0, 4).copy_(at::ones({4, 4}, at::kBool).tril());
  docs[0].narrow(0, 4, 4).narrow(1, 4, 4).copy_(at::ones({4, 4}, at::kBool).tril());
  EXPECT_FALSE(kernels::flash_window_for(docs).has_value());
  EXPECT_FALSE(some_window_expresses(docs));
  EXPECT_TRUE(kernels::flash_varlen_for(docs).has_value());
}

// A condition every varlen mask meets (flash_args.hpp's rule): per batch row, the rows that see a key
// fall in groups by their first key; each group's rows all start there and either end at one key
// (causal false) or end one key later per row (causal); groups' keys do not overlap and ascend.
bool varlen_shaped(const at::Tensor& m) {
  const kernels::RowSpans s = kernels::row_spans(m);
  if (!s.intervals) return false;
  for (const bool causal : {true, false}) {
    bool ok = true;
    for (int64_t b = 0; ok && b < s.batch; ++b) {
      int64_t prev_lo = -1, prev_hi = -1, end = 0;
      for (int64_t i = 0; ok && i < s.rows; ++i) {
        if (s.empty(b, i)) {  // a segment's rows that see something are consecutive
          prev_lo = prev_hi = -1;
          continue;
        }
        const int64_t lo = s.lo[static_cast<size_t>(b * s.rows + i)], hi = s.hi[static_cast<size_t>(b * s.rows + i)];
        if (lo == prev_lo) ok = causal ? hi == prev_hi + 1 : hi == prev_hi;
        else ok = lo >= end;
        prev_lo = lo;
        prev_hi = hi;
        end = std::max(end, hi + 1);
      }
    }
    if (ok) return true;
  }
  return false;
}

TEST(FlashArgs, EveryVarlenBlockOfRealPlansIsExactlyItsMask) {
  struct Case {
    const char* layout;
    int64_t W, S;
    std::vector<int64_t> docs;
  };
  const std::vector<Case> cases = {{"contiguous", 1, 512, {150, 230, 132}}, {"contiguous", 2, 768, {100, 300, 68, 300}},
                                   {"load_balanced", 2, 768, {100, 300, 68, 300}}, {"striped", 2, 640, {333, 307}},
                                   {"thd", 2, 768, {100, 300, 68, 300}}, {"thd", 4, 1024, {250, 250, 500, 24}}};
  int64_t accepted = 0, rejected = 0;
  for (const Case& c : cases) {
    const std::string what = std::string(c.layout) + " document W=" + std::to_string(c.W);
    for (const BlockPlan& p : real_plans(c.layout, "document", c.W, c.S, c.docs)) {
      if (p.kind != BlockKind::masked || p.causal) continue;
      const at::Tensor m = kernels::plan_mask(p, 1, 0, p.tiles.rows, 0, p.tiles.cols, at::kCPU);
      if (p.varlen) {
        ++accepted;
        EXPECT_TRUE(kernels::flash_varlen_mask(*p.varlen, 1, p.tiles.rows, p.tiles.cols).equal(m))
            << what << ": the varlen segments are not the block's mask";
        EXPECT_EQ(p.varlen->cu_q.front(), 0);
        EXPECT_EQ(p.varlen->cu_q.back(), p.tiles.rows) << what;
        EXPECT_EQ(p.varlen->cu_k.back(), p.tiles.cols) << what;
        EXPECT_GE(p.varlen->pairs, p.visible_pairs) << what;
      } else {
        ++rejected;
        EXPECT_FALSE(varlen_shaped(m)) << what << ": a varlen-shaped block got no segments";
      }
    }
  }
  EXPECT_GE(accepted, 6);
  std::cout << "varlen blocks " << accepted << ", blocks no varlen expresses " << rejected << "\n";
}

// Two batch rows of different documents, a query that sees nothing and keys no one sees: the varlen
// segments cover all of them; a padded key inside a document cannot be expressed.
TEST(FlashArgs, VarlenCoversEveryRowAndRejectsAHole) {
  at::Tensor m = at::zeros({2, 6, 6}, at::kBool);
  m[0].narrow(0, 0, 2).narrow(1, 0, 2).copy_(at::ones({2, 2}, at::kBool).tril());
  m[0].narrow(0, 3, 3).narrow(1, 3, 3).copy_(at::ones({3, 3}, at::kBool).tril());  // row 2, key 2: nothing
  m[1].narrow(0, 0, 6).narrow(1, 0, 6).copy_(at::ones({6, 6}, at::kBool).tril());
  const auto v = kernels::flash_varlen_for(m);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->causal);
  EXPECT_TRUE(kernels::flash_varlen_mask(*v, 2, 6, 6).equal(m));
  EXPECT_EQ(v->cu_q, (std::vector<int32_t>{0, 2, 3, 3, 6, 12}));
  EXPECT_EQ(v->cu_k, (std::vector<int32_t>{0, 2, 2, 3, 6, 12}));
  at::Tensor hole = m.clone();
  hole[1][4][2] = false;
  EXPECT_FALSE(kernels::flash_varlen_for(hole).has_value());
  EXPECT_FALSE(varlen_shaped(hole));
}

// Routes: on CUDA with bf16 the windowed / varlen blocks take the flash routes and count their calls'
// pairs; float32, odd head dims and the CPU keep their routes.
TEST(FlashArgs, RoutesAndPairs) {
  const at::Device cuda(at::kCUDA, 0);
  int64_t windows = 0, varlens = 0;
  for (const char* mk : {"sliding_window:100", "document"}) {
    for (const BlockPlan& p : real_plans("contiguous", mk, 2, 512, std::string(mk) == "document" ? std::vector<int64_t>{150, 230, 132} : std::vector<int64_t>{})) {
      const KernelRoute r = kernels::block_route(p, at::kBFloat16, cuda, 64, kernels::KernelPolicy::fused);
      EXPECT_EQ(kernels::block_route(p, at::kFloat, at::kCPU, 64, kernels::KernelPolicy::fused),
                p.kind == BlockKind::empty ? KernelRoute::skipped : KernelRoute::cpu_flash);
      if (p.kind != BlockKind::masked || p.causal) continue;
      EXPECT_EQ(kernels::block_route(p, at::kFloat, cuda, 64, kernels::KernelPolicy::fused), KernelRoute::cuda_efficient);
      EXPECT_EQ(kernels::block_route(p, at::kBFloat16, cuda, 12, kernels::KernelPolicy::fused), r)
          << "a head dim of 12 runs padded to 16 on the same route";
      if (r == KernelRoute::cuda_flash_window) ++windows;
      if (r == KernelRoute::cuda_flash_varlen) {
        ++varlens;
        EXPECT_EQ(kernels::routed_pairs(p, r, 1), p.varlen->pairs);
      }
      EXPECT_GE(kernels::routed_pairs(p, r, 1), p.visible_pairs) << mk << " " << kernels::to_string(r);
      EXPECT_LE(kernels::routed_pairs(p, r, 1), kernels::routed_pairs(p, KernelRoute::cuda_efficient, 1)) << mk;
    }
  }
  EXPECT_GE(windows, 2);
  EXPECT_GE(varlens, 1);
}

// flash's varlen call swaps q to [segments, Hkv, Hq / Hkv, D] when max_q == 1 with GQA, which the
// 0-query segments break: such a block is refused and falls back; with one query head per kv head, or
// more than one query in a segment, the varlen route stays.
TEST(FlashArgs, VarlenRefusesOneQuerySegmentsWithGqa) {
  const at::Device cuda(at::kCUDA, 0);
  // Three queries of three documents (the third's keys are not in this block), keys of documents 0, 1, 3.
  const auto meta = [](std::vector<int64_t> pos, std::vector<int64_t> doc) {
    const at::Tensor p = at::tensor(pos, at::kLong).unsqueeze(0);
    return TokenMeta{p, at::zeros_like(p), at::tensor(doc, at::kLong).unsqueeze(0), at::ones_like(p, at::kBool)};
  };
  BlockPlan plan = kernels::plan_block(MaskSpec::parse("document"), meta({5, 3, 7}, {0, 1, 2}),
                                       meta({0, 1, 0, 1, 0, 1}, {0, 0, 1, 1, 3, 3}));
  ASSERT_EQ(plan.kind, BlockKind::masked);
  kernels::attach_flash_args(plan, 1, at::kCPU);
  ASSERT_TRUE(plan.varlen.has_value()) << "documents: varlen segments";
  EXPECT_EQ(plan.varlen->max_q, 1);
  EXPECT_LT(plan.varlen->cu_q.back(), static_cast<int32_t>(plan.varlen->cu_q.size() - 1))
      << "fewer queries than segments: flash's swapped reshape cannot hold";
  for (const auto& band : plan.bands) EXPECT_FALSE(band.masked && band.window) << "no window expresses it";
  EXPECT_FALSE(kernels::varlen_call_runs(*plan.varlen, 8, 2));
  EXPECT_TRUE(kernels::varlen_call_runs(*plan.varlen, 8, 8));
  EXPECT_EQ(kernels::block_route(plan, at::kBFloat16, cuda, 64, kernels::KernelPolicy::fused, 8, 2),
            KernelRoute::cuda_efficient);
  EXPECT_EQ(kernels::block_route(plan, at::kBFloat16, cuda, 64, kernels::KernelPolicy::fused, 8, 8),
            KernelRoute::cuda_flash_varlen);
  // A real document block has segments of many queries: GQA keeps the varlen route.
  for (const BlockPlan& p : real_plans("contiguous", "document", 1, 512, {150, 230, 132})) {
    if (!p.varlen) continue;
    EXPECT_GT(p.varlen->max_q, 1);
    EXPECT_EQ(kernels::block_route(p, at::kBFloat16, cuda, 64, kernels::KernelPolicy::fused, 8, 2),
              KernelRoute::cuda_flash_varlen);
  }
}

// The GPU test's blocks, route choice and arguments, built here as there.
TEST(FlashArgs, GpuTestBlocksTakeTheFlashRoutes) {
  // Head dim 64, and 12 (Gpu.HeadDimNotAMultipleOf8RunsPadded: the same routes, padded to 16).
  for (const int64_t d : {64, 12}) {
  const auto blocks = gpu_cases::flash_route_blocks(d);
  ASSERT_EQ(blocks.size(), 3u);
  for (const auto& b : blocks) {
    EXPECT_EQ(b.route, b.expected) << b.name << ": " << kernels::to_string(b.route);
    const auto moved = gpu_cases::plan_on(b.plan, at::kCPU);
    EXPECT_EQ(moved.bands.size(), b.plan.bands.size()) << b.name;
    if (b.plan.varlen) {  // the tensors the CUDA call reads are the segments decided on the host
      const auto& v = *b.plan.varlen;
      EXPECT_TRUE(v.cu_seqlens_q.equal(at::tensor(v.cu_q, at::kInt))) << b.name;
      EXPECT_TRUE(v.cu_seqlens_k.equal(at::tensor(v.cu_k, at::kInt))) << b.name;
      const at::Tensor m = kernels::plan_mask(b.plan, b.batch, 0, b.plan.tiles.rows, 0, b.plan.tiles.cols, at::kCPU);
      EXPECT_TRUE(v.empty_rows.equal(m.any(-1).logical_not())) << b.name;
    }
  }
  }
}

TEST(FlashArgs, FlashLayoutsRoundTrip) {
  const at::Tensor t = at::randn({2, 3, 5, 8});
  EXPECT_TRUE(kernels::to_flash_dense(t).sizes().equals({2, 5, 3, 8}));
  EXPECT_TRUE(kernels::to_flash_dense(t)[1][4][2].equal(t[1][2][4]));
  const at::Tensor v = kernels::to_flash_varlen(t);
  EXPECT_TRUE(v.sizes().equals({10, 3, 8}));
  EXPECT_TRUE(v[5 + 4][2].equal(t[1][2][4]));
  EXPECT_TRUE(kernels::from_flash_varlen(v, 2).equal(t));
  const at::Tensor lse = at::randn({2, 3, 5});
  const at::Tensor flat = kernels::lse_to_flash_varlen(lse);
  EXPECT_TRUE(flat.sizes().equals({3, 10}));
  EXPECT_EQ(flat[2][5 + 4].item<float>(), lse[1][2][4].item<float>());
  EXPECT_TRUE(kernels::lse_from_flash_varlen(flat, 2).equal(lse));
}

// The window decision over several batch rows (flash_window_for): one window serves every row of a
// call, so rows that differ on ONE side of their window only must be refused like rows that differ on
// both. A check of one side alone would hand flash row 0's window for row 1: on a GPU, one key too
// many (or too few) for the rows where they differ. Each case is written down by hand.
TEST(FlashArgs, WindowRefusesBatchRowsThatDifferOnOneSideOnly) {
  const at::Tensor causal = at::ones({8, 8}, at::kBool).tril();
  ASSERT_TRUE(kernels::flash_window_for(at::stack({causal, causal})).has_value()) << "equal rows: one window";
  // Left side only: row 1 is a sliding window of 3 (query i sees i-2..i), row 0 causal; every query's
  // last key (i) is the same.
  const at::Tensor window3 = causal.logical_and(at::ones({8, 8}, at::kBool).triu(-2));
  ASSERT_TRUE(kernels::flash_window_for(window3.unsqueeze(0)).has_value()) << "alone it is a window";
  EXPECT_FALSE(kernels::flash_window_for(at::stack({causal, window3})).has_value()) << "left side differs (row 1)";
  EXPECT_FALSE(kernels::flash_window_for(at::stack({window3, causal})).has_value()) << "left side differs (row 0)";
  // Right side only: row 1 sees one key more on the right (i + 1), first keys all 0.
  const at::Tensor ahead = at::ones({8, 8}, at::kBool).tril(1);
  ASSERT_TRUE(kernels::flash_window_for(ahead.unsqueeze(0)).has_value());
  EXPECT_FALSE(kernels::flash_window_for(at::stack({causal, ahead})).has_value()) << "right side differs (row 1)";
  EXPECT_FALSE(kernels::flash_window_for(at::stack({ahead, causal})).has_value()) << "right side differs (row 0)";
  // One query only, one side only: query 6 of row 1 sees keys 1..6 instead of 0..6.
  at::Tensor one = causal.clone();
  one[6][0] = false;
  EXPECT_FALSE(kernels::flash_window_for(at::stack({causal, one})).has_value()) << "one query's first key";
  at::Tensor last = causal.clone();
  last[2][3] = true;  // query 2 of row 1 sees keys 0..3
  EXPECT_FALSE(kernels::flash_window_for(at::stack({causal, last})).has_value()) << "one query's last key";
}

}  // namespace
}  // namespace cpbench
