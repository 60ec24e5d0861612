#include "kernels/attention/attention_math.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// -inf (a fully masked row) -> 0, so `x - shift` never evaluates (-inf) - (-inf).
at::Tensor finite_shift(const at::Tensor& x) { return x.masked_fill(at::isinf(x), 0); }
// The same in one ATen call (the kernels' per-piece op count is part of their cost).
at::Tensor finite(const at::Tensor& x) { return at::nan_to_num(x, 0.0, 0.0, 0.0); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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
BlockOutput dense_forward(const at::Tensor& qs, const at::Tensor& k, const at::Tensor& v, const PieceMask& pm) {
  const int64_t b = qs.size(0), hq = qs.size(1), sq = qs.size(2), d = v.size(3), hkv = k.size(1);
  at::Tensor s = block_scores(as3(qs, hkv), as3(k, hkv), pm, b, sq);
  // Only a piece masked everywhere can hold a row that sees nothing (max -inf): elsewhere the
  // guards below are skipped, their two calls per piece being part of the kernel's fixed cost.
  at::Tensor shift = pm.everywhere ? finite(s.amax(-1, true)) : s.amax(-1, true);
  at::Tensor p = s.sub_(shift).exp_();
  at::Tensor sum = p.sum(-1, true);
  at::Tensor out = at::bmm(p, as3(v, hkv));
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
  m.n_q = ceil_div(rows, kBlockTile);
  m.n_k = ceil_div(cols, kBlockTile);
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
                          const TileMap& m, double scale) {
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
                  dense_forward(qs, k.narrow(2, r.c0, w), v.narrow(2, r.c0, w), piece_mask(mask, g.r0, n, r)));
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
                          double scale) {
  const std::vector<RowGroup> groups = row_groups(m, q.size(0) * q.size(1));
  const int64_t b = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(3), sk = k.size(2);
  at::Tensor dk = at::zeros(k.sizes(), k.options()), dv = at::zeros(v.sizes(), v.options());  // contiguous
  // [B*Hkv, Sk, D] views of dK / dV: each piece adds into its key range.
  const at::Tensor dk3 = dk.view({b * hkv, sk, d}), dv3 = dv.view({b * hkv, sk, v.size(3)});
  const at::Tensor k3 = as3(k, hkv), v3 = as3(v, hkv);
  // A row whose global lse is -inf is masked in every block, so its scores are all -inf and
  // P = exp(-inf - 0) = 0.
  const at::Tensor shift = finite(lse);
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
      dv3.narrow(1, r.c0, w).baddbmm_(p.transpose(1, 2), do3);
      at::Tensor ds = at::bmm(do3, vr.transpose(1, 2)).sub_(ds_sum).mul_(p);
      dq = dq.defined() ? dq.baddbmm_(ds, kr) : at::bmm(ds, kr);
      dk3.narrow(1, r.c0, w).baddbmm_(ds.transpose(1, 2), qs);
    }
    dqs.push_back(dq.mul_(scale).view({b, hq, n, d}));
  }
  return {dqs.size() == 1 ? dqs[0] : at::cat(dqs, 2), dk, dv};
}

BlockOutput plan_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const BlockPlan& plan,
                         double scale) {
  if (plan.kind == BlockKind::masked)
    return tiled_forward(q, k, v, window_of(plan, q.size(0), q.device()), plan.tiles, scale);
  if (plan.kind == BlockKind::full)
    return tiled_forward(q, k, v, MaskWindow(), full_map(q.size(0), q.size(2), k.size(2)), scale);
  return {at::zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options()),
          at::full({q.size(0), q.size(1), q.size(2)}, kNegInf, q.options())};
}

BlockGrads plan_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& lse, const at::Tensor& dsum, const BlockPlan& plan, double scale) {
  if (plan.kind == BlockKind::masked)
    return tiled_backward(dout, q, k, v, lse, dsum, window_of(plan, q.size(0), q.device()), plan.tiles, scale);
  if (plan.kind == BlockKind::full)
    return tiled_backward(dout, q, k, v, lse, dsum, MaskWindow(), full_map(q.size(0), q.size(2), k.size(2)), scale);
  return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v)};
}

// Visible pairs per (query tile, key tile) cell and, when `row_counts` is given, per query row
// (summed over the batch and the keys; int64 [Sq] on the host). One device -> host copy.
TileMap tile_map_and_rows(const at::Tensor& mask, at::Tensor* row_counts) {
  CP_CHECK(mask.dim() == 3 && mask.scalar_type() == at::kBool, "tile_map: mask must be bool [B, Sq, Sk]; got ",
           mask.scalar_type(), " ", shape_str(mask.sizes()));
  TileMap m;
  const int64_t b = mask.size(0);
  m.rows = mask.size(1);
  m.cols = mask.size(2);
  m.n_q = ceil_div(m.rows, kBlockTile);
  m.n_k = ceil_div(m.cols, kBlockTile);
  m.kind.assign(static_cast<size_t>(m.n_q * m.n_k), BlockKind::empty);
  if (row_counts) *row_counts = at::zeros({m.rows}, at::kLong);
  if (mask.numel() == 0) return m;
  // Counting is a pass over the whole mask, as long as a few elementwise passes of attention over
  // the block when done the plain way (a bool -> int64 reduction costs ~4 ns a pair here), and it
  // runs for every block, empty ones included. So the mask's bytes are read as int64 words: summing
  // a key tile's 8 words adds 8 byte lanes in parallel (each <= 8, no carry), then three shift-and-
  // add steps fold the lanes into the tile row's count (<= 64). ~20x cheaper; endianness-neutral.
  static_assert(kBlockTile % 8 == 0 && kBlockTile < 256, "byte lanes of a tile row must not carry");
  at::Tensor x = mask.view(at::kByte);
  const int64_t pad_q = m.n_q * kBlockTile - m.rows, pad_k = m.n_k * kBlockTile - m.cols;
  x = pad_q > 0 || pad_k > 0 ? at::constant_pad_nd(x, {0, pad_k, 0, pad_q}, 0) : x.contiguous();
  if (x.storage_offset() % 8 != 0) x = x.clone();
  at::Tensor w = x.view(at::kLong).view({b, m.n_q * kBlockTile, m.n_k, kBlockTile / 8}).sum(-1);
  w = w.bitwise_and(0x00FF00FF00FF00FFLL).add_(w.bitwise_right_shift(8).bitwise_and_(0x00FF00FF00FF00FFLL));
  w = w.bitwise_and(0x0000FFFF0000FFFFLL).add_(w.bitwise_right_shift(16).bitwise_and_(0x0000FFFF0000FFFFLL));
  w = w.bitwise_and(0xFFFFFFFFLL).add_(w.bitwise_right_shift(32));  // [B, n_q * T, n_k]: per row and key tile
  at::Tensor cells = w.view({b, m.n_q, kBlockTile, m.n_k}).sum(at::IntArrayRef{0, 2}).flatten();
  if (row_counts) cells = at::cat({cells, w.sum(at::IntArrayRef{0, 2}).narrow(0, 0, m.rows)});
  cells = cells.to(at::kCPU).contiguous();
  if (row_counts) *row_counts = cells.narrow(0, m.n_q * m.n_k, m.rows);
  const int64_t* c = cells.data_ptr<int64_t>();
  for (int64_t i = 0; i < m.n_q; ++i) {
    const int64_t h = std::min(kBlockTile, m.rows - i * kBlockTile);
    for (int64_t j = 0; j < m.n_k; ++j) {
      const int64_t area = b * h * std::min(kBlockTile, m.cols - j * kBlockTile);
      const int64_t n = c[i * m.n_k + j];
      m.visible_pairs += n;
      if (n == 0) continue;
      m.kind[static_cast<size_t>(i * m.n_k + j)] = n == area ? BlockKind::full : BlockKind::masked;
      m.computed_pairs += area;
    }
  }
  return m;
}
}  // namespace

at::ScalarType compute_dtype(at::ScalarType input) { return input == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                               double scale) {
  CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be [B, H, S, D]; got ",
           shape_str(q.sizes()), ", ", shape_str(k.sizes()), ", ", shape_str(v.sizes()));
  const int64_t hq = q.size(1), hkv = k.size(1);
  CP_CHECK(hkv > 0 && hq % hkv == 0, "attention: query heads ", hq, " are not a multiple of key/value heads ", hkv);
  const auto cd = compute_dtype(q.scalar_type());
  const int64_t g = hq / hkv;
  at::Tensor qc = q.to(cd);
  at::Tensor kc = k.to(cd).repeat_interleave(g, 1);
  at::Tensor vc = v.to(cd).repeat_interleave(g, 1);
  at::Tensor s = at::matmul(qc, kc.transpose(-1, -2)) * scale;
  s = s.masked_fill(mask.logical_not().unsqueeze(1), kNegInf);
  // softmax written out so a fully masked row is 0 (not NaN) in the forward AND the backward: the
  // shift is detached (the result does not depend on it), e = exp(-inf) = 0 carries no gradient, and
  // the zero row sum is replaced by 1 before dividing.
  at::Tensor shift = finite_shift(std::get<0>(s.detach().max(-1, /*keepdim=*/true)));
  at::Tensor e = (s - shift).exp();
  at::Tensor sum = e.sum(-1, /*keepdim=*/true);
  at::Tensor p = e / sum.masked_fill(sum == 0, 1);
  return at::matmul(p, vc).to(q.scalar_type());
}

TileMap tile_map(const at::Tensor& mask) { return tile_map_and_rows(mask, nullptr); }

BlockPlan plan_block(const at::Tensor& mask) {
  BlockPlan plan;
  at::Tensor row_counts;
  TileMap whole = tile_map_and_rows(mask, &row_counts);
  plan.visible_pairs = whole.visible_pairs;
  if (plan.visible_pairs == 0) return plan;  // empty
  if (plan.visible_pairs == mask.numel()) {
    plan.kind = BlockKind::full;
    plan.computed_pairs = mask.numel();
    return plan;
  }
  plan.kind = BlockKind::masked;
  const int64_t b = mask.size(0), sq = mask.size(1), sk = mask.size(2);
  const at::Tensor row_any = row_counts > 0;
  const int64_t nr = row_any.sum().item<int64_t>();
  // Columns that can see anything lie in key tiles with a visible pair: a bound that spares the
  // column pass whenever trimming cannot pay anyway.
  int64_t nc = 0;
  for (int64_t j = 0; j < whole.n_k; ++j) {
    for (int64_t i = 0; i < whole.n_q; ++i) {
      if (whole.kind[static_cast<size_t>(i * whole.n_k + j)] != BlockKind::empty) {
        nc += std::min(kBlockTile, sk - j * kBlockTile);
        break;
      }
    }
  }
  // Trim only when it saves a real share of what the cells would compute: the cells already skip
  // tile-aligned empty regions, and index gathers and scatters are not free.
  const auto pays = [&] { return b * nr * nc * 4 <= whole.computed_pairs * 3; };
  at::Tensor col_any;
  if (pays()) {
    col_any = mask.any(1).any(0).to(at::kCPU);
    nc = col_any.sum().item<int64_t>();
  }
  if (pays()) {
    if (nr < sq) plan.rows = row_any.nonzero().flatten().to(mask.device());
    if (nc < sk) plan.cols = col_any.nonzero().flatten().to(mask.device());
    at::Tensor sub = mask;
    if (plan.rows.defined()) sub = sub.index_select(1, plan.rows);
    if (plan.cols.defined()) sub = sub.index_select(2, plan.cols);
    if (sub.numel() == plan.visible_pairs) {
      plan.kind = BlockKind::full;  // the visible pairs fill the trimmed block
      plan.computed_pairs = sub.numel();
      return plan;
    }
    plan.mask = sub;
    plan.tiles = tile_map(sub);
    plan.bands = mask_bands(plan.tiles);
  } else {
    plan.mask = mask;
    plan.tiles = std::move(whole);
    plan.bands = mask_bands(plan.tiles);
  }
  plan.computed_pairs = plan.tiles.computed_pairs;
  return plan;
}

BlockPlan plan_from_cells(int64_t batch, int64_t rows, int64_t cols, std::vector<BlockKind> kind,
                          const at::Tensor& cell_masks) {
  TileMap m;
  m.rows = rows;
  m.cols = cols;
  m.n_q = ceil_div(rows, kBlockTile);
  m.n_k = ceil_div(cols, kBlockTile);
  CP_CHECK(static_cast<int64_t>(kind.size()) == m.n_q * m.n_k, "plan_from_cells: ", kind.size(), " cell kinds for a ",
           m.n_q, " x ", m.n_k, " grid");
  m.kind = std::move(kind);
  std::vector<int64_t> qi, kj;
  for (int64_t i = 0; i < m.n_q; ++i)
    for (int64_t j = 0; j < m.n_k; ++j)
      if (m.kind[static_cast<size_t>(i * m.n_k + j)] == BlockKind::masked) {
        qi.push_back(i);
        kj.push_back(j);
      }
  const auto n_masked = static_cast<int64_t>(qi.size());
  CP_CHECK(cell_masks.dim() == 4 && cell_masks.size(0) == n_masked &&
               (n_masked == 0 ||
                (cell_masks.size(1) == batch && cell_masks.size(2) == kBlockTile && cell_masks.size(3) == kBlockTile)),
           "plan_from_cells: cell_masks must be [", n_masked, ", ", batch, ", ", kBlockTile, ", ", kBlockTile,
           "]; got ", shape_str(cell_masks.sizes()));
  at::Tensor counts;
  if (n_masked > 0) counts = cell_masks.sum(at::IntArrayRef{1, 2, 3}).to(at::kCPU).contiguous();
  bool any_masked = false;
  for (int64_t i = 0, c = 0; i < m.n_q; ++i) {
    const int64_t h = std::min(kBlockTile, rows - i * kBlockTile);
    for (int64_t j = 0; j < m.n_k; ++j) {
      BlockKind& k = m.kind[static_cast<size_t>(i * m.n_k + j)];
      const int64_t area = batch * h * std::min(kBlockTile, cols - j * kBlockTile);
      int64_t n = k == BlockKind::full ? area : 0;
      if (k == BlockKind::masked) {
        n = counts.data_ptr<int64_t>()[c++];
        k = n == 0 ? BlockKind::empty : n == area ? BlockKind::full : BlockKind::masked;
        any_masked = any_masked || k == BlockKind::masked;
      }
      m.visible_pairs += n;
      if (n > 0) m.computed_pairs += area;
    }
  }
  BlockPlan plan;
  plan.visible_pairs = m.visible_pairs;
  if (plan.visible_pairs == 0) return plan;  // empty
  if (plan.visible_pairs == batch * rows * cols) {
    plan.kind = BlockKind::full;
    plan.computed_pairs = plan.visible_pairs;
    return plan;
  }
  plan.kind = BlockKind::masked;
  if (any_masked) {
    // Keep the masks of the cells still masked (reclassified ones drop out), indexed per cell.
    plan.cell_index.assign(m.kind.size(), -1);
    std::vector<int64_t> keep;
    for (int64_t i = 0, c = 0; i < m.n_q; ++i)
      for (int64_t j = 0; j < m.n_k; ++j) {
        const size_t cell = static_cast<size_t>(i * m.n_k + j);
        if (c < n_masked && qi[static_cast<size_t>(c)] == i && kj[static_cast<size_t>(c)] == j) {
          if (m.kind[cell] == BlockKind::masked) {
            plan.cell_index[cell] = static_cast<int64_t>(keep.size());
            keep.push_back(c);
          }
          ++c;
        }
      }
    plan.cell_masks = static_cast<int64_t>(keep.size()) == n_masked
                          ? cell_masks
                          : cell_masks.index_select(0, at::tensor(keep, at::TensorOptions().dtype(at::kLong))
                                                               .to(cell_masks.device()));
  }
  plan.computed_pairs = m.computed_pairs;
  plan.tiles = std::move(m);
  plan.bands = mask_bands(plan.tiles);
  return plan;
}

at::Tensor plan_mask(const BlockPlan& plan, int64_t batch, int64_t r0, int64_t n, int64_t c0, int64_t w,
                     const at::Device& device) {
  const TileMap& m = plan.tiles;
  CP_CHECK(plan.kind == BlockKind::masked && r0 >= 0 && c0 >= 0 && n >= 0 && w >= 0 && r0 + n <= m.rows &&
               c0 + w <= m.cols && r0 % kBlockTile == 0 && c0 % kBlockTile == 0,
           "plan_mask: window rows [", r0, ", ", r0 + n, ") x cols [", c0, ", ", c0 + w, ") of a ", m.rows, " x ",
           m.cols, " masked block (tile-aligned starts)");
  if (plan.mask.defined()) return plan.mask.narrow(1, r0, n).narrow(2, c0, w);
  const auto bool_opts = at::TensorOptions().dtype(at::kBool).device(device);
  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(device);
  if (!plan.cell_masks.defined() && plan.causal) {  // the triangle: key j sees query i when j <= i
    return (at::arange(c0, c0 + w, long_opts).unsqueeze(0) <= at::arange(r0, r0 + n, long_opts).unsqueeze(1))
        .unsqueeze(0)
        .expand({batch, n, w});
  }
  // Cells: full ones true, masked ones their mask, written through a [n_q, n_k, B, T, T] view.
  const int64_t i0 = r0 / kBlockTile, j0 = c0 / kBlockTile;
  const int64_t nq = ceil_div(n, kBlockTile), nk = ceil_div(w, kBlockTile);
  at::Tensor out = at::zeros({batch, nq * kBlockTile, nk * kBlockTile}, bool_opts);
  const at::Tensor cells = out.view({batch, nq, kBlockTile, nk, kBlockTile}).permute({1, 3, 0, 2, 4});
  std::vector<int64_t> fi, fj, mi, mj, mo;
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j) {
      const size_t cell = static_cast<size_t>((i0 + i) * m.n_k + j0 + j);
      if (m.kind[cell] == BlockKind::full) {
        fi.push_back(i);
        fj.push_back(j);
      } else if (m.kind[cell] == BlockKind::masked) {
        CP_CHECK(cell < plan.cell_index.size() && plan.cell_index[cell] >= 0, "plan_mask: masked cell ", i0 + i, ",",
                 j0 + j, " has no mask in the plan");
        mi.push_back(i);
        mj.push_back(j);
        mo.push_back(plan.cell_index[cell]);
      }
    }
  const auto idx = [&](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).to(device); };
  if (!fi.empty()) cells.index_put_({idx(fi), idx(fj)}, at::scalar_tensor(true, bool_opts));
  if (!mi.empty()) cells.index_put_({idx(mi), idx(mj)}, plan.cell_masks.index_select(0, idx(mo)).to(device));
  return out.narrow(1, 0, n).narrow(2, 0, w);
}

std::vector<MaskBand> mask_bands(const TileMap& m) {
  std::vector<MaskBand> bands;
  double own = 0;  // the band's tiles' own span areas
  for (int64_t i = 0; i < m.n_q; ++i) {
    int64_t j0 = m.n_k, j1 = -1;
    for (int64_t j = 0; j < m.n_k; ++j)
      if (m.kind[static_cast<size_t>(i * m.n_k + j)] != BlockKind::empty) {
        j0 = std::min(j0, j);
        j1 = j;
      }
    const int64_t r0 = i * kBlockTile, r1 = std::min(m.rows, r0 + kBlockTile);
    if (j1 < 0) continue;
    const int64_t c0 = j0 * kBlockTile, c1 = std::min(m.cols, (j1 + 1) * kBlockTile);
    const double area = static_cast<double>((r1 - r0) * (c1 - c0));
    if (!bands.empty() && bands.back().r1 == r0) {
      MaskBand& b = bands.back();
      const int64_t lo = std::min(b.c0, c0), hi = std::max(b.c1, c1);
      if (static_cast<double>((r1 - b.r0) * (hi - lo)) <= 2 * (own + area)) {
        b.r1 = r1;
        b.c0 = lo;
        b.c1 = hi;
        own += area;
        continue;
      }
    }
    bands.push_back({r0, r1, c0, c1, false});
    own = area;
  }
  for (MaskBand& b : bands)
    for (int64_t i = b.r0 / kBlockTile; i * kBlockTile < b.r1 && !b.masked; ++i)
      for (int64_t j = b.c0 / kBlockTile; j * kBlockTile < b.c1; ++j)
        if (m.kind[static_cast<size_t>(i * m.n_k + j)] != BlockKind::full) {
          b.masked = true;
          break;
        }
  return bands;
}

BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          double scale) {
  const TileMap m = mask.defined() ? tile_map(mask) : full_map(q.size(0), q.size(2), k.size(2));
  return tiled_forward(q, k, v, mask.defined() ? window_of(mask) : MaskWindow(), m, scale);
}

BlockPlan causal_block_plan(int64_t batch, int64_t n) {
  BlockPlan plan;
  plan.causal = true;
  TileMap m;
  m.rows = m.cols = n;
  m.n_q = m.n_k = ceil_div(n, kBlockTile);
  m.kind.assign(static_cast<size_t>(m.n_q * m.n_k), BlockKind::empty);
  for (int64_t i = 0; i < m.n_q; ++i) {
    const int64_t h = std::min(kBlockTile, n - i * kBlockTile);
    for (int64_t j = 0; j <= i; ++j) {
      m.kind[static_cast<size_t>(i * m.n_k + j)] = i == j && h > 1 ? BlockKind::masked : BlockKind::full;
      m.computed_pairs += batch * h * std::min(kBlockTile, n - j * kBlockTile);
    }
  }
  m.visible_pairs = batch * n * (n + 1) / 2;
  plan.visible_pairs = m.visible_pairs;
  if (n == 0) return plan;
  plan.kind = n == 1 ? BlockKind::full : BlockKind::masked;
  plan.causal = plan.kind == BlockKind::masked;
  plan.computed_pairs = m.computed_pairs;
  if (plan.kind == BlockKind::masked) plan.tiles = std::move(m);
  return plan;
}


BlockOutput block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const BlockPlan& plan,
                          double scale) {
  const bool tr = plan.rows.defined(), tc = plan.cols.defined();
  const at::Tensor qs = tr ? q.index_select(2, plan.rows) : q;
  const at::Tensor ks = tc ? k.index_select(2, plan.cols) : k;
  const at::Tensor vs = tc ? v.index_select(2, plan.cols) : v;
  BlockOutput r = plan_forward(qs, ks, vs, plan, scale);
  if (!tr) return r;
  BlockOutput full;
  full.out = at::zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, r.out.options()).index_copy_(2, plan.rows, r.out);
  full.lse = at::full({q.size(0), q.size(1), q.size(2)}, kNegInf, r.lse.options()).index_copy_(2, plan.rows, r.lse);
  return full;
}

BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& lse, const at::Tensor& dsum, const at::Tensor& mask, double scale) {
  const TileMap m = mask.defined() ? tile_map(mask) : full_map(q.size(0), q.size(2), k.size(2));
  return tiled_backward(dout, q, k, v, lse, dsum, mask.defined() ? window_of(mask) : MaskWindow(), m, scale);
}

BlockGrads block_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& lse, const at::Tensor& dsum, const BlockPlan& plan, double scale) {
  const bool tr = plan.rows.defined(), tc = plan.cols.defined();
  auto rows = [&](const at::Tensor& t) { return tr ? t.index_select(2, plan.rows) : t; };
  auto cols = [&](const at::Tensor& t) { return tc ? t.index_select(2, plan.cols) : t; };
  BlockGrads g = plan_backward(rows(dout), rows(q), cols(k), cols(v), rows(lse), rows(dsum), plan, scale);
  if (tr) g.dq = at::zeros(q.sizes(), g.dq.options()).index_copy_(2, plan.rows, g.dq);
  if (tc) {
    g.dk = at::zeros(k.sizes(), g.dk.options()).index_copy_(2, plan.cols, g.dk);
    g.dv = at::zeros(v.sizes(), g.dv.options()).index_copy_(2, plan.cols, g.dv);
  }
  return g;
}

void merge_block(at::Tensor& out, at::Tensor& lse, const BlockOutput& block) {
  if (!out.defined()) {
    out = block.out;
    lse = block.lse;
    return;
  }
  // new_lse = m + log(e^(a-m) + e^(b-m)) with m = max(a, b) made finite: both weights are <= 1 and
  // one is 1 unless both sides are -inf, where the weights are 0, the sum is 0 and the output stays 0.
  // The sum is 0 or in [1, 2], so clamping it to 1 only replaces the 0.
  at::Tensor m = finite(at::maximum(lse, block.lse));
  at::Tensor wa = (lse - m).exp_();
  at::Tensor wb = (block.lse - m).exp_();
  at::Tensor sum = wa + wb;
  out = (out * wa.unsqueeze(-1)).add_(block.out * wb.unsqueeze(-1)).div_(sum.clamp_min(1).unsqueeze(-1));
  lse = sum.log_().add_(m);
}

}  // namespace cpbench::kernels
