#include "kernels/mixers/linear/linear_costs.hpp"

namespace cpbench {

LinearCpShape linear_cp_shape(int64_t rows, int64_t seq_len, int64_t cp, int64_t conv, int64_t elem_bytes,
                              int64_t chunks_per_rank) {
  LinearCpShape s;
  s.batch = rows;
  s.seq_len = seq_len;
  s.cp = cp;
  s.conv = conv;
  s.elem_bytes = elem_bytes;
  s.state_elem_bytes = elem_bytes < 4 ? 4 : elem_bytes;
  s.chunks_per_rank = chunks_per_rank < 1 ? 1 : chunks_per_rank;
  return s;
}

LinearCpBytes channel_parallel_bytes(int64_t rows, int64_t seq_len, int64_t cp, int64_t channels_in,
                                     int64_t channels_out, int64_t elem_bytes) {
  if (cp == 1) return {};
  const int64_t per_a2a = (cp - 1) * rows * (seq_len / cp) * (channels_in + channels_out) * elem_bytes;
  return {per_a2a, per_a2a, 2, 2};
}

int64_t channel_parallel_memory(int64_t rows, int64_t seq_len, int64_t channels_in, int64_t channels_out,
                                int64_t elem_bytes) {
  return rows * seq_len * (channels_in + channels_out) * elem_bytes;
}

LinearCpBytes state_passing_exchange_bytes(int64_t cp, int64_t summary_block, int64_t halo_block) {
  if (cp == 1) return {};
  const int64_t sent = (cp - 1) * (summary_block + halo_block);
  const int64_t calls = halo_block > 0 ? 2 : 1;
  return {sent, sent, calls, calls};
}

int64_t halo_block_bytes(int64_t chunks_per_rank, int64_t rows, int64_t conv, int64_t conv_channels,
                         int64_t elem_bytes) {
  return chunks_per_rank * rows * (conv - 1) * conv_channels * elem_bytes;
}

}  // namespace cpbench
