#pragma once
// The halo of a sliding window over a layout: how many of its keys each rank sends to each other rank
// when the layers' mask is sliding_window:N (sharders/mask.hpp: a query at stream position q sees keys
// q - N < k <= q). The windowed ring's cost input (kv_passing_costs.hpp windowed_ring_*), and its step
// list; internal to kernels/transports/.
//
// Counted on the layout's runs of consecutive positions (interval arithmetic), not token by token: the
// windowed ring picks its tokens one by one (windowed_ring.cpp) and checks the bytes it sent against
// what this count says, every call.
//
// Ring steps as the ring's: at step d (1 <= d < W) rank r sends to rank (r + d) mod W and receives
// from (r - d) mod W. Contiguous chunks of c tokens: steps 1 .. ceil((N-1)/c) (with the local block,
// 1 + ceil((N-1)/c) steps), min(N-1, (W-1) c) tokens from rank 0; head-tail: the neighbours' halos,
// steps 1 .. h and W-h .. W-1.
#include <cstdint>
#include <vector>

namespace cpbench::kernels {

struct WindowHalo {
  int64_t world = 1;
  // sent[j][d - 1]: tokens rank j sends at ring step d (to rank (j + d) mod W), 1 <= d < W.
  std::vector<std::vector<int64_t>> sent;
  // The steps at which some rank sends, ascending (the windowed ring's steps besides the local block).
  [[nodiscard]] std::vector<int> steps() const;
  // Tokens rank r sends / receives over all steps, and the steps at which it sends or receives.
  [[nodiscard]] int64_t sent_by(int rank) const;
  [[nodiscard]] int64_t received_by(int rank) const;
  [[nodiscard]] int64_t steps_of(int rank) const;
};

// `ranks[r]`: the stream positions rank r owns (sharders/layout.hpp GlobalLayout::ranks; together a
// permutation of [0, P)). `window` >= 1 (N). Throws naming the rank for positions that are not.
[[nodiscard]] WindowHalo window_halo(const std::vector<std::vector<int64_t>>& ranks, int64_t window);

}  // namespace cpbench::kernels
