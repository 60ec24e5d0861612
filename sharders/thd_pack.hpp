#pragma once
// THD packing (internal to sharders/): how the thd shard lays [B, S] input rows out as one stream of
// padded document slots (Transformer Engine's THD), num_chunks streams back to back. The shard itself
// is Sharder::shard_packed (thd_pack.cpp), which returns the stream's boundaries in the cu_seqlens
// format (cu_seqlens.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "sharders/batch.hpp"
#include "sharders/sharder.hpp"
#include "sharders/stream.hpp"

namespace cpbench {

// The documents the stream holds, in stream order, with their row slots: `given` (from seq_lens; empty
// without) or, without seq_lens, one document per row whose real tokens end where the row's right
// padding begins (a run of padding_token_id, unless a padding_mask is given). With thd_trailing fold,
// a row's trailing positions join its last document's slot (a row without documents joins the previous
// row's last document of the same chunk). Throws naming `who` when padding_token_id also occurs as
// content.
[[nodiscard]] std::vector<DocSpan> thd_documents(std::vector<DocSpan> given, const Batch& in,
                                                 const SharderOptions& options, const std::string& who);

// Each document's stream slot: its row slot rounded up to `multiple` (a 2W-aligned slot keeps its tokens
// in place); with num_chunks > 1 each chunk's last document grows so every chunk stream is as long as
// the longest. Throws naming `who` when a chunk holds no document.
[[nodiscard]] std::vector<int64_t> thd_slots(const std::vector<DocSpan>& docs, int64_t multiple, int64_t num_chunks,
                                             int64_t rows_per_chunk, const std::string& who);

// Fills sl.stream_source (stream position -> flat input index, -1 = new pad slot) and, when tokens
// moved, sl.input_token_stream_positions, for documents `docs` at sl.global.cu_seqlens_padded of rows of
// S tokens. Returns the largest padded document.
int64_t place_documents(ShardLayout& sl, const std::vector<DocSpan>& docs, int64_t B, int64_t S);

}  // namespace cpbench
