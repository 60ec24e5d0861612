#pragma once
// Sharder: the verbs of NeMo AutoModel's ContextParallelSharder, for one rank, over one Layout.
//
//   Sharder s(make_layout("load_balanced"), {.cp_size = 4, .cp_rank = 1});
//   Batch local = s.shard(global_batch);                    // pads, shards, records the ShardLayout
//   at::Tensor t_local = s.shard_token_tensor(t, 1, 0.0);   // any token-aligned tensor, same way
//   at::Tensor full = s.gather_token_tensor(parts, 1, true); // all ranks' shards -> caller's coords
//
// Pad rule (one rule for every key and every layout):
//   input_ids -> padding_token_id, labels -> -100, loss_mask -> 0, padding_mask -> true,
//   position_ids -> continue counting (thd: per document), inputs_embeds and other floating
//   tensors -> 0, extras -> their configured fill (default 0).
// Errors throw cpbench::Error naming the key, the shapes or lengths, the sharder, cp and rank.
// A Sharder is cheap; build one per rank per step. It is not thread-safe.
#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <vector>

#include "sharders/batch.hpp"
#include "sharders/layout.hpp"
#include "sharders/mask.hpp"
#include "sharders/stream.hpp"

namespace cpbench {

struct SharderOptions {
  int64_t cp_size = 1;
  int64_t cp_rank = 0;
  int64_t padding_token_id = 0;
  // Passed to data-dependent layouts.
  MaskSpec mask;
  int64_t chunk_size = 0;
};

// What the token verbs need to repeat the batch's transform (NeMo's ShardLayout).
struct ShardLayout {
  GlobalLayout global;                        // the partition (every rank's map)
  std::optional<int64_t> original_seq_len;    // unpacked: S before padding
  int64_t padded_seq_len = 0;                 // P
  std::optional<std::vector<int64_t>> input_row_shape;  // thd: [B, S] rows before flattening
  // thd when tokens moved: [B, S] int64, input (b, i) -> stream position, -1 = dropped pad slot.
  std::optional<at::Tensor> input_token_stream_positions;
  // thd: for each stream position, the flat input index b*S+i it came from, -1 = new pad slot.
  std::vector<int64_t> stream_source;
  // Metadata of the padded stream (sharders/stream.hpp): one per input row for unpacked layouts, the
  // one flat stream for thd.
  std::vector<Stream> streams;
  // thd: the documents of the input rows, and the caller's padding_mask [B * S] (empty: none given).
  std::vector<DocSpan> documents;
  std::vector<uint8_t> input_padding;
};

class Sharder {
 public:
  Sharder(std::shared_ptr<const Layout> layout, SharderOptions options);

  [[nodiscard]] const SharderOptions& options() const { return options_; }
  [[nodiscard]] bool has_shard_layout() const { return shard_layout_.has_value(); }
  // The layout of the last shard(); throws before the first.
  [[nodiscard]] const ShardLayout& shard_layout() const;

  // Pads every sequence-bearing key and returns this rank's local batch.
  [[nodiscard]] Batch shard(const Batch& batch);

  // int64 [P / cp]: the global stream positions rank `rank` (default: this rank) owns, in local
  // order. Closed form for unpacked layouts; from the last shard for data-dependent ones.
  [[nodiscard]] at::Tensor local_token_global_indices(int64_t padded_seq_len,
                                                      std::optional<int64_t> rank = std::nullopt) const;

  // Shards a token-aligned tensor exactly like the batch: already-padded length -> shard; original
  // length with `fill` -> pad then shard; thd input rows -> flatten (or scatter, which needs `fill`,
  // when tokens moved) then shard. Anything else raises naming both lengths.
  [[nodiscard]] at::Tensor shard_token_tensor(const at::Tensor& t, int64_t seq_dim = 1,
                                              std::optional<at::Scalar> fill = std::nullopt) const;

  // Single-process gather: `parts[r]` is rank r's shard. Concatenates in rank order and restores
  // the global order (restore_gathered); differentiable.
  [[nodiscard]] at::Tensor gather_token_tensor(const std::vector<at::Tensor>& parts, int64_t seq_dim = 1,
                                               bool trim = false,
                                               std::optional<at::Scalar> fill = std::nullopt) const;
  // `rank_order` = all ranks' shards concatenated in rank order along seq_dim (what an all-gather
  // returns). Reorders to the global stream; with `trim`, returns the caller's coordinates: sliced to
  // original_seq_len, or unflattened / un-moved to the thd input rows (`fill` for dropped slots).
  [[nodiscard]] at::Tensor restore_gathered(const at::Tensor& rank_order, int64_t seq_dim = 1, bool trim = false,
                                            std::optional<at::Scalar> fill = std::nullopt) const;

  // Mask metadata of this rank's tokens after shard() returned `local`: [rows, P/cp] (rows = B, or 1
  // for thd) positions, segments and documents of the shard's stream, and valid = !local.padding_mask
  // (for thd, rebuilt from the cu_seqlens / cu_seqlens_padded the shard returned). On the CPU.
  [[nodiscard]] TokenMeta attention_meta(const Batch& local) const;

  // "load_balanced (cp=4, rank 1)"
  [[nodiscard]] std::string who() const;

 private:
  Batch shard_unpacked(const Batch& batch);
  Batch shard_packed(const Batch& batch);
  // The documents seq_lens / seq_lens_padded describe, validated; empty without seq_lens.
  [[nodiscard]] std::vector<DocSpan> documents(const Batch& batch) const;
  // The caller's padding_mask as bytes [B * S], or empty.
  [[nodiscard]] static std::vector<uint8_t> input_padding(const Batch& batch);
  [[nodiscard]] std::vector<int64_t> rank_indices(int64_t padded_seq_len, int64_t rank) const;
  [[nodiscard]] at::Tensor select_local(const at::Tensor& t, int64_t seq_dim) const;

  std::shared_ptr<const Layout> layout_;
  SharderOptions options_;
  std::optional<ShardLayout> shard_layout_;
};

// Lower-level helpers shared with the harness (pad rules live here and nowhere else).
namespace pad_rule {
// Right-pads `t` on `seq_dim` by `amount` with `fill`.
[[nodiscard]] at::Tensor pad_seq(const at::Tensor& t, int64_t seq_dim, int64_t amount, const at::Scalar& fill);
// position ids: right-pad by continuing to count from the last position.
[[nodiscard]] at::Tensor pad_positions(const at::Tensor& pos, int64_t seq_dim, int64_t amount);
}  // namespace pad_rule

}  // namespace cpbench
