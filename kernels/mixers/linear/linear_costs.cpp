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

namespace {
int64_t halo_block(const LinearCpShape& s, const LinearCpTerms& t) {
  return s.chunks_per_rank * s.batch * (s.conv - 1) * t.conv_channels * s.elem_bytes;
}
}  // namespace

LinearCpBytes linear_cp_bytes(const LinearCpShape& s, const LinearCpTerms& t) {
  if (s.cp == 1) return {};
  if (t.state_passing) {
    const int64_t halo = halo_block(s, t), sent = (s.cp - 1) * (t.summary_block + halo), calls = halo > 0 ? 2 : 1;
    return {sent, sent, calls, calls};
  }
  const int64_t per_a2a = (s.cp - 1) * s.batch * (s.seq_len / s.cp) * (t.channels_in + t.channels_out) * s.elem_bytes;
  return {per_a2a, per_a2a, 2, 2};
}

int64_t linear_cp_extra_memory_bytes(const LinearCpShape& s, const LinearCpTerms& t) {
  if (s.cp == 1) return 0;
  if (t.state_passing) return s.cp * (t.summary_block + halo_block(s, t)) + t.incoming_state_block;
  return s.batch * s.seq_len * (t.channels_in + t.channels_out) * s.elem_bytes;
}

}  // namespace cpbench
