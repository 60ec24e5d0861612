#pragma once
// Attention work under a mask, counted on the CPU from a layout's stream (sharders/stream.hpp): how
// many (query, key) pairs between real tokens are visible (the work rule of sharders/mask.hpp,
// Stream::work_keys). Used by the workload_balanced layout (chunk areas) and by the planner (per-rank
// FLOPs); the CP transports report the same count (BlockPlan::work_pairs), so the runner's work metrics,
// the planner and the layouts agree on every layout. Padding queries (the layouts' pad slots, input
// padding) are no work, though the kernels compute them: BlockAreas below models the kernels and counts
// them. Every count is O(1) per query after O(P) preparation, so a whole layout costs O(P).
// run_area, visible_per_position and rank_areas take any stream; the block counts (local_block_areas,
// nonempty_blocks, BlockAreas) compare coordinates across ranks and need a single-segment stream.
#include <cstdint>
#include <vector>

#include "sharders/layout.hpp"
#include "sharders/mask.hpp"
#include "sharders/stream.hpp"

namespace cpbench::mask_area {

// Work (visible pairs between real tokens) of the queries [begin, end), a contiguous run. O(end - begin).
[[nodiscard]] int64_t run_area(const Stream& stream, const MaskSpec& mask, int64_t begin, int64_t end);
// visible[p] = Stream::work_keys(p): keys visible to p when p is a real token, else 0. O(P).
[[nodiscard]] std::vector<int64_t> visible_per_position(const Stream& stream, const MaskSpec& mask);
// Work of each rank's queries (against every key). O(P) for the whole layout.
[[nodiscard]] std::vector<int64_t> rank_areas(const GlobalLayout& layout, const Stream& stream, const MaskSpec& mask);
// The same from visible_per_position (reused across layouts that share a stream).
[[nodiscard]] std::vector<int64_t> rank_areas(const GlobalLayout& layout, const std::vector<int64_t>& visible);
// Work of each rank's queries against its OWN keys only (the local, diagonal block a
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

// The visible structure of one block: rank r's queries against rank j's keys (both in local order).
// pairs = visible (q, k) pairs; rows = queries that see at least one key of the block; keys = keys
// seen by at least one query. A kernel that slices the block to its active rows and keys runs:
//   dense     pairs == rows * keys: a fully visible rectangle (e.g. a head-tail half block), no mask;
//   triangle  rows == keys and pairs == rows (rows + 1) / 2: a causal diagonal (also the striped
//             block whose diagonal is shifted by one, once sliced to q[1:], k[:-1]);
//   masked    anything else (a tile-skipping kernel with a mask or varlen segments);
//   empty     nothing visible (skipped).
struct BlockArea {
  int64_t pairs = 0, rows = 0, keys = 0;
  enum class Shape { empty, dense, triangle, masked };
  [[nodiscard]] Shape shape() const {
    if (pairs == 0) return Shape::empty;
    if (pairs == rows * keys) return Shape::dense;
    if (rows == keys && 2 * pairs == rows * (rows + 1)) return Shape::triangle;
    return Shape::masked;
  }
};

// Block areas of every (rank r, source j) block a layout makes, rank by rank, as the kernels compute
// them: padding queries count (they see the keys the rule lets them see). Construction sorts
// each rank's valid key coordinates, O(P log(P/W)); of_rank(r) costs O(W * s + P) when the visible key
// ranges of r's queries, ordered by their lower end, also have non-decreasing upper ends (causal,
// full, sliding_window and document masks on unpacked streams), else O(W * s log s).
class BlockAreas {
 public:
  BlockAreas(const GlobalLayout& layout, const Stream& stream, const MaskSpec& mask);
  // [W]: rank r's queries against each rank's keys, in source order.
  [[nodiscard]] std::vector<BlockArea> of_rank(int64_t r) const;

 private:
  const GlobalLayout* layout_;
  const Stream* stream_;
  MaskSpec mask_;
  std::vector<std::vector<int64_t>> keys_;  // [W]: sorted coordinates of each rank's valid keys
};

}  // namespace cpbench::mask_area
