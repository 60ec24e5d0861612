#pragma once
// Attention work under a mask, counted on the CPU from a layout's stream (sharders/stream.hpp): how
// many (query, key) pairs are visible. Used by the workload_balanced layout (chunk areas) and by the
// planner (per-rank FLOPs), so both count exactly what the CP transports compute and report as
// visible pairs. Visibility is the rule of sharders/mask.hpp, evaluated by Stream::key_range.
// Queries are not filtered: a padding query sees whatever valid keys the rule lets it see (the
// transports mask keys only), except under `document`, where unpacked padding belongs to no document.
// Every count is O(1) per query after O(P) preparation, so a whole layout costs O(P). Streams must
// be single-segment (one input row).
#include <cstdint>
#include <vector>

#include "sharders/layout.hpp"
#include "sharders/mask.hpp"
#include "sharders/stream.hpp"

namespace cpbench::mask_area {

// Visible pairs of the queries [begin, end) (a contiguous run of positions). O(end - begin).
[[nodiscard]] int64_t run_area(const Stream& stream, const MaskSpec& mask, int64_t begin, int64_t end);
// visible[p] = keys visible to query p, for every position, in one sequential pass. O(P).
[[nodiscard]] std::vector<int64_t> visible_per_position(const Stream& stream, const MaskSpec& mask);
// Visible pairs of each rank's queries (against every key). O(P) for the whole layout.
[[nodiscard]] std::vector<int64_t> rank_areas(const GlobalLayout& layout, const Stream& stream, const MaskSpec& mask);
// The same from visible_per_position (reused across layouts that share a stream).
[[nodiscard]] std::vector<int64_t> rank_areas(const GlobalLayout& layout, const std::vector<int64_t>& visible);
// Visible pairs of each rank's queries against its OWN keys only (the local, diagonal block a
// transport computes while the remote keys are in flight). O(P log(P/W)).
[[nodiscard]] std::vector<int64_t> local_block_areas(const GlobalLayout& layout, const Stream& stream,
                                                     const MaskSpec& mask);
// Segments of each rank's local order: maximal runs of consecutive stream positions of one document
// (padding counts as its own document). What a varlen kernel must split the rank's queries into:
// contiguous 1..W, head-tail 2 (per document it touches), striped one per token. O(P).
[[nodiscard]] std::vector<int64_t> rank_segments(const GlobalLayout& layout, const Stream& stream);
// Number of source ranks whose key block has at least one key visible to rank r's queries (blocks a
// block-granular kernel cannot skip), for every r. Causal and full: O(P + W^2); document and
// sliding_window: O(W * P). For the `blocks` kernel model of the planner, meant for small W.
[[nodiscard]] std::vector<int64_t> nonempty_blocks(const GlobalLayout& layout, const Stream& stream, const MaskSpec& mask);

}  // namespace cpbench::mask_area
