#pragma once
// Deterministic test data addressed by global position: every rank builds the same global batch
// (any shard can be generated alone), and the per-token metadata the attention masks run on.
#include <ATen/ATen.h>

#include "harness/model/model.hpp"
#include "harness/runner/scenario.hpp"
#include "sharders/mask.hpp"
#include "sharders/batch.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

struct GlobalData {
  Batch batch;             // global [B, S]: input_ids or inputs_embeds, labels (next token within a
                           // document, -100 at document ends and padding), position_ids restarting per
                           // document, padding_mask, seq_lens, optional loss_mask / mRoPE positions
  at::Tensor doc_ids;      // [B, S] int64, document index within its row, -1 on padding
  TokenMeta reference_meta;  // [B, S] metadata of the unsharded batch (the single-rank reference)
  int64_t real_tokens = 0;   // non-padding tokens in the batch
};

// `stream` selects an independent batch (data-parallel replica index).
[[nodiscard]] GlobalData make_global_data(const BatchSpec& spec, const ModelConfig& model, at::ScalarType dtype,
                                          const at::Device& device, uint64_t stream = 0);

// Metadata of the padded global stream after `sharder.shard(data.batch)` returned `local`:
// [B, P] for unpacked layouts, [1, P] for thd. Index with local_token_global_indices to get any
// rank's tokens.
[[nodiscard]] TokenMeta stream_meta(const Sharder& sharder, const Batch& local, const GlobalData& data);

// For each input position (b, s) of the global batch, the CP rank that owns it after the shard
// (-1 for input slots the shard dropped). [B, S] int64 on CPU.
[[nodiscard]] at::Tensor input_owner(const Sharder& sharder, const GlobalData& data);

[[nodiscard]] at::ScalarType parse_dtype(const std::string& name);

}  // namespace cpbench
