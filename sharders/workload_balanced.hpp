#pragma once
// workload_balanced: the data-dependent, MagiAttention-style layout. The pieces tests and tools use;
// the layout itself is registered as "workload_balanced" (sharders/registry.cpp).
//
// The stream is the row in order (documents from position 0, then padding), right-padded to a
// multiple of chunk * W. It is cut into chunks of `chunk` positions; each chunk's area is its work
// under the actual mask (visible pairs between real tokens, sharders/mask_area.hpp). Every rank gets
// the same number of chunks; the assignment minimizes the largest per-rank area: greedy longest-first
// with a per-rank capacity, then pairwise swaps. Each rank's positions are in ascending order.
// Deterministic: ties go to the lower chunk index / rank.
//
// A batch (LayoutRequest::rows, two or more rows): every row is padded to the same multiple of
// chunk * W and the rows lie back to back in one stream (GlobalLayout::rows). Each row's chunks are
// dispatched on their own, W-way (every rank owns the same number of chunks of every row, so the map
// of each row is a workload_balanced map of that row), starting from the loads the earlier rows left,
// so the ranks' work is balanced over the batch too. The Sharder flattens such a batch into this one
// stream ([1, rows x P_row / W] per rank, like thd), which is how packed training feeds it.
#include <cstdint>
#include <vector>

namespace cpbench::workload_balanced {

inline constexpr int64_t kMaxDefaultChunk = 512;

// The chunk used when LayoutRequest.chunk_size is 0: min(512, max(1, seq_len / (8 W))) rounded down
// to a power of two, so every rank gets at least ~8 chunks to balance with, and padding stays below
// about 1/8 of the sequence.
[[nodiscard]] int64_t default_chunk_size(int64_t seq_len, int64_t cp);

// areas[i] = work of chunk i (>= 0); areas.size() must be a multiple of cp. Returns owner[i] in
// [0, cp), with exactly areas.size() / cp chunks per rank, minimizing (heuristically) the largest
// per-rank sum base[r] + (the areas r gets); base (empty = zeros, else [cp]) is the work the ranks
// already carry (the earlier rows of a batch). O(n log n) greedy plus swaps of O(n log(n/cp)) each.
[[nodiscard]] std::vector<int64_t> assign_chunks(const std::vector<int64_t>& areas, int64_t cp,
                                                 const std::vector<int64_t>& base = {});

}  // namespace cpbench::workload_balanced
