#include "kernels/attention/plan_cache.hpp"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {
std::atomic<int64_t> g_metadata_plans{0};
std::atomic<int64_t> g_caches{0};

// [B, N] -> [B, n, kBlockTile], N padded to n * kBlockTile by repeating the last token (which
// changes no tile's min, max, all or any).
at::Tensor tiled(const at::Tensor& t, int64_t n) {
  const int64_t pad = n * kBlockTile - t.size(1);
  const at::Tensor x = pad > 0 ? at::cat({t, t.narrow(1, t.size(1) - 1, 1).expand({t.size(0), pad})}, 1) : t;
  return x.reshape({t.size(0), n, kBlockTile});
}

bool same_field(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || a.equal(b));
}
bool same_tokens(const TokenMeta& a, const TokenMeta& b) {
  return same_field(a.pos, b.pos) && same_field(a.segment, b.segment) && same_field(a.doc, b.doc) &&
         same_field(a.valid, b.valid);
}

bool row_constant(const at::Tensor& t) {
  return !t.defined() || t.size(1) == 0 || t.eq(t.narrow(1, 0, 1)).all().item<bool>();
}
}  // namespace

bool diagonal_is_causal(const MaskSpec& mask, const TokenMeta& m) {
  if (!mask.has_upper() || mask.has_lower()) return false;
  if (mask.same_document() && !row_constant(m.doc)) return false;
  if (!row_constant(m.segment)) return false;
  if (m.valid.defined() && !m.valid.all().item<bool>()) return false;
  if (m.pos.size(1) < 2) return true;
  return (m.pos.narrow(1, 1, m.pos.size(1) - 1) > m.pos.narrow(1, 0, m.pos.size(1) - 1)).all().item<bool>();
}

namespace {
// The work rule (sharders/mask.hpp): the block's visible pairs less those of its padding queries,
// counted on the padding queries' rows only (build_mask of [B, padding queries, Sk], a slice of them
// at a time so the mask stays below ~16M elements). O(padding queries x Sk), once per step.
int64_t work_pairs(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k, int64_t visible) {
  if (visible == 0 || !q.valid.defined()) return visible;
  const at::Tensor pad = q.valid.logical_not();
  const at::Tensor cols = pad.any(0).nonzero().flatten();
  const int64_t n = cols.numel();
  if (n == 0) return visible;
  const int64_t step = std::max<int64_t>(1, (int64_t{1} << 24) / std::max<int64_t>(1, q.batch() * k.tokens()));
  int64_t seen = 0;
  for (int64_t i = 0; i < n; i += step) {
    const at::Tensor c = cols.narrow(0, i, std::min(step, n - i));
    seen += build_mask(mask, q.index_select(1, c), k).logical_and(pad.index_select(1, c).unsqueeze(-1)).sum().item<int64_t>();
  }
  return visible - seen;
}
}  // namespace

PlanCache::PlanCache(const MaskSpec& mask, const TokenMeta& local, const TokenMeta& all, int rank, int world,
                     const at::Device& device)
    : mask_(mask), rank_(rank) {
  CP_CHECK(local.pos.defined() && all.pos.defined() && world >= 1 && all.tokens() == world * local.tokens() &&
               all.batch() == local.batch(),
           "PlanCache: local metadata ", local.pos.defined() ? shape_str(local.pos.sizes()) : "(undefined)",
           " and all ", all.pos.defined() ? shape_str(all.pos.sizes()) : "(undefined)", " do not fit W = ", world);
  batch_ = local.batch();
  tokens_ = local.tokens();
  g_caches.fetch_add(1);
  // Planning runs on the host: metadata on a device is copied once, here, never inside attention.
  const TokenMeta q = local.to(at::kCPU), k_all = all.to(at::kCPU);
  const bool causal_diag = diagonal_is_causal(mask, q);
  for (int src = 0; src < world; ++src) {
    // The diagonal causal block is planned without its mask (O(S^2) bytes that only the tiled
    // fallback would read).
    // Only when the key block's metadata is the queries' own (it should be, for src == rank; a
    // caller's metadata that says otherwise is planned by the rule, not assumed).
    const TokenMeta k = k_all.narrow(1, src * tokens_, tokens_);
    BlockPlan p =
        src == rank && causal_diag && same_tokens(q, k) ? causal_block_plan(batch_, tokens_) : plan_block(mask, q, k);
    g_metadata_plans.fetch_add(1);
    p.work_pairs = work_pairs(mask, q, k, p.visible_pairs);
    // The flash window / varlen arguments are read by the CUDA routes only: decided here, on the host,
    // while the plan's cells are still on it (the CPU routes never read them; planning on the CPU
    // stays what it was).
    if (device.is_cuda()) attach_flash_args(p, batch_, device);
    if (!device.is_cpu()) {
      if (p.rows.defined()) p.rows = p.rows.to(device);
      if (p.cols.defined()) p.cols = p.cols.to(device);
      if (p.mask.defined()) p.mask = p.mask.to(device);
      if (p.cell_masks.defined()) p.cell_masks = p.cell_masks.to(device);
    }
    attach_band_masks(p, batch_, device);
    plans_.push_back(std::move(p));
  }
}

int64_t PlanCache::plans_built() { return g_metadata_plans.load(); }
int64_t PlanCache::caches_built() { return g_caches.load(); }

void PlanCache::set_gathered_order(const at::Tensor& order, const at::Device& device) {
  CP_CHECK(order.defined() && order.dim() == 1 && order.scalar_type() == at::kLong, "PlanCache: gathered order ",
           order.defined() ? shape_str(order.sizes()) : "(undefined)", " must be int64 [N]");
  const at::Tensor o = order.to(at::kCPU);
  CP_CHECK(std::get<0>(at::sort(o)).equal(at::arange(o.numel(), o.options())), "PlanCache: gathered order of ",
           o.numel(), " tokens is not a permutation of [0, ", o.numel(), ")");
  const at::Tensor inv = at::empty_like(o).index_put_({o}, at::arange(o.numel(), o.options()));
  order_ = o.to(device);
  inverse_ = inv.to(device);
}

const BlockPlan& PlanCache::plan(int src) const {
  CP_CHECK(src >= 0 && src < world(), "PlanCache: no plan for rank ", src, " (W = ", world(), ")");
  return plans_[static_cast<size_t>(src)];
}

BlockPlan plan_block(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k) {
  CP_CHECK(q.pos.defined() && k.pos.defined() && q.pos.dim() == 2 && k.pos.dim() == 2 && q.pos.size(0) == k.pos.size(0),
           "plan_block: query pos ", q.pos.defined() ? shape_str(q.pos.sizes()) : "(undefined)", " and key pos ",
           k.pos.defined() ? shape_str(k.pos.sizes()) : "(undefined)", " must both be [B, N] with the same B");
  const int64_t b = q.pos.size(0), sq = q.pos.size(1), sk = k.pos.size(1);
  if (b == 0 || sq == 0 || sk == 0) return plan_block(build_mask(mask, q, k));
  const int64_t nq = tile_count(sq), nk = tile_count(sk);
  // Per batch row and cell, the rule on the tiles' bounds (min and max of each field per tile): `some`
  // false = no pair can be visible, `every` = every pair is. Queries [B, nq, 1], keys [B, 1, nk].
  const auto bounds = [](const TokenMeta& m, int64_t n, int64_t dim, bool keys) {
    RuleBounds r;
    const auto minmax = [&](const at::Tensor& t, at::Tensor& lo, at::Tensor& hi) {
      if (!t.defined()) return;
      const at::Tensor x = tiled(t, n);
      lo = x.amin(-1).unsqueeze(dim);
      hi = x.amax(-1).unsqueeze(dim);
    };
    minmax(m.pos, r.pos_lo, r.pos_hi);
    minmax(m.segment, r.segment_lo, r.segment_hi);
    minmax(m.doc, r.doc_lo, r.doc_hi);
    if (keys && m.valid.defined()) {
      const at::Tensor v = tiled(m.valid.to(at::kBool), n);
      r.valid_any = v.any(-1).unsqueeze(dim);
      r.valid_all = v.all(-1).unsqueeze(dim);
    }
    return r;
  };
  RuleBounds qb = bounds(q, nq, 2, false), kb = bounds(k, nk, 1, true);
  // The rule reads segments when both sides carry them, documents likewise (build_mask's convention).
  if (!k.segment.defined()) qb.segment_lo = qb.segment_hi = at::Tensor();
  if (!k.doc.defined()) qb.doc_lo = qb.doc_hi = at::Tensor();
  const Visibility cell = visibility(mask, qb, kb, true);
  // 0 empty, 2 full, 1 undecided: over the batch, a cell is empty / full only if it is in every row.
  const at::Tensor code = at::where(cell.some.any(0).logical_not(), 0, at::where(cell.every.all(0), 2, 1))
                              .to(at::kByte)
                              .to(at::kCPU)
                              .contiguous();
  const uint8_t* c = code.data_ptr<uint8_t>();
  std::vector<BlockKind> kind(static_cast<size_t>(nq * nk));
  std::vector<int64_t> qi, kj;
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t x = c[i * nk + j];
      kind[static_cast<size_t>(i * nk + j)] = x == 0 ? BlockKind::empty : x == 2 ? BlockKind::full : BlockKind::masked;
      if (x == 1) {
        qi.push_back(i);
        kj.push_back(j);
      }
    }
  }
  const auto n_masked = static_cast<int64_t>(qi.size());
  at::Tensor cells = at::empty({0, b, kBlockTile, kBlockTile}, q.pos.options().dtype(at::kBool));
  if (n_masked > 0) {
    // Every open cell's mask in one build_mask call: cell c's query tile and key tile become batch
    // rows c*B .. c*B + B-1 of a [n_masked * B, kBlockTile] metadata pair.
    const auto dev = q.pos.device();
    const at::Tensor iq = at::tensor(qi, at::TensorOptions().dtype(at::kLong)).to(dev);
    const at::Tensor ik = at::tensor(kj, at::TensorOptions().dtype(at::kLong)).to(dev);
    const auto cell_meta = [&](const TokenMeta& m, int64_t n, const at::Tensor& idx) {
      const auto g = [&](const at::Tensor& t) {
        return t.defined() ? tiled(t, n).index_select(1, idx).transpose(0, 1).reshape({-1, kBlockTile}) : t;
      };
      return TokenMeta{g(m.pos), g(m.segment), g(m.doc), g(m.valid)};
    };
    cells = build_mask(mask, cell_meta(q, nq, iq), cell_meta(k, nk, ik)).view({n_masked, b, kBlockTile, kBlockTile});
    // Positions past the block's edge (tiled() repeats the last token there) see nothing.
    const auto inside = [&](int64_t len, int64_t n, const at::Tensor& idx) {
      return (at::arange(n * kBlockTile, q.pos.options()) < len).view({n, kBlockTile}).index_select(0, idx);
    };
    cells.logical_and_(inside(sq, nq, iq).view({n_masked, 1, kBlockTile, 1}))
        .logical_and_(inside(sk, nk, ik).view({n_masked, 1, 1, kBlockTile}));
  }
  return plan_from_cells(b, sq, sk, std::move(kind), cells);
}

}  // namespace cpbench::kernels
