#pragma once
// Block plans (internal to kernels/): how the block kernels evaluate one (query block, key block) pair
// of attention — which kBlockTile cells are empty, full or masked, which rows and columns to trim, the
// bands a fused kernel runs — built from a whole mask (plan_block), from a cell classification
// (plan_from_cells), or for a diagonal causal block without any mask (causal_block_plan). The plans of
// a step from token metadata are plan_cache.hpp's. Masks are bool [B, Sq, Sk], shared by all heads.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/attention/flash_args.hpp"

namespace cpbench::kernels {

// How one (query block, key block) pair, or one tile of it, is evaluated.
enum class BlockKind {
  empty,   // no visible pair: skipped entirely
  full,    // every pair visible: runs without a mask tensor
  masked,  // runs with the mask
};

// Edge of the square (query tile x key tile) cells the block kernels split a block into; the last
// tile of each side may be shorter. They skip empty cells, run full cells without a mask and masked
// cells with it, so their work follows the visible pairs to within one tile per mask edge.
inline constexpr int64_t kBlockTile = 64;
// Cells along a side of n tokens: ceil(n / kBlockTile).
[[nodiscard]] inline constexpr int64_t tile_count(int64_t n) { return (n + kBlockTile - 1) / kBlockTile; }

// Per-cell classification of a bool [B, Sq, Sk] block mask (summed over the batch: a cell is full
// when every batch row sees every pair of it).
struct TileMap {
  int64_t rows = 0, cols = 0;   // Sq, Sk of the mask it describes
  int64_t n_q = 0, n_k = 0;     // ceil(Sq / kBlockTile), ceil(Sk / kBlockTile)
  std::vector<BlockKind> kind;  // row-major [n_q, n_k]
  int64_t visible_pairs = 0;    // summed over the batch
  int64_t computed_pairs = 0;   // B x the area of the non-empty cells
};
// Counts every cell's visible pairs with one device -> host copy (the [n_q, n_k] counts), whatever
// the device.
[[nodiscard]] TileMap tile_map(const at::Tensor& mask);

// Bands of a masked block for kernels that take a mask tensor: consecutive query tiles whose non-empty
// cells span key tiles [c0, c1), merged while the merged band computes at most twice the area of its
// tiles' own spans, so the mask windows together stay within ~2x the non-empty cells' area instead of
// Sq x Sk. Query tiles with no non-empty cell belong to no band. `masked`: some cell of the band
// (inside its span) is masked or empty; false: the band is a rectangle of full cells and runs unmasked.
struct MaskBand {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;  // rows [r0, r1), cols [c0, c1) of the (trimmed) block
  bool masked = false;
  // attach_band_masks: the band's window of the mask, bool [B, r1 - r0, c1 - c0], and its rows that see
  // nothing in it, bool [B, r1 - r0], on the plan's device; undefined until attached (or unmasked).
  at::Tensor mask{}, empty_rows{};
  // The fused kernels' additive form of `mask`, [B, 1, r1 - r0, c1 - c0] in the kernel dtype (on CUDA
  // a slice of a key dim padded to 16), made by the first call that needs it and reused by every
  // later layer and the backward: one per band and dtype, never per head or per call. A cache, so
  // mutable; a step's plans are read by one thread.
  mutable at::Tensor bias{};
  // attach_flash_args (CUDA plans): the flash window call that evaluates exactly this band's mask,
  // when one does (flash_args.hpp); the CUDA flash-window route runs the band with it.
  std::optional<FlashWindow> window{};
};
[[nodiscard]] std::vector<MaskBand> mask_bands(const TileMap& tiles);

struct BlockPlan {
  BlockKind kind = BlockKind::empty;
  // Sub-block trimming: when only some query rows / key columns of the block can see anything
  // (head-tail blocks off the diagonal see exactly half a block) and dropping the others saves a
  // quarter of what the cells would compute, the maths runs on those rows and columns only.
  // Undefined = all. int64 indices into the block's Sq / Sk.
  at::Tensor rows, cols;
  at::Tensor mask;  // bool [B, |rows|, |cols|] when kind == masked and the plan was made
                    // from a whole mask (plan_block); undefined otherwise
  TileMap tiles;    // of the block's mask when kind == masked (empty otherwise)
  // plan_from_cells: the masks of the cells still masked, bool [n, B, kBlockTile, kBlockTile] (false
  // past the block's edge), and for every cell of `tiles` (row-major) its index in them, -1 for a
  // full or empty cell. The block's whole mask is never built from them: a bool [B, Sq, Sk] per block
  // grows with S^2 (an all-to-all block over a 128K-token sequence would be 16 GiB); kernels build
  // the mask of each window they evaluate with plan_mask().
  at::Tensor cell_masks;
  std::vector<int64_t> cell_index;
  // kind == masked: mask_bands(tiles), computed once with the plan (every layer's forward and backward
  // of the step reads them).
  std::vector<MaskBand> bands;
  // kind == masked and the mask is exactly the lower triangle of a square block (query i sees keys
  // j <= i: a diagonal causal block), so a fused kernel runs it with is_causal and no mask tensor.
  // Set by the transports' planner from token metadata (causal_block_plan); tiles describe the
  // triangle, mask may be undefined.
  bool causal = false;
  // attach_flash_args (CUDA plans), kind == masked and not causal: the varlen segments that evaluate
  // exactly the (trimmed) block's mask (documents), when some do; the CUDA flash-varlen route runs the
  // whole block in one call with them.
  std::optional<FlashVarlen> varlen{};
  int64_t visible_pairs = 0;   // summed over the batch, per head
  // The visible pairs whose query is a real token (the work rule, sharders/mask.hpp): what the FLOP
  // and MFU metrics count. Set by PlanCache from the queries' validity; -1 = not known (plans built
  // from a mask alone), read as visible_pairs.
  int64_t work_pairs = -1;
  int64_t computed_pairs = 0;  // what the kernel actually evaluates: B x (|rows| x |cols| when full,
                               // the non-empty cells' area when masked, 0 when empty)
};

// The mask of rows [r0, r0 + n) x cols [c0, c0 + w) of a masked plan (coordinates after its rows /
// cols trimming; r0 and c0 multiples of kBlockTile), bool [B, n, w] on `device`, B = the plan's batch:
// a slice of `mask` when the plan has one, else built from the cells (full cells true, empty false,
// masked ones theirs) or, for a causal plan without cells, from the triangle (key j <= query i).
[[nodiscard]] at::Tensor plan_mask(const BlockPlan& plan, int64_t batch, int64_t r0, int64_t n, int64_t c0, int64_t w,
                                   const at::Device& device);

// Builds every masked band's window (MaskBand::mask, empty_rows) on `device`, once, with the plan:
// the fused kernels then read them in every layer's forward and backward and build no mask inside a
// step (PlanCache does this for every plan it makes). No-op for unmasked and causal plans.
void attach_band_masks(BlockPlan& plan, int64_t batch, const at::Device& device);

// plan_mask() calls in this process so far: the test that a step's layers build no mask reads it.
[[nodiscard]] int64_t mask_windows_built();

// Classifies a bool [B, Sq, Sk] mask (a few small device -> host copies, none per tile).
[[nodiscard]] BlockPlan plan_block(const at::Tensor& mask);

// A plan from a cell classification made without the block's whole mask (the transports classify
// cells from token metadata: plan_cache.hpp). `kind` is row-major [n_q, n_k] over the
// kBlockTile cells of a [batch, rows, cols] block: its full and empty cells must be exact; its masked
// cells come with `cell_masks`, bool [n_masked, batch, kBlockTile, kBlockTile] in row-major cell
// order (false past the block's edge). Masked cells that turn out full or empty are reclassified.
// The result has no rows / cols trimming and no whole mask: the cells that stay masked keep their
// masks in cell_masks / cell_index (plan_mask builds any window from them). visible_pairs is exact.
// One device -> host copy (none on the CPU).
[[nodiscard]] BlockPlan plan_from_cells(int64_t batch, int64_t rows, int64_t cols, std::vector<BlockKind> kind,
                                        const at::Tensor& cell_masks);

// The plan of a diagonal causal block of n tokens (query i sees keys j <= i), built without a mask:
// kind masked, causal, tiles of the triangle, mask undefined (the tiled kernels build the windows they
// evaluate with plan_mask; the fused kernels run it with is_causal).
[[nodiscard]] BlockPlan causal_block_plan(int64_t batch, int64_t n);

// Rows / cols trimming of a plan, on dim 2 of [B, H, S, ...] tensors (lse [B, H, S] too): the plan's rows (cols) of t,
// and back: `part` scattered into n rows (cols), the others `fill` (0). Identity without trimming.
[[nodiscard]] at::Tensor trim_rows(const BlockPlan& plan, const at::Tensor& t);
[[nodiscard]] at::Tensor trim_cols(const BlockPlan& plan, const at::Tensor& t);
[[nodiscard]] at::Tensor untrim_rows(const BlockPlan& plan, const at::Tensor& part, int64_t n, double fill);
[[nodiscard]] at::Tensor untrim_cols(const BlockPlan& plan, const at::Tensor& part, int64_t n);

}  // namespace cpbench::kernels
