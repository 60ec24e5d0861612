// Calibration: the block kernel's work follows the visible pairs, and the per-rank attention FLOPs a
// real `cpbench run` reports are the ones the planner predicts (issue 5, item 2).
//
// In-process: the tiled block kernel (kernels/attention/tiled_kernel.hpp) against the autograd reference on
// cell patterns that reach every path (empty / full / masked cells, several runs per query tile, runs
// cut to the score budget, rows that see nothing, batch rows that differ), and the metadata planner
// (kernels/transports/transport_common.hpp) against plan_block(build_mask(...)).
// End to end: tests/data/calibration.yaml through the cpbench binary. Per case the report's per-rank
// attention_flops equal plan::predicted_rank_flops exactly (prediction = measurement of work). Time is
// reported (attention_time_imbalance), not asserted: timing targets live in benchmarks and reports.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "harness/fs_util.hpp"
#include "harness/planner/plan.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/attention/plan_cache.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/attention/tiled_kernel.hpp"
#include "sharders/mask.hpp"
#include "kernels/transports/transport_common.hpp"
#include "reports/json_report.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {

constexpr int64_t T = kernels::kBlockTile;

// Relative to the largest reference value, absolute where that is below 1 (sliding_window:1 has
// dQ = dK = 0 exactly, which both sides reach only up to rounding).
double rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() /
         std::max(want.abs().max().item<double>(), 1.0);
}

at::Tensor causal_mask(int64_t b, int64_t sq, int64_t sk, int64_t offset) {
  return (at::arange(sk).unsqueeze(0) <= at::arange(sq).unsqueeze(1) + offset)
      .unsqueeze(0)
      .expand({b, sq, sk})
      .contiguous();
}

// q, k, v, dout in float64 with GQA (Hq = 2 Hkv).
struct Inputs {
  at::Tensor q, k, v, dout;
};
Inputs inputs(int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  return {at::randn({b, hq, sq, d}, gen, o), at::randn({b, hkv, sk, d}, gen, o), at::randn({b, hkv, sk, d}, gen, o),
          at::randn({b, hq, sq, d}, gen, o)};
}

// Forward and backward of one block over `plan` against autograd through reference_attention(mask).
void expect_matches_reference(const Inputs& in, const at::Tensor& mask, const kernels::BlockPlan& plan, double scale,
                              const std::string& what) {
  at::Tensor qr = in.q.clone().requires_grad_(true), kr = in.k.clone().requires_grad_(true);
  at::Tensor vr = in.v.clone().requires_grad_(true);
  at::Tensor ref = kernels::reference_attention(qr, kr, vr, mask, scale);
  ref.backward(in.dout);

  const auto f = kernels::block_forward(in.q, in.k, in.v, plan, scale);
  EXPECT_LT(rel_err(f.out, ref), 1e-12) << what;
  EXPECT_FALSE(f.out.isnan().any().item<bool>() || f.lse.isnan().any().item<bool>()) << what;
  // Rows that see nothing: out 0, lse -inf.
  const at::Tensor dead = mask.logical_not().all(2).unsqueeze(1).expand_as(f.lse);  // [B, Hq, Sq]
  if (dead.any().item<bool>()) {
    EXPECT_TRUE(f.lse.masked_select(dead).isneginf().all().item<bool>()) << what;
    EXPECT_TRUE(f.out.masked_select(dead.unsqueeze(-1).expand_as(f.out)).eq(0).all().item<bool>()) << what;
  }
  const at::Tensor dsum = (in.dout * f.out).sum(-1);
  const auto g = kernels::block_backward(in.dout, in.q, in.k, in.v, f.lse, dsum, plan, scale);
  EXPECT_LT(rel_err(g.dq, qr.grad()), 1e-12) << what;
  EXPECT_LT(rel_err(g.dk, kr.grad()), 1e-12) << what;
  EXPECT_LT(rel_err(g.dv, vr.grad()), 1e-12) << what;
  EXPECT_FALSE(g.dq.isnan().any().item<bool>() || g.dk.isnan().any().item<bool>() || g.dv.isnan().any().item<bool>())
      << what;
}

}  // namespace

// ------------------------------------------------------------------------------------ tiled kernel

TEST(TiledBlock, MatchesTheReferenceOnEveryCellPattern) {
  const int64_t B = 2, Hq = 4, Hkv = 2, Sq = 200, Sk = 330, D = 8;  // not multiples of the tile
  const double scale = 0.3;
  const Inputs in = inputs(B, Sq, Sk, Hq, Hkv, D, 5);
  at::Generator gen = at::detail::createCPUGenerator(9);
  std::vector<std::pair<std::string, at::Tensor>> masks;
  masks.emplace_back("causal", causal_mask(B, Sq, Sk, 100));
  // Stripes of keys: several runs per query tile, with empty key tiles between them.
  {
    const at::Tensor cols = at::arange(Sk).remainder(130) < 60;
    masks.emplace_back("stripes", (causal_mask(B, Sq, Sk, 150) & cols.view({1, 1, Sk})).contiguous());
  }
  // Random, with a full region, an empty region and rows that see nothing.
  {
    at::Tensor m = at::rand({B, Sq, Sk}, gen, at::kDouble) < 0.3;
    m.narrow(1, 64, 64).narrow(2, 128, 128).fill_(true);
    m.narrow(2, 256, 64).fill_(false);
    m[0][5].fill_(false);
    m[1].narrow(0, 150, 50).fill_(false);
    masks.emplace_back("random", m);
  }
  // Batch rows that differ: full in one, causal in the other (no cell is full in both).
  {
    at::Tensor m = causal_mask(B, Sq, Sk, 0);
    m[0].fill_(true);
    masks.emplace_back("batch rows differ", m);
  }
  for (const auto& [name, mask] : masks) {
    const auto plan = kernels::plan_block(mask);
    EXPECT_EQ(plan.visible_pairs, mask.sum().item<int64_t>()) << name;
    EXPECT_GE(plan.computed_pairs, plan.visible_pairs) << name;
    EXPECT_LE(plan.computed_pairs, mask.numel()) << name;
    expect_matches_reference(in, mask, plan, scale, name);
    // The mask overload runs the same cells.
    const auto a = kernels::block_forward(in.q, in.k, in.v, plan, scale);
    const auto b = kernels::block_forward(in.q, in.k, in.v, mask, scale);
    EXPECT_LT(rel_err(a.out, b.out), 1e-13) << name;
  }
}

TEST(TiledBlock, ComputesOnlyTheNonEmptyCells) {
  // A causal diagonal block of 10 x 10 tiles: 55 non-empty cells of 100.
  const int64_t S = 10 * T;
  const auto plan = kernels::plan_block(causal_mask(1, S, S, 0));
  EXPECT_EQ(plan.kind, kernels::BlockKind::masked);
  EXPECT_EQ(plan.visible_pairs, S * (S + 1) / 2);
  EXPECT_EQ(plan.computed_pairs, 55 * T * T);
  int masked = 0, full = 0, empty = 0;
  for (const auto k : plan.tiles.kind) {
    masked += k == kernels::BlockKind::masked;
    full += k == kernels::BlockKind::full;
    empty += k == kernels::BlockKind::empty;
  }
  EXPECT_EQ(masked, 10);
  EXPECT_EQ(full, 45);
  EXPECT_EQ(empty, 45);
  // Full and empty blocks.
  EXPECT_EQ(kernels::plan_block(at::ones({2, S, 3}, at::kBool)).computed_pairs, 2 * S * 3);
  EXPECT_EQ(kernels::plan_block(at::zeros({2, S, 3}, at::kBool)).computed_pairs, 0);
}

TEST(TiledBlock, CutsLongRunsToTheScoreBudgetAndMergesThem) {
  // One query tile against 4200 keys: 64 x 4200 x 4 scores exceed one piece, so the run is cut and
  // the pieces merged. Then with a key no query sees and a query row that sees nothing.
  const int64_t Sq = T, Sk = 4200, Hq = 4, Hkv = 2, D = 4;
  const Inputs in = inputs(1, Sq, Sk, Hq, Hkv, D, 11);
  at::Tensor mask = at::ones({1, Sq, Sk}, at::kBool);
  expect_matches_reference(in, mask, kernels::plan_block(mask), 0.5, "full");
  mask.narrow(2, Sk - 1, 1).fill_(false);
  mask[0][3].fill_(false);  // a dead row
  expect_matches_reference(in, mask, kernels::plan_block(mask), 0.5, "masked");
}

// ------------------------------------------------------------------------------ metadata planning

namespace {

TokenMeta random_meta(int64_t B, int64_t N, at::Generator& gen) {
  TokenMeta m;
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < B; ++b) rows.push_back(at::randperm(N, gen, at::kLong));
  m.pos = at::stack(rows);
  m.segment = at::randint(0, 2, {B, N}, gen, at::kLong);
  m.doc = at::randint(0, 3, {B, N}, gen, at::kLong);
  m.valid = at::randint(0, 5, {B, N}, gen, at::kLong) != 0;
  return m;
}

// Positions in order (from `start`), documents of `doc_len` tokens, the last `pad` tokens padding:
// the shape the sharders produce, with many full and empty cells.
TokenMeta ordered_meta(int64_t B, int64_t N, int64_t start, int64_t doc_len, int64_t pad) {
  TokenMeta m;
  m.pos = (at::arange(N, at::kLong) + start).unsqueeze(0).expand({B, N}).contiguous();
  m.segment = at::zeros({B, N}, at::kLong);
  m.doc = m.pos.div(doc_len, "floor");
  m.valid = at::ones({B, N}, at::kBool);
  if (pad > 0) m.valid.narrow(1, N - pad, pad).fill_(false);
  return m;
}

}  // namespace

TEST(MetadataPlan, SameCellsPairsAndMaskAsThePlanOfTheBuiltMask) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  struct Setup {
    std::string name;
    TokenMeta q, k;
  };
  std::vector<Setup> setups;
  setups.push_back({"random", random_meta(2, 150, gen), random_meta(2, 260, gen)});
  setups.push_back({"ordered, keys before", ordered_meta(2, 300, 400, 170, 0), ordered_meta(2, 330, 0, 170, 0)});
  setups.push_back({"ordered, same block", ordered_meta(1, 320, 0, 100, 40), ordered_meta(1, 320, 0, 100, 40)});
  setups.push_back({"ordered, keys after", ordered_meta(1, 128, 0, 1000, 0), ordered_meta(1, 128, 128, 1000, 0)});
  {
    // thd-like: two segments, each with its own documents.
    TokenMeta m = ordered_meta(1, 256, 0, 64, 0);
    m.segment.narrow(1, 128, 128).fill_(1);
    setups.push_back({"segments", m, m});
  }
  const Inputs in = inputs(2, 330, 330, 4, 2, 4, 17);
  for (const auto& s : setups) {
    // Windows of 64k - 1 put a window edge exactly one key past a tile edge (kBlockTile = 64): an
    // off-by-one in the cells' "fully visible" bound shows only there.
    for (const char* mk : {"causal", "full", "document", "sliding_window:40", "sliding_window:1", "sliding_window:63",
                           "sliding_window:127"}) {
      const MaskSpec spec = MaskSpec::parse(mk);
      const std::string what = s.name + " / " + mk;
      const at::Tensor m = build_mask(spec, s.q, s.k);
      const auto plan = kernels::plan_block(spec, s.q, s.k);
      const int64_t visible = m.sum().item<int64_t>();
      ASSERT_EQ(plan.visible_pairs, visible) << what;
      EXPECT_EQ(plan.kind, visible == 0           ? kernels::BlockKind::empty
                           : visible == m.numel() ? kernels::BlockKind::full
                                                  : kernels::BlockKind::masked)
          << what;
      if (plan.kind != kernels::BlockKind::masked) continue;
      // The plan keeps no whole mask (it grows with S^2); every window the kernels ask for is the
      // block's: the whole block as one window, and each cell below.
      EXPECT_FALSE(plan.mask.defined()) << what << ": a plan from cells built the block's whole mask";
      const at::Tensor whole = kernels::plan_mask(plan, m.size(0), 0, m.size(1), 0, m.size(2), at::kCPU);
      EXPECT_TRUE(whole.equal(m)) << what << ": the plan's mask is not the block's";
      // Every cell as classified: full cells all visible, empty none, masked ones carry the mask.
      const auto& t = plan.tiles;
      int64_t computed = 0;
      for (int64_t i = 0; i < t.n_q; ++i) {
        for (int64_t j = 0; j < t.n_k; ++j) {
          const int64_t h = std::min(T, t.rows - i * T), w = std::min(T, t.cols - j * T);
          const at::Tensor cell = m.narrow(1, i * T, h).narrow(2, j * T, w);
          const auto kind = t.kind[static_cast<size_t>(i * t.n_k + j)];
          const std::string where = what + " cell " + std::to_string(i) + "," + std::to_string(j);
          if (kind == kernels::BlockKind::full) {
            EXPECT_TRUE(cell.all().item<bool>()) << where;
          } else if (kind == kernels::BlockKind::empty) {
            EXPECT_FALSE(cell.any().item<bool>()) << where;
          } else {
            EXPECT_TRUE(kernels::plan_mask(plan, m.size(0), i * T, h, j * T, w, at::kCPU).equal(cell)) << where;
          }
          if (kind != kernels::BlockKind::empty) computed += m.size(0) * h * w;
        }
      }
      EXPECT_EQ(plan.computed_pairs, computed) << what;
      // And the kernel over this plan is the reference over the built mask.
      const int64_t b = m.size(0), sq = m.size(1), sk = m.size(2);
      const Inputs sub{in.q.narrow(0, 0, b).narrow(2, 0, sq), in.k.narrow(0, 0, b).narrow(2, 0, sk),
                       in.v.narrow(0, 0, b).narrow(2, 0, sk), in.dout.narrow(0, 0, b).narrow(2, 0, sq)};
      expect_matches_reference(sub, m, plan, 0.5, what);
    }
  }
}

// -------------------------------------------------------------------------- calibration, end to end

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double max_over_mean(const std::vector<double>& v) {
  double mx = 0, sum = 0;
  for (double x : v) {
    mx = std::max(mx, x);
    sum += x;
  }
  return sum > 0 ? mx / (sum / static_cast<double>(v.size())) : 1.0;
}

}  // namespace

// Prediction = measurement of work, end to end: every rank's attention_flops in a real `cpbench run`
// report equal plan::predicted_rank_flops, and the report's attention_flops_imbalance is their
// max / mean. Deliberately no timing: how far the measured attention-time imbalance sits from the
// FLOP imbalance is a property of the kernel (ATen's CPU flash kernel spends ~0.75 of a full block
// on a causal diagonal block, not 0.5), reported by every run as attention_time_imbalance and
// tracked in docs/planner.md, not a pass/fail fact of a shared two-core CI machine.
TEST(Calibration, ReportedPerRankFlopsEqualThePlannersPrediction) {
  const std::string yaml = std::string(CPBENCH_SOURCE_DIR) + "/tests/data/calibration.yaml";
  const ScenarioSpec spec = load_scenario(yaml);
  const std::vector<int64_t> docs = spec.batch.documents.empty() ? std::vector<int64_t>{} : spec.batch.documents[0];
  const std::string dir = "/tmp/cpbench-calibration-test-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  const std::string cmd = std::string(CPBENCH_EXE) + " run " + yaml + " --out " + dir + " > " + dir + "/log.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd << "\n" << read_text(dir + "/log.txt");
  const Report report = report_from_json(read_json_file(dir + "/report.json"));
  ASSERT_EQ(report.results.size(), spec.cases.size());
  for (const RunResult& r : report.results) {
    ASSERT_EQ(r.status, "ok") << r.name << ": " << r.reason;
    const int64_t cp = std::stoll(r.axes.at("cp"));
    ASSERT_EQ(static_cast<int64_t>(r.ranks.size()), cp) << r.name;
    // One attention call per layer and batch row.
    const std::vector<double> per_call =
        plan::predicted_rank_flops(r.axes.at("sharder"), cp, spec.batch.seq_len, docs, r.axes.at("mask"),
                                   spec.model.heads, spec.model.head_dim());
    ASSERT_EQ(static_cast<int64_t>(per_call.size()), cp) << r.name;
    std::vector<double> predicted;
    for (int64_t i = 0; i < cp; ++i) {
      const double want =
          per_call[static_cast<size_t>(i)] * static_cast<double>(spec.model.layers * spec.batch.batch_size);
      EXPECT_DOUBLE_EQ(r.ranks[static_cast<size_t>(i)].attention_flops, want) << r.name << " rank " << i;
      EXPECT_GT(r.ranks[static_cast<size_t>(i)].attention_s, 0.0) << r.name << " rank " << i;
      predicted.push_back(want);
    }
    ASSERT_NE(r.metric("attention_flops_imbalance"), nullptr);
    EXPECT_NEAR(r.metric("attention_flops_imbalance")->value, max_over_mean(predicted), 1e-12) << r.name;
    ASSERT_NE(r.metric("attention_time_imbalance"), nullptr) << r.name;
    std::printf("  %-45s flops imbalance %.3f  time imbalance %.3f\n", r.name.c_str(),
                r.metric("attention_flops_imbalance")->value, r.metric("attention_time_imbalance")->value);
  }
  fsu::remove_tree(dir);
}
