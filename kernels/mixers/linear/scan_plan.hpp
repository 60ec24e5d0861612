#pragma once
// What every linear-recurrence mixer (Mamba-2, Gated DeltaNet) shares under context parallelism, part 1:
// where a token's causal conv window and its recurrent state may reach (the scan plan), built once per
// step on the host, and the facts of a layout that state passing depends on (its chunks per rank).
//
// Mask semantics: the conv window and the state see only earlier REAL tokens of the same group: a group
// is one input row (segment), and under a document mask one document. Pad slots contribute nothing, so a
// thd stream's pad slots between documents and a row's trailing padding never reach a real token. The
// attention mask's window and visibility are attention's business: a recurrence is always causal.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sharders/layout.hpp"
#include "sharders/mask.hpp"

namespace cpbench {

// Where the conv and the recurrence may look, per row of a stream [R, L] (built once per step, shared by
// every layer of a mixer).
struct ScanPlan {
  at::Tensor group;     // int64 [R, L]: the state flows only between tokens of one group
  at::Tensor valid;     // [R, L] 1 real token, 0 pad slot (compute dtype)
  at::Tensor conv_src;  // int64 [R * L * K]: row of the zero-extended input [R * (L + 1), C] that tap k of
                        // token t reads (its (K-1-k)-th previous real token of its group, else a zero row)
  int64_t rows = 0, length = 0;
};
// From token metadata [R, L] in scan order (sharders/stream.hpp's fields, on any device).
// `document_reset`: the mask separates documents (MaskSpec::same_document()).
[[nodiscard]] ScanPlan make_scan_plan(const TokenMeta& meta, bool document_reset, int64_t conv, at::ScalarType dtype,
                                      const at::Device& device);

// Host-built tensors the linear mixers have moved to a device since the process started (plans, index
// maps): a step builds them once in its context; a layer builds none.
[[nodiscard]] int64_t linear_host_tensors_built();
// at::tensor(v) on `device`, counted by linear_host_tensors_built(). The linear mixers' one way to build one.
[[nodiscard]] at::Tensor linear_host_tensor(const std::vector<int64_t>& v, const at::Device& device);

// exp(v) where `keep` (bool, broadcast to v), exactly 0 elsewhere, with finite gradients everywhere.
[[nodiscard]] at::Tensor masked_exp(const at::Tensor& keep, const at::Tensor& v);

// Zero-extends dim 1 of `t` by `extra` slots at the end (differentiable): a row filled up to whole chunks.
[[nodiscard]] at::Tensor pad_sequence(const at::Tensor& t, int64_t extra);

// The dtype a recurrence accumulates in: float32 for bfloat16 / float16 activations (cumulative decays
// summed in bfloat16 lose everything), else the activations' own.
[[nodiscard]] at::ScalarType recurrence_dtype(at::ScalarType activations);

// The maximal runs of consecutive global positions in `positions` (one rank's positions in local order,
// GlobalLayout::ranks[r]), as [begin, end) index ranges into `positions`, in local order.
[[nodiscard]] std::vector<std::pair<int64_t, int64_t>> contiguous_runs(const std::vector<int64_t>& positions);
// max over ranks of contiguous_runs(g.ranks[r]).size(): the chunks per rank a state-passing exchange carries.
[[nodiscard]] int64_t max_runs_per_rank(const GlobalLayout& g);

// "" when state passing can run on `layout` at cp ranks, else the one-line reason, starting with `axis`
// (the scenario axis naming the strategy, e.g. "ssm_cp"). The test is what the strategy promises: the
// chunks a rank owns must not multiply with the sequence length (striped gives every token its own
// chunk), so the layout is computed at two lengths (S and 4S, one document for packed layouts) and its
// runs per rank compared (refused when they at least double).
[[nodiscard]] std::string state_passing_unsupported_reason(const Layout& layout, int64_t cp,
                                                           const std::string& axis);

}  // namespace cpbench
