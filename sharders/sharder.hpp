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
// Before padding, as the seed: attention_mask ([B, S], non-zero = attend; or [B, 1, S, S], its
// diagonal) becomes padding_mask when none is given, and is dropped; labels absent with a loss_mask
// given -> the loss_mask becomes the labels. README "Differences from NeMo AutoModel" lists the rest.
// Token verbs run at copy speed: each (map, length, device) is built once per shard and cached;
// shard and gather write every output element once (slice copies, or one index_select / index_copy).
// Errors throw cpbench::Error naming the key, the shapes or lengths, the sharder, cp and rank.
// A Sharder is cheap; build one per rank per step. It is not thread-safe.
// Where the work lives: sharder.cpp (this front: validation, the seed's conversions, dispatch),
// shard_unpacked.cpp, shard_rows.cpp (a data-dependent map over a batch of rows), thd_pack.{hpp,cpp} (THD packing; it writes cu_seqlens in the format of
// cu_seqlens.hpp, which attention_meta.cpp reads back), token_verbs.cpp over token_map.hpp, pad_rule.hpp.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "sharders/batch.hpp"
#include "sharders/layout.hpp"
#include "sharders/mask.hpp"
#include "sharders/pad_rule.hpp"
#include "sharders/stream.hpp"
#include "sharders/token_map.hpp"

namespace cpbench {

struct SharderOptions {
  int64_t cp_size = 1;
  int64_t cp_rank = 0;
  int64_t padding_token_id = 0;
  // Passed to data-dependent layouts.
  MaskSpec mask;
  int64_t chunk_size = 0;
  // The seed's pad_multiple: the padded length (unpacked) or each document's stream slot (thd) is also a
  // multiple of cp * pad_multiple, so every rank's local length is a multiple of pad_multiple (>= 1).
  int64_t pad_multiple = 1;
  // The "no document" value in seq_lens / seq_lens_padded (the seed's seq_lens_padding_value).
  int64_t seq_lens_sentinel = kSeqLensSentinel;
  // thd: input-row positions after a row's last document (its trailing padding). fold (the seed's
  // behaviour): they join the last document's slot (a row with no document joins the previous row's
  // last document), so fully covered rows flatten without moving tokens. drop: they leave the stream
  // (gather with trim then needs a `fill` for them).
  enum class ThdTrailing { fold, drop };
  ThdTrailing thd_trailing = ThdTrailing::fold;
  // thd: the seed's num_chunks. The B rows split into num_chunks micro-batches of B / num_chunks rows
  // (B must divide), each packed into its own stream; every stream is padded (its last document's slot
  // grows) to the longest, so keys come back [num_chunks, T_c_local] and cu_seqlens* [num_chunks,
  // D_max + 1] right-padded with seq_lens_sentinel. The token map covers the chunk streams back to back.
  int64_t num_chunks = 1;
};

// What the token verbs need to repeat the batch's transform (NeMo's ShardLayout).
struct ShardLayout {
  GlobalLayout global;                        // the partition (every rank's map)
  std::optional<int64_t> original_seq_len;    // unpacked: S before padding
  int64_t padded_seq_len = 0;                 // P
  // thd, and workload_balanced over a batch of rows with documents: [B, S] rows before flattening.
  std::optional<std::vector<int64_t>> input_row_shape;
  int64_t num_chunks = 1;                     // thd: streams back to back, each padded_seq_len / num_chunks
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
  // A data-dependent unpacked layout over B >= 2 rows with documents: the rows flattened (shard_rows.cpp).
  Batch shard_rows(const Batch& batch);
  Batch shard_packed(const Batch& batch);
  // The documents seq_lens / seq_lens_padded describe, validated; empty without seq_lens.
  [[nodiscard]] std::vector<DocSpan> documents(const Batch& batch) const;
  // The caller's padding_mask as bytes [B * S], or empty.
  [[nodiscard]] static std::vector<uint8_t> input_padding(const Batch& batch);
  [[nodiscard]] std::vector<int64_t> rank_indices(int64_t padded_seq_len, int64_t rank) const;

  // Which coordinates a map reads (shard) or writes (gather): the padded stream, the original
  // length (unpacked), or the flat thd input rows [B * S].
  enum class Coords { padded, original, rows };
  [[nodiscard]] const TokenMap& shard_map(Coords from, int64_t P, const at::Device& device) const;
  [[nodiscard]] const ScatterMap& gather_map(Coords to, int64_t P, const at::Device& device) const;
  // out = t with its seq_dim mapped through m; holes get `fill` (required when there are holes).
  [[nodiscard]] at::Tensor apply(const TokenMap& m, const at::Tensor& t, int64_t seq_dim,
                                 const std::optional<at::Scalar>& fill, const char* what) const;
  [[nodiscard]] at::Tensor scatter(const ScatterMap& m, const std::vector<at::Tensor>& parts, int64_t seq_dim,
                                   const std::optional<at::Scalar>& fill, const char* what) const;
  // Position ids through a shard map: holes continue counting from the input's last position
  // (unpacked) or from their document's last row-slot position (thd).
  [[nodiscard]] at::Tensor shard_positions(const at::Tensor& pos, int64_t pos_dim, Coords from) const;
  // The batch as the seed converts it before sharding (attention_mask, labels from loss_mask).
  [[nodiscard]] Batch normalized(const Batch& batch) const;
  [[nodiscard]] int64_t unpacked_multiple() const;
  [[nodiscard]] int64_t document_multiple() const;

  std::shared_ptr<const Layout> layout_;
  SharderOptions options_;
  std::optional<ShardLayout> shard_layout_;
  // The maps above, keyed by (coords, length, device); cleared by shard().
  mutable TokenMapCache maps_;
  // Closed-form layouts before a shard: the last computed partition (one Layout::compute per length).
  mutable std::optional<GlobalLayout> closed_form_;
};

}  // namespace cpbench
