#pragma once
// Flash-attention's own mask arguments for masked blocks (internal to kernels/): the window
// (window_size_left / right) a band is exactly, and the varlen segments (cu_seqlens_q / k) a block is
// exactly. Plain host code: everything here is decided, built and proven on the CPU; only the kernel
// call that reads it (flash_calls.cpp) needs CUDA.
//
// Flash's rule, as torch 2.11's at::_flash_attention_forward / _flash_attention_backward apply it
// (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp mha_fwd / mha_varlen_fwd /
// mha_bwd and set_params_fprop; mask.h apply_mask_local), for a call (or a varlen segment) of sq
// queries and sk keys with is_causal false and window sizes wl, wr (-1: none):
//   1. wl >= sk -> -1; wr >= sk -> -1;
//   2. both -1: no mask at all; exactly one -1: that side becomes sk;
//   3. query i sees key j iff  i + (sk - sq) - wl <= j <= i + (sk - sq) + wr   (bottom-right aligned).
// is_causal is wl = -1, wr = 0: j <= i + (sk - sq). A query that sees no key gets out 0 and lse +inf
// from the kernel; the callers turn that into out 0, lse -inf.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace cpbench::kernels {

struct BlockPlan;

// Per batch row and query row of a bool [B, n, w] mask, the first and last visible key.
struct RowSpans {
  int64_t batch = 0, rows = 0, cols = 0;
  std::vector<int64_t> lo, hi;  // [batch * rows], row-major; lo > hi: the row sees nothing
  bool intervals = true;        // every row's visible keys are one contiguous run [lo, hi]
  [[nodiscard]] bool empty(int64_t b, int64_t i) const { return lo[static_cast<size_t>(b * rows + i)] > hi[static_cast<size_t>(b * rows + i)]; }
};
// One device -> host copy of a few [B, n] reductions (none on the CPU).
[[nodiscard]] RowSpans row_spans(const at::Tensor& mask);

// A window call over one band: it reads query rows [q0, q1) and key columns [k0, k1) of the band
// (band coordinates) and passes window_size_left = left, window_size_right = right (-1: none),
// is_causal false. Rows of the band outside [q0, q1) see nothing.
struct FlashWindow {
  int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
  int64_t left = -1, right = -1;
  friend bool operator==(const FlashWindow&, const FlashWindow&) = default;
};

// The keys [lo, hi] (0-based in the call's sk keys) query i of sq sees under flash's rule above;
// lo > hi: none.
[[nodiscard]] std::pair<int64_t, int64_t> flash_window_row(int64_t i, int64_t sq, int64_t sk, int64_t left,
                                                           int64_t right);
// bool [n, w]: what a window call evaluates over a band of n rows and w columns (false outside the
// call's rows and columns).
[[nodiscard]] at::Tensor flash_window_mask(int64_t n, int64_t w, const FlashWindow& win);
// The window call that evaluates exactly the mask the spans describe (every batch row the same, each
// row one run, the row / key span trimmed to the rows and keys that see / are seen), checked row by
// row against flash_window_row; nullopt when no window over that span does.
[[nodiscard]] std::optional<FlashWindow> flash_window_for(const RowSpans& spans);
[[nodiscard]] std::optional<FlashWindow> flash_window_for(const at::Tensor& band_mask);  // bool [B, n, w]

// A varlen call over a whole (trimmed) block of B x n queries and B x m keys, flattened batch-major
// ([B * n] queries, [B * m] keys): segment s holds queries [cu_q[s], cu_q[s+1]) and keys
// [cu_k[s], cu_k[s+1]); a query sees keys of its own segment only, all of them (causal false) or
// bottom-right aligned (causal: local query t of lq sees local key u of lk iff u <= t + lk - lq).
// Segments cover every query and every key (queries that see nothing sit in segments of 0 keys, keys
// no one sees in segments of 0 queries), so the kernel writes every output row.
struct FlashVarlen {
  std::vector<int32_t> cu_q, cu_k;  // host, [segments + 1], from 0 to B*n / B*m
  int64_t max_q = 0, max_k = 0;     // the longest segment's queries / keys
  bool causal = false;
  int64_t pairs = 0;                // sum over segments of lq * lk: what the call evaluates at most
  // attach_flash_args: on the plan's device. cu_seqlens int32 [segments + 1]; empty_rows bool [B, n].
  at::Tensor cu_seqlens_q{}, cu_seqlens_k{}, empty_rows{};
};
// bool [B, n, m]: what a varlen call evaluates (the rule above).
[[nodiscard]] at::Tensor flash_varlen_mask(const FlashVarlen& v, int64_t batch, int64_t n, int64_t m);
// The varlen call that evaluates exactly the block mask the spans describe (documents: block-diagonal,
// causal within each or not; any batch rows), checked against the rule; nullopt when none does.
[[nodiscard]] std::optional<FlashVarlen> flash_varlen_for(const RowSpans& spans);
[[nodiscard]] std::optional<FlashVarlen> flash_varlen_for(const at::Tensor& block_mask);  // bool [B, n, m]

// Whether flash's varlen call runs `v` for q_heads query heads over kv_heads key/value heads. With
// max_q == 1 and GQA (q_heads > kv_heads), torch 2.11's mha_varlen_fwd (flash_api.cpp,
// seqlenq_ngroups_swapped) reshapes q [total_q, Hq, D] to [segments, Hkv, Hq / Hkv, D], which holds
// only when every segment has exactly one query: the 0-query segments this module adds make it throw.
// Such a block is refused here (block_route falls back to the window or memory-efficient route).
[[nodiscard]] bool varlen_call_runs(const FlashVarlen& v, int64_t q_heads, int64_t kv_heads);

// Decides, once with the plan and on the host, the flash arguments of a masked plan: each masked band's
// window (MaskBand::window) and the block's varlen segments (BlockPlan::varlen), from the plan's own
// band masks (its cells; plan_mask on the CPU). Their tensors go to `device`. No-op for unmasked and
// causal plans. PlanCache calls it for every plan it makes.
void attach_flash_args(BlockPlan& plan, int64_t batch, const at::Device& device);

}  // namespace cpbench::kernels

namespace cpbench::kernels {

// Flash's layouts, from cpbench's [B, H, S, D] (plain views and copies, proven on the CPU):
// dense calls take [B, S, H, D]; varlen calls [B*S, H, D] (batch-major) and return lse [H, B*S].
[[nodiscard]] at::Tensor to_flash_dense(const at::Tensor& t);                  // [B, H, S, D] -> [B, S, H, D] (a view)
[[nodiscard]] at::Tensor to_flash_varlen(const at::Tensor& t);                 // [B, H, S, D] -> [B*S, H, D]
[[nodiscard]] at::Tensor from_flash_varlen(const at::Tensor& t, int64_t batch);  // [B*S, H, D] -> [B, H, S, D]
[[nodiscard]] at::Tensor lse_from_flash_varlen(const at::Tensor& lse, int64_t batch);  // [H, B*S] -> [B, H, S]
[[nodiscard]] at::Tensor lse_to_flash_varlen(const at::Tensor& lse);           // [B, H, S] -> [H, B*S] (contiguous)

}  // namespace cpbench::kernels
