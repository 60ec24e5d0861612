#include "kernels/attention/block_plan.hpp"

#include <atomic>

#include <algorithm>
#include <utility>

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {
// Visible pairs per (query tile, key tile) cell and, when `row_counts` is given, per query row
// (summed over the batch and the keys; int64 [Sq] on the host). One device -> host copy.
TileMap tile_map_and_rows(const at::Tensor& mask, at::Tensor* row_counts) {
  CP_CHECK(mask.dim() == 3 && mask.scalar_type() == at::kBool, "tile_map: mask must be bool [B, Sq, Sk]; got ",
           mask.scalar_type(), " ", shape_str(mask.sizes()));
  TileMap m;
  const int64_t b = mask.size(0);
  m.rows = mask.size(1);
  m.cols = mask.size(2);
  m.n_q = tile_count(m.rows);
  m.n_k = tile_count(m.cols);
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
  m.n_q = tile_count(rows);
  m.n_k = tile_count(cols);
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

namespace {
std::atomic<int64_t> g_mask_windows{0};
}  // namespace

int64_t mask_windows_built() { return g_mask_windows.load(); }

void attach_band_masks(BlockPlan& plan, int64_t batch, const at::Device& device) {
  if (plan.kind != BlockKind::masked || plan.causal) return;
  for (MaskBand& band : plan.bands) {
    if (!band.masked || band.mask.defined()) continue;
    band.mask = plan_mask(plan, batch, band.r0, band.r1 - band.r0, band.c0, band.c1 - band.c0, device).contiguous();
    band.empty_rows = band.mask.any(-1).logical_not();
  }
}

at::Tensor plan_mask(const BlockPlan& plan, int64_t batch, int64_t r0, int64_t n, int64_t c0, int64_t w,
                     const at::Device& device) {
  g_mask_windows.fetch_add(1);
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
  const int64_t nq = tile_count(n), nk = tile_count(w);
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

BlockPlan causal_block_plan(int64_t batch, int64_t n) {
  BlockPlan plan;
  plan.causal = true;
  TileMap m;
  m.rows = m.cols = n;
  m.n_q = m.n_k = tile_count(n);
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


at::Tensor trim_rows(const BlockPlan& plan, const at::Tensor& t) {
  return plan.rows.defined() ? t.index_select(2, plan.rows) : t;
}
at::Tensor trim_cols(const BlockPlan& plan, const at::Tensor& t) {
  return plan.cols.defined() ? t.index_select(2, plan.cols) : t;
}
at::Tensor untrim_rows(const BlockPlan& plan, const at::Tensor& part, int64_t n, double fill) {
  if (!plan.rows.defined()) return part;
  std::vector<int64_t> shape = part.sizes().vec();
  shape[2] = n;
  return at::full(shape, fill, part.options()).index_copy_(2, plan.rows, part);
}
at::Tensor untrim_cols(const BlockPlan& plan, const at::Tensor& part, int64_t n) {
  if (!plan.cols.defined()) return part;
  std::vector<int64_t> shape = part.sizes().vec();
  shape[2] = n;
  return at::zeros(shape, part.options()).index_copy_(2, plan.cols, part);
}

}  // namespace cpbench::kernels
