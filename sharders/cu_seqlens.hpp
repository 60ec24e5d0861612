#pragma once
// The thd cu_seqlens format, in one place: the shard writes it (Sharder::shard, thd) and the attention
// metadata reads it back (Sharder::attention_meta). cu_seqlens, cu_seqlens_padded and cu_seqlens_real
// all use it:
//   num_chunks == 1   int32 [D + 1]: the stream's document boundaries, from 0
//   num_chunks N > 1  int32 [N, D_max + 1]: row c holds the boundaries of chunk c's documents, from 0,
//                     right-padded with the sentinel (the seed's seq_lens_padding_value), as the seed
//                     stacks them
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cpbench {

// `cu`: the boundaries [D + 1] of the documents of all chunk streams back to back; doc_chunk[d]: the
// chunk of document d (non-decreasing, in [0, num_chunks)). On `device`.
[[nodiscard]] at::Tensor write_cu_seqlens(const std::vector<int64_t>& cu, const std::vector<int64_t>& doc_chunk,
                                          int64_t num_chunks, int64_t sentinel, const at::Device& device);

// The boundaries [D + 1] of the chunk streams back to back, from a tensor in the format above (any
// integer dtype and device). Throws cpbench::Error naming `who` when a chunked tensor is not
// [num_chunks, D + 1].
[[nodiscard]] std::vector<int64_t> read_cu_seqlens(const at::Tensor& t, int64_t num_chunks, int64_t sentinel,
                                                   const std::string& who);

}  // namespace cpbench
