#pragma once
// Batch: the sequence-bearing tensors of one training step, as a sharder sees them.
//
// Contract (B = batch, S = sequence length, H = hidden, C = mRoPE channels):
//   input_ids      [B, S]  int64     exactly one of input_ids / inputs_embeds
//   inputs_embeds  [B, S, H] float
//   labels         [B, S]  int64     required, or promoted from loss_mask when absent; -100 = ignored
//   position_ids   [B, S] or mRoPE [C, B, S] int64 (sequence dim 2); synthesized when missing
//   loss_mask      [B, S]  any dtype (0 = excluded from the loss)
//   padding_mask   [B, S]  bool, true = padding
//   attention_mask [B, S] (non-zero = attend) or [B, 1, S, S] (its diagonal; bool true = attend, other
//                  dtypes additive: 0 = attend); converted to padding_mask by shard(), never returned
//   seq_lens       [B, D]  int64, document lengths per row, -1000 = no document (packed input)
//   seq_lens_padded[B, D]  int64, each document's slot in the row (>= seq_lens), same sentinel
//   extras         {name: tensor, seq_dim, fill}, e.g. teacher_logits [B, S, V] with seq_dim 1
// After a thd shard the rows are one flat stream: every [B, S] key becomes [1, T_local] (mRoPE
// [C, 1, T_local]) and cu_seqlens / cu_seqlens_padded / cu_seqlens_real / max_seqlen describe the
// global stream: cu_seqlens = cu_seqlens_padded = the documents' padded boundaries (what Transformer
// Engine consumes under CP, as the seed returns), cu_seqlens_real = their real-token boundaries.
#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>

namespace cpbench {

inline constexpr int64_t kSeqLensSentinel = -1000;
inline constexpr int64_t kIgnoreIndex = -100;

struct ExtraBuffer {
  at::Tensor tensor;
  int64_t seq_dim = 1;
  std::optional<at::Scalar> fill;  // pad value; default 0
};

struct Batch {
  std::optional<at::Tensor> input_ids;
  std::optional<at::Tensor> inputs_embeds;
  std::optional<at::Tensor> labels;
  std::optional<at::Tensor> position_ids;
  std::optional<at::Tensor> loss_mask;
  std::optional<at::Tensor> padding_mask;
  std::optional<at::Tensor> attention_mask;
  std::optional<at::Tensor> seq_lens;
  std::optional<at::Tensor> seq_lens_padded;
  std::map<std::string, ExtraBuffer> extras;
  // Set by a thd shard (global stream, int32 [D + 1] like Transformer Engine's).
  std::optional<at::Tensor> cu_seqlens;         // padded document boundaries (TE's cu_seqlens under CP)
  std::optional<at::Tensor> cu_seqlens_padded;  // the same padded boundaries (TE's cu_seqlens_*_padded)
  std::optional<at::Tensor> cu_seqlens_real;    // real-token boundaries (cumulative seq_lens)
  int64_t max_seqlen = 0;                       // largest padded document, tokens

  // The primary input (input_ids or inputs_embeds); throws if neither.
  [[nodiscard]] const at::Tensor& primary() const;
  [[nodiscard]] const char* primary_key() const;
};

}  // namespace cpbench
