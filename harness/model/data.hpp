#pragma once
// Deterministic test data addressed by global position: every rank builds the same global batch
// (any shard can be generated alone), and the per-token metadata the attention masks run on.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/model.hpp"
#include "sharders/mask.hpp"
#include "sharders/batch.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

struct BatchSpec {
  int64_t batch_size = 1;
  int64_t seq_len = 128;                         // tokens per row (S)
  std::vector<std::vector<int64_t>> documents;   // per row; one list applies to every row; empty = one document filling the row
  int64_t padding_token_id = 0;
  std::string primary = "input_ids";             // input_ids | inputs_embeds
  bool loss_mask = false;                        // generate a loss_mask with some zeros
  bool mrope = false;                            // position_ids as [3, B, S]
  uint64_t seed = 7;
};


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

// For each input position (b, s) of the global batch, the CP rank that owns it after the shard
// (-1 for input slots the shard dropped). [B, S] int64 on CPU.
[[nodiscard]] at::Tensor input_owner(const Sharder& sharder, const GlobalData& data);

}  // namespace cpbench
