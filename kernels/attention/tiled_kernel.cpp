#include "kernels/attention/tiled_kernel.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/attention/intra_op_warmup.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {

// Before main, on the main thread: the process's first vector-math calls (intra_op_warmup.hpp).
[[maybe_unused]] const int64_t kWarmedAtStart = warm_intra_op_math();

// Column ranges [c0, c1), merged where adjacent.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

void add_range(Ranges& r, int64_t c0, int64_t c1) {
  if (!r.empty() && r.back().second == c0) {
    r.back().second = c1;
  } else {
    r.emplace_back(c0, c1);
  }
}

// The mask of one piece of a block: `mask` is its bool [B, Sq, Sk] view and `cols` the column
// ranges (relative to the piece) where it is applied; outside them every pair is visible. Applying
// it only there keeps the mask's own passes (negation, fill) on the partly visible tiles.
struct PieceMask {
  at::Tensor mask;
  Ranges cols;
  bool everywhere = false;  // `cols` cover the whole piece, so a row may see nothing in it
  [[nodiscard]] bool any() const { return !cols.empty(); }
};

// Batched-matmul views: [B, H, S, D] -> [B*H, S, D] (a view unless `t` is a non-contiguous slice
// of its rows). Query heads keep the grouped order: [B, Hq, S, D] read as [B*Hkv, G*S, D] puts the G
// query heads sharing key head kvh (h = kvh * G + g) in one batch entry, so one bmm per piece covers
// every head without materializing repeated K/V.
at::Tensor as3(const at::Tensor& t, int64_t heads) { return t.reshape({t.size(0) * heads, -1, t.size(3)}); }

// Scores [B*Hkv, G*Sq, Sk] of pre-scaled grouped queries against keys, masked entries -inf.
at::Tensor block_scores(const at::Tensor& q3, const at::Tensor& k3, const PieceMask& pm, int64_t batch, int64_t sq) {
  at::Tensor s = at::bmm(q3, k3.transpose(1, 2));
  if (pm.any()) {
    const int64_t sk = s.size(2);
    const at::Tensor s4 = s.view({batch, -1, sq, sk});  // [B, Hq, Sq, Sk]
    for (const auto& [c0, c1] : pm.cols) {
      const int64_t w = c1 - c0;
      s4.narrow(3, c0, w).masked_fill_(pm.mask.narrow(2, c0, w).logical_not().unsqueeze(1), kNegInf);
    }
  }
  return s;
}

// One piece evaluated densely: every (query, key) pair is computed, masked pairs are set to -inf.
// `qs` is q * scale.
BlockOutput dense_forward(const at::Tensor& qs, const at::Tensor& k, const at::Tensor& v, const PieceMask& pm,
                          FlashRounding rounding) {
  const int64_t b = qs.size(0), hq = qs.size(1), sq = qs.size(2), d = v.size(3), hkv = k.size(1);
  at::Tensor s = block_scores(as3(qs, hkv), as3(k, hkv), pm, b, sq);
  // Only a piece masked everywhere can hold a row that sees nothing (max -inf): elsewhere the
  // guards below are skipped, their two calls per piece being part of the kernel's fixed cost.
  at::Tensor shift = pm.everywhere ? finite_or_zero(s.amax(-1, true)) : s.amax(-1, true);
  at::Tensor p = s.sub_(shift).exp_();
  at::Tensor sum = p.sum(-1, true);
  at::Tensor out = at::bmm(rounding(p), as3(v, hkv));
  // A row that sees anything has sum >= 1 (its maximum contributes exp(0)); a fully masked one has
  // sum 0 and output 0, which any divisor keeps.
  out.div_(pm.everywhere ? sum.clamp_min(1) : sum);
  at::Tensor lse = sum.log_().add_(shift);  // log(0) + 0 = -inf on fully masked rows
  return {out.view({b, hq, sq, d}), lse.view({b, hq, sq})};
}

// Score elements (B x Hq x rows x keys) one ATen call works on at most. Why: with small head
// dimensions attention on a CPU is bound by the elementwise passes over the score matrix (mask, max,
// exp, sums), which run at cache speed only while the matrix stays near a core's L2. One dense call
// over a whole 2048 x 2048 block (4 heads of 32) cost 2.4x more per pair than the same block in
// pieces of 2^20 scores (4 MiB of float32), so time would have followed neither pairs nor blocks.
// 2^18 .. 2^22 were within 10% of each other on the 2-core CI machine; smaller pieces pay more of
// ATen's per-call overhead (~5 us per op here, ~15 ops per piece and ~15 more per merge).
constexpr int64_t kScoreBudget = int64_t{1} << 20;

// The tiles of a block are evaluated in pieces that keep ATen calls few and large: along the keys,
// consecutive non-empty key tiles of a query tile form one run, the mask applied on its masked
// tiles only, so a causal diagonal block is one call per query tile, not one per cell; along the
// queries, consecutive query tiles with the same runs form one group (a band of full rows is one
// call). Groups and runs are then cut to kScoreBudget. Empty cells are never part of a run, so the
// work is the non-empty cells' area.
struct Run {
  int64_t c0 = 0, c1 = 0;  // key columns [c0, c1)
  Ranges masked;           // absolute columns of its masked tiles
  bool operator==(const Run&) const = default;
};
struct RowGroup {
  int64_t r0 = 0, r1 = 0;  // query rows [r0, r1)
  std::vector<Run> runs;
};

// `heads`: score rows per query row (B x Hq).
std::vector<RowGroup> row_groups(const TileMap& m, int64_t heads) {
  std::vector<RowGroup> groups;
  int64_t width = 0;  // keys of the last group's runs
  for (int64_t i = 0; i < m.n_q; ++i) {
    std::vector<Run> runs;
    for (int64_t j = 0; j < m.n_k; ++j) {
      const BlockKind kind = m.kind[static_cast<size_t>(i * m.n_k + j)];
      if (kind == BlockKind::empty) continue;
      const int64_t c0 = j * kBlockTile, c1 = std::min(m.cols, c0 + kBlockTile);
      if (runs.empty() || runs.back().c1 != c0) runs.push_back({c0, c0, {}});
      runs.back().c1 = c1;
      if (kind == BlockKind::masked) add_range(runs.back().masked, c0, c1);
    }
    const int64_t r0 = i * kBlockTile, r1 = std::min(m.rows, r0 + kBlockTile);
    if (!groups.empty() && groups.back().runs == runs && (r1 - groups.back().r0) * width * heads <= kScoreBudget) {
      groups.back().r1 = r1;
    } else {
      width = 0;
      for (const Run& r : runs) width += r.c1 - r.c0;
      groups.push_back({r0, r1, std::move(runs)});
    }
  }
  // Cut long runs, whole tiles at a time, so one piece stays within the budget.
  for (RowGroup& g : groups) {
    const int64_t max_w = std::max<int64_t>(1, kScoreBudget / ((g.r1 - g.r0) * heads * kBlockTile)) * kBlockTile;
    std::vector<Run> cut;
    for (const Run& r : g.runs) {
      for (int64_t c = r.c0; c < r.c1; c += max_w) {
        Run piece{c, std::min(r.c1, c + max_w), {}};
        for (const auto& [m0, m1] : r.masked) {
          const int64_t lo = std::max(m0, piece.c0), hi = std::min(m1, piece.c1);
          if (lo < hi) piece.masked.emplace_back(lo, hi);
        }
        cut.push_back(std::move(piece));
      }
    }
    g.runs = std::move(cut);
  }
  return groups;
}

// Every cell full: how an unmasked block is cut.
TileMap full_map(int64_t batch, int64_t rows, int64_t cols) {
  TileMap m;
  m.rows = rows;
  m.cols = cols;
  m.n_q = tile_count(rows);
  m.n_k = tile_count(cols);
  m.kind.assign(static_cast<size_t>(m.n_q * m.n_k), BlockKind::full);
  m.visible_pairs = m.computed_pairs = batch * rows * cols;
  return m;
}

// The mask of a window of a block: rows [r0, r0 + n) x cols [c0, c0 + w), bool [B, n, w]. Built per
// window, so no kernel needs the block's whole mask.
using MaskWindow = std::function<at::Tensor(int64_t r0, int64_t n, int64_t c0, int64_t w)>;

MaskWindow window_of(const at::Tensor& mask) {
  return [mask](int64_t r0, int64_t n, int64_t c0, int64_t w) { return mask.narrow(1, r0, n).narrow(2, c0, w); };
}
MaskWindow window_of(const BlockPlan& plan, int64_t batch, const at::Device& device) {
  return [&plan, batch, device](int64_t r0, int64_t n, int64_t c0, int64_t w) {
    return plan_mask(plan, batch, r0, n, c0, w, device);
  };
}

// The mask of run `r` of the query rows [r0, r0 + n), ranges made relative.
PieceMask piece_mask(const MaskWindow& mask_of, int64_t r0, int64_t n, const Run& r) {
  PieceMask pm;
  if (r.masked.empty()) return pm;
  pm.mask = mask_of(r0, n, r.c0, r.c1 - r.c0);
  for (const auto& [c0, c1] : r.masked) pm.cols.emplace_back(c0 - r.c0, c1 - r.c0);
  pm.everywhere = r.masked.size() == 1 && r.masked[0].first == r.c0 && r.masked[0].second == r.c1;
  return pm;
}

BlockOutput tiled_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const MaskWindow& mask,
                          const TileMap& m, double scale, FlashRounding rounding = {}) {
  const std::vector<RowGroup> groups = row_groups(m, q.size(0) * q.size(1));
  const int64_t b = q.size(0), hq = q.size(1), d = v.size(3);
  // Per group, concatenated along the rows at the end (rows that see nothing: out 0, lse -inf).
  std::vector<at::Tensor> outs, lses;
  for (const RowGroup& g : groups) {
    const int64_t n = g.r1 - g.r0;
    if (g.runs.empty()) {
      outs.push_back(at::zeros({b, hq, n, d}, q.options()));
      lses.push_back(at::full({b, hq, n}, kNegInf, q.options()));
      continue;
    }
    const at::Tensor qs = q.narrow(2, g.r0, n).mul(scale);
    at::Tensor out, lse;
    for (const Run& r : g.runs) {
      const int64_t w = r.c1 - r.c0;
      merge_block(out, lse,
                  dense_forward(qs, k.narrow(2, r.c0, w), v.narrow(2, r.c0, w), piece_mask(mask, g.r0, n, r),
                                rounding));
    }
    outs.push_back(out);
    lses.push_back(lse);
  }
  if (outs.size() == 1) return {outs[0], lses[0]};
  return {at::cat(outs, 2), at::cat(lses, 2)};
}

// Backward over the same pieces as the forward: P from the global lse, dQ accumulated per query
// group, dK/dV per key range (formulas in the header).
BlockGrads tiled_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& lse, const at::Tensor& dsum, const MaskWindow& mask, const TileMap& m,
                          double scale, FlashRounding rounding = {}) {
  const std::vector<RowGroup> groups = row_groups(m, q.size(0) * q.size(1));
  const int64_t b = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(3), sk = k.size(2);
  at::Tensor dk = at::zeros(k.sizes(), k.options()), dv = at::zeros(v.sizes(), v.options());  // contiguous
  // [B*Hkv, Sk, D] views of dK / dV: each piece adds into its key range.
  const at::Tensor dk3 = dk.view({b * hkv, sk, d}), dv3 = dv.view({b * hkv, sk, v.size(3)});
  const at::Tensor k3 = as3(k, hkv), v3 = as3(v, hkv);
  // A row whose global lse is -inf is masked in every block, so its scores are all -inf and
  // P = exp(-inf - 0) = 0.
  const at::Tensor shift = finite_or_zero(lse);
  std::vector<at::Tensor> dqs;
  for (const RowGroup& g : groups) {
    const int64_t n = g.r1 - g.r0;
    if (g.runs.empty()) {
      dqs.push_back(at::zeros({b, hq, n, d}, q.options()));
      continue;
    }
    const at::Tensor qs = as3(q.narrow(2, g.r0, n).mul(scale), hkv);  // Q * scale: dK = dS^T (Q * scale)
    const at::Tensor do3 = as3(dout.narrow(2, g.r0, n), hkv);
    const at::Tensor sh = shift.narrow(2, g.r0, n).reshape({b * hkv, -1, 1});
    const at::Tensor ds_sum = dsum.narrow(2, g.r0, n).reshape({b * hkv, -1, 1});
    at::Tensor dq;  // [B*Hkv, G*n, D], unscaled
    for (const Run& r : g.runs) {
      const int64_t w = r.c1 - r.c0;
      const at::Tensor kr = k3.narrow(1, r.c0, w), vr = v3.narrow(1, r.c0, w);
      at::Tensor p = block_scores(qs, kr, piece_mask(mask, g.r0, n, r), b, n).sub_(sh).exp_();
      dv3.narrow(1, r.c0, w).baddbmm_(rounding(p).transpose(1, 2), do3);
      at::Tensor ds = rounding(at::bmm(do3, vr.transpose(1, 2)).sub_(ds_sum).mul_(p));
      dq = dq.defined() ? dq.baddbmm_(ds, kr) : at::bmm(ds, kr);
      dk3.narrow(1, r.c0, w).baddbmm_(ds.transpose(1, 2), qs);
    }
    dqs.push_back(dq.mul_(scale).view({b, hq, n, d}));
  }
  return {dqs.size() == 1 ? dqs[0] : at::cat(dqs, 2), dk, dv};
}

BlockOutput plan_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const BlockPlan& plan,
                         double scale, FlashRounding rounding) {
  if (plan.kind == BlockKind::masked)
    return tiled_forward(q, k, v, window_of(plan, q.size(0), q.device()), plan.tiles, scale, rounding);
  if (plan.kind == BlockKind::full)
    return tiled_forward(q, k, v, MaskWindow(), full_map(q.size(0), q.size(2), k.size(2)), scale, rounding);
  return {at::zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options()),
          at::full({q.size(0), q.size(1), q.size(2)}, kNegInf, q.options())};
}

BlockGrads plan_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& lse, const at::Tensor& dsum, const BlockPlan& plan, double scale,
                         FlashRounding rounding) {
  if (plan.kind == BlockKind::masked)
    return tiled_backward(dout, q, k, v, lse, dsum, window_of(plan, q.size(0), q.device()), plan.tiles, scale,
                          rounding);
  if (plan.kind == BlockKind::full)
    return tiled_backward(dout, q, k, v, lse, dsum, MaskWindow(), full_map(q.size(0), q.size(2), k.size(2)), scale,
                          rounding);
  return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v)};
}

}  // namespace

BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale) {
  warm_intra_op_math();  // again only if the intra-op thread count grew
  const TileMap m = mask.defined() ? tile_map(mask) : full_map(q.size(0), q.size(2), k.size(2));
  return tiled_forward(q, k, v, mask.defined() ? window_of(mask) : MaskWindow(), m, scale);
}

BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const BlockPlan& plan,
                          double scale, FlashRounding rounding) {
  warm_intra_op_math();
  BlockOutput r = plan_forward(trim_rows(plan, q), trim_cols(plan, k), trim_cols(plan, v), plan, scale, rounding);
  r.out = untrim_rows(plan, rounding(r.out), q.size(2), 0);
  r.lse = untrim_rows(plan, r.lse, q.size(2), kNegInf);
  return r;
}

BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& lse, const at::Tensor& dsum, const at::Tensor& mask, double scale) {
  const TileMap m = mask.defined() ? tile_map(mask) : full_map(q.size(0), q.size(2), k.size(2));
  return tiled_backward(dout, q, k, v, lse, dsum, mask.defined() ? window_of(mask) : MaskWindow(), m, scale);
}

BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& lse, const at::Tensor& dsum, const BlockPlan& plan, double scale,
                          FlashRounding rounding) {
  const auto rows = [&](const at::Tensor& t) { return trim_rows(plan, t); };
  const auto cols = [&](const at::Tensor& t) { return trim_cols(plan, t); };
  BlockGrads g = plan_backward(rows(dout), rows(q), cols(k), cols(v), rows(lse), rows(dsum), plan, scale, rounding);
  g.dq = untrim_rows(plan, rounding(g.dq), q.size(2), 0);
  g.dk = untrim_cols(plan, rounding(g.dk), k.size(2));
  g.dv = untrim_cols(plan, rounding(g.dv), v.size(2));
  return g;
}

}  // namespace cpbench::kernels
