#include "kernels/attention/flash_args.hpp"

#include <algorithm>
#include <limits>

#include "kernels/attention/block_plan.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

RowSpans row_spans(const at::Tensor& mask) {
  CP_CHECK(mask.dim() == 3 && mask.scalar_type() == at::kBool, "row_spans: mask must be bool [B, n, w]; got ",
           mask.scalar_type(), " ", shape_str(mask.sizes()));
  RowSpans s;
  s.batch = mask.size(0);
  s.rows = mask.size(1);
  s.cols = mask.size(2);
  const auto len = static_cast<size_t>(s.batch * s.rows);
  s.lo.assign(len, 0);
  s.hi.assign(len, -1);
  if (len == 0 || s.cols == 0) return s;
  // First and last visible key of each row (argmax returns the first maximum) and the row's count:
  // the row is one run exactly when last - first + 1 == count.
  const at::Tensor m = mask.to(at::kCPU).to(at::kByte);
  const at::Tensor cnt = m.sum(-1, false, at::kLong).flatten().contiguous();
  const at::Tensor first = m.argmax(-1).flatten().contiguous();
  const at::Tensor last = (s.cols - 1 - m.flip(-1).argmax(-1)).flatten().contiguous();
  const int64_t *c = cnt.data_ptr<int64_t>(), *f = first.data_ptr<int64_t>(), *l = last.data_ptr<int64_t>();
  for (size_t r = 0; r < len; ++r) {
    if (c[r] == 0) continue;
    s.lo[r] = f[r];
    s.hi[r] = l[r];
    if (l[r] - f[r] + 1 != c[r]) s.intervals = false;
  }
  return s;
}

std::pair<int64_t, int64_t> flash_window_row(int64_t i, int64_t sq, int64_t sk, int64_t left, int64_t right) {
  // mha_fwd / mha_bwd: a side of at least sk keys is no side.
  if (left >= sk) left = -1;
  if (right >= sk) right = -1;
  if (left < 0 && right < 0) return {0, sk - 1};  // neither causal nor local: no mask
  // set_params_fprop: the missing side of a local (or causal) call becomes sk.
  if (left < 0) left = sk;
  if (right < 0) right = sk;
  // mask.h apply_mask_local: col >= row + 1 + sk - sq + right or col < row + sk - sq - left is masked.
  const int64_t shift = sk - sq;
  return {std::max<int64_t>(0, i + shift - left), std::min(sk - 1, i + shift + right)};
}

at::Tensor flash_window_mask(int64_t n, int64_t w, const FlashWindow& win) {
  at::Tensor out = at::zeros({n, w}, at::kBool);
  const int64_t sq = win.q1 - win.q0, sk = win.k1 - win.k0;
  for (int64_t t = 0; t < sq; ++t) {
    const auto [a, b] = flash_window_row(t, sq, sk, win.left, win.right);
    if (a <= b) out[win.q0 + t].narrow(0, win.k0 + a, b - a + 1).fill_(true);
  }
  return out;
}

std::optional<FlashWindow> flash_window_for(const RowSpans& s) {
  if (!s.intervals || s.batch == 0 || s.rows == 0) return std::nullopt;
  const auto at = [&](int64_t b, int64_t i) { return static_cast<size_t>(b * s.rows + i); };
  // One window for the whole call: every batch row must be the same mask.
  for (int64_t b = 1; b < s.batch; ++b)
    for (int64_t i = 0; i < s.rows; ++i) {
      if (s.empty(b, i) != s.empty(0, i)) return std::nullopt;
      if (!s.empty(b, i) && (s.lo[at(b, i)] != s.lo[at(0, i)] || s.hi[at(b, i)] != s.hi[at(0, i)])) return std::nullopt;
    }
  // The call's span: the rows that see something and the keys some row sees. Trimming the rows keeps
  // the window sizes below sk where the mask allows it (flash drops a side of sk keys or more).
  int64_t q0 = -1, q1 = -1, k0 = std::numeric_limits<int64_t>::max(), k1 = -1;
  for (int64_t i = 0; i < s.rows; ++i) {
    if (s.empty(0, i)) continue;
    if (q0 < 0) q0 = i;
    q1 = i + 1;
    k0 = std::min(k0, s.lo[at(0, i)]);
    k1 = std::max(k1, s.hi[at(0, i)] + 1);
  }
  if (q0 < 0) return std::nullopt;
  const int64_t sq = q1 - q0, sk = k1 - k0, shift = sk - sq;
  // The smallest sizes that let every row see its keys: right from the rows' last keys, left from
  // their first keys (none when every row starts at the span's first key).
  int64_t right = std::numeric_limits<int64_t>::min(), left = std::numeric_limits<int64_t>::min();
  bool lower = false;
  for (int64_t i = q0; i < q1; ++i) {
    if (s.empty(0, i)) continue;
    const int64_t t = i - q0, lo = s.lo[at(0, i)] - k0, hi = s.hi[at(0, i)] - k0;
    right = std::max(right, hi - t - shift);
    left = std::max(left, t + shift - lo);
    lower = lower || lo > 0;
  }
  if (!lower) left = -1;
  else if (left < 0) return std::nullopt;  // flash would read a negative size as none
  const FlashWindow win{q0, q1, k0, k1, left, right};
  // Exact: every row of the span, flash's keys are the mask's.
  for (int64_t i = q0; i < q1; ++i) {
    const auto [a, b] = flash_window_row(i - q0, sq, sk, left, right);
    if ((a > b) != s.empty(0, i)) return std::nullopt;
    if (a <= b && (a + k0 != s.lo[at(0, i)] || b + k0 != s.hi[at(0, i)])) return std::nullopt;
  }
  return win;
}

std::optional<FlashWindow> flash_window_for(const at::Tensor& band_mask) { return flash_window_for(row_spans(band_mask)); }

namespace {
// The keys [lo, hi] (0-based in the segment) local query t of a varlen segment of lq queries and lk
// keys sees; lo > hi: none.
std::pair<int64_t, int64_t> varlen_row(int64_t t, int64_t lq, int64_t lk, bool causal) {
  if (lk == 0) return {0, -1};
  if (!causal || lq == 1) return {0, lk - 1};  // mha_varlen_fwd: max_q == 1 drops causal; lq == 1 is the same
  return {0, std::min(lk - 1, t + lk - lq)};
}

std::optional<FlashVarlen> varlen_candidate(const RowSpans& s, bool causal) {
  FlashVarlen v;
  v.causal = causal;
  v.cu_q = {0};
  v.cu_k = {0};
  const auto push = [&](int64_t q, int64_t k) {
    v.cu_q.push_back(static_cast<int32_t>(q));
    v.cu_k.push_back(static_cast<int32_t>(k));
  };
  const auto idx = [&](int64_t b, int64_t i) { return static_cast<size_t>(b * s.rows + i); };
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t qb = b * s.rows, kb = b * s.cols;
    int64_t k = 0;  // the next key of this batch row no segment holds yet
    for (int64_t i = 0; i < s.rows;) {
      int64_t j = i;
      if (s.empty(b, i)) {  // rows that see nothing: a segment of no keys
        while (j < s.rows && s.empty(b, j)) ++j;
        push(qb + j, kb + k);
        i = j;
        continue;
      }
      const int64_t lo = s.lo[idx(b, i)];
      if (lo < k) return std::nullopt;  // its keys start inside an earlier segment's
      if (lo > k) push(qb + i, kb + lo);  // keys no one here sees: a segment of no queries
      // The rows of one segment all start at its first key.
      int64_t ke = lo;
      while (j < s.rows && !s.empty(b, j) && s.lo[idx(b, j)] == lo) ke = std::max(ke, s.hi[idx(b, j++)] + 1);
      push(qb + j, kb + ke);
      k = ke;
      i = j;
    }
    if (k < s.cols) push(qb + s.rows, kb + s.cols);
  }
  for (size_t g = 0; g + 1 < v.cu_q.size(); ++g) {
    const int64_t lq = v.cu_q[g + 1] - v.cu_q[g], lk = v.cu_k[g + 1] - v.cu_k[g];
    v.max_q = std::max(v.max_q, lq);
    v.max_k = std::max(v.max_k, lk);
    v.pairs += lq * lk;
  }
  return v;
}
}  // namespace

at::Tensor flash_varlen_mask(const FlashVarlen& v, int64_t batch, int64_t n, int64_t m) {
  CP_CHECK(!v.cu_q.empty() && v.cu_q.size() == v.cu_k.size() && v.cu_q.back() == batch * n && v.cu_k.back() == batch * m,
           "flash_varlen_mask: segments of ", v.cu_q.empty() ? 0 : v.cu_q.back(), " queries / ",
           v.cu_k.empty() ? 0 : v.cu_k.back(), " keys for a block of ", batch, " x ", n, " x ", m);
  // Flattened [B*n, B*m]: segments may only ever pair a batch row with itself, so the block's mask is
  // the diagonal [n, m] blocks of the flattened one (a segment that crossed rows would show as a
  // visible pair off those blocks: flash_varlen_for's check rejects it).
  at::Tensor flat = at::zeros({batch * n, batch * m}, at::kBool);
  for (size_t g = 0; g + 1 < v.cu_q.size(); ++g) {
    const int64_t q0 = v.cu_q[g], lq = v.cu_q[g + 1] - q0, k0 = v.cu_k[g], lk = v.cu_k[g + 1] - k0;
    for (int64_t t = 0; t < lq; ++t) {
      const auto [a, b] = varlen_row(t, lq, lk, v.causal);
      if (a <= b) flat[q0 + t].narrow(0, k0 + a, b - a + 1).fill_(true);
    }
  }
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < batch; ++b) rows.push_back(flat.narrow(0, b * n, n).narrow(1, b * m, m));
  return at::stack(rows);
}

std::optional<FlashVarlen> flash_varlen_for(const RowSpans& s) {
  if (!s.intervals || s.batch == 0 || s.rows == 0) return std::nullopt;
  for (const bool causal : {true, false}) {
    std::optional<FlashVarlen> v = varlen_candidate(s, causal);
    if (!v) continue;
    // Exact: every query row's keys under the segments' rule are the spans'.
    bool same = true;
    for (size_t g = 0; same && g + 1 < v->cu_q.size(); ++g) {
      const int64_t q0 = v->cu_q[g], lq = v->cu_q[g + 1] - q0, k0 = v->cu_k[g], lk = v->cu_k[g + 1] - k0;
      for (int64_t t = 0; same && t < lq; ++t) {
        const int64_t b = (q0 + t) / s.rows, i = (q0 + t) % s.rows;
        const auto [a, e] = varlen_row(t, lq, lk, causal);
        if (a > e) {
          same = s.empty(b, i);
        } else {
          const int64_t lo = k0 + a - b * s.cols, hi = k0 + e - b * s.cols;
          same = !s.empty(b, i) && lo >= 0 && hi < s.cols && lo == s.lo[static_cast<size_t>(b * s.rows + i)] &&
                 hi == s.hi[static_cast<size_t>(b * s.rows + i)];
        }
      }
    }
    if (same) return v;
  }
  return std::nullopt;
}

std::optional<FlashVarlen> flash_varlen_for(const at::Tensor& block_mask) { return flash_varlen_for(row_spans(block_mask)); }

bool varlen_call_runs(const FlashVarlen& v, int64_t q_heads, int64_t kv_heads) {
  // The swap also needs no window (varlen causal with max_q == 1 is dropped to none, so always) and
  // head_dim % 8 == 0 (always, once fused_head_dim padded it): refused on max_q and heads alone.
  return !(v.max_q == 1 && q_heads > kv_heads);
}

void attach_flash_args(BlockPlan& plan, int64_t batch, const at::Device& device) {
  if (plan.kind != BlockKind::masked || plan.causal) return;
  // The block's rows' spans, assembled band by band (rows in no band see nothing): never the whole
  // [B, Sq, Sk] mask, only the bands' windows, on the host, once with the plan.
  RowSpans whole;
  whole.batch = batch;
  whole.rows = plan.tiles.rows;
  whole.cols = plan.tiles.cols;
  whole.lo.assign(static_cast<size_t>(batch * whole.rows), 0);
  whole.hi.assign(static_cast<size_t>(batch * whole.rows), -1);
  for (MaskBand& band : plan.bands) {
    const int64_t nr = band.r1 - band.r0, nc = band.c1 - band.c0;
    band.window.reset();
    RowSpans s;
    if (band.masked) {
      const at::Tensor m = band.mask.defined() && band.mask.device().is_cpu()
                               ? band.mask
                               : plan_mask(plan, batch, band.r0, nr, band.c0, nc, at::kCPU);
      s = row_spans(m);
      band.window = flash_window_for(s);
    } else {  // a rectangle of full cells: every row sees the whole span
      s.batch = batch;
      s.rows = nr;
      s.cols = nc;
      s.lo.assign(static_cast<size_t>(batch * nr), 0);
      s.hi.assign(static_cast<size_t>(batch * nr), nc - 1);
    }
    whole.intervals = whole.intervals && s.intervals;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < nr; ++i) {
        if (s.empty(b, i)) continue;
        const auto to = static_cast<size_t>(b * whole.rows + band.r0 + i), from = static_cast<size_t>(b * nr + i);
        whole.lo[to] = s.lo[from] + band.c0;
        whole.hi[to] = s.hi[from] + band.c0;
      }
  }
  plan.varlen = flash_varlen_for(whole);
  if (plan.varlen) {
    FlashVarlen& v = *plan.varlen;
    const auto i32 = at::TensorOptions().dtype(at::kInt);
    v.cu_seqlens_q = at::tensor(v.cu_q, i32).to(device);
    v.cu_seqlens_k = at::tensor(v.cu_k, i32).to(device);
    at::Tensor none = at::zeros({batch, whole.rows}, at::kBool);
    auto a = none.accessor<bool, 2>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < whole.rows; ++i) a[b][i] = whole.empty(b, i);
    v.empty_rows = none.to(device);
  }
}

}  // namespace cpbench::kernels

namespace cpbench::kernels {

at::Tensor to_flash_dense(const at::Tensor& t) { return t.transpose(1, 2); }
at::Tensor to_flash_varlen(const at::Tensor& t) {
  return t.transpose(1, 2).reshape({t.size(0) * t.size(2), t.size(1), t.size(3)});
}
at::Tensor from_flash_varlen(const at::Tensor& t, int64_t batch) {
  return t.view({batch, t.size(0) / batch, t.size(1), t.size(2)}).transpose(1, 2);
}
at::Tensor lse_from_flash_varlen(const at::Tensor& lse, int64_t batch) {
  return lse.view({lse.size(0), batch, lse.size(1) / batch}).permute({1, 0, 2});
}
at::Tensor lse_to_flash_varlen(const at::Tensor& lse) {
  return lse.permute({1, 0, 2}).reshape({lse.size(1), lse.size(0) * lse.size(2)}).contiguous();
}

}  // namespace cpbench::kernels
