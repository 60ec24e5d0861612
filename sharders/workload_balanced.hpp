#pragma once
// workload_balanced: the data-dependent, MagiAttention-style layout. The pieces tests and tools use;
// the layout itself is registered as "workload_balanced" (sharders/registry.cpp).
//
// The stream is the row in order (documents from position 0, then padding), right-padded to a
// multiple of chunk * W. It is cut into chunks of `chunk` positions; each chunk's area is the number
// of visible (query, key) pairs of its queries under the actual mask (sharders/mask_area.hpp, the
// transports' semantics). Every rank gets the same number of chunks; the assignment minimizes the
// largest per-rank area: greedy longest-first with a per-rank capacity, then pairwise swaps. Each
// rank's positions are in ascending order. Deterministic: ties go to the lower chunk index / rank.
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
// per-rank sum. O(n log n) greedy plus swaps of O(n log(n/cp)) each.
[[nodiscard]] std::vector<int64_t> assign_chunks(const std::vector<int64_t>& areas, int64_t cp);

}  // namespace cpbench::workload_balanced
