#include "kernels/mixers/mamba/mamba_cp_costs.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

void check_shape(const SsmCpShape& s) {
  CP_CHECK(s.batch >= 1 && s.seq_len >= 0 && s.cp >= 1 && s.heads >= 1 && s.head_dim >= 1 && s.state >= 1 &&
               s.groups >= 1 && s.conv >= 1 && s.elem_bytes >= 1 && s.state_elem_bytes >= 1 && s.chunks_per_rank >= 1,
           "ssm_cp_costs: a size is not positive: batch ", s.batch, " seq_len ", s.seq_len, " cp ", s.cp, " heads ",
           s.heads, " head_dim ", s.head_dim, " state ", s.state, " groups ", s.groups, " conv ", s.conv,
           " elem_bytes ", s.elem_bytes, " state_elem_bytes ", s.state_elem_bytes, " chunks_per_rank ",
           s.chunks_per_rank);
  CP_CHECK(s.seq_len % s.cp == 0, "ssm_cp_costs: seq_len ", s.seq_len, " is not a multiple of cp ", s.cp);
  CP_CHECK(s.heads % s.groups == 0, "ssm_cp_costs: groups ", s.groups, " do not divide heads ", s.heads);
}

}  // namespace

SsmCpShape ssm_cp_shape(const SsmConfig& c, const LinearCpShape& shared) {
  return {shared, c.heads, c.head_dim, c.state, c.groups};
}

int64_t SsmCpShape::hidden_parallel_channels() const {
  CP_CHECK(heads % cp == 0 && (groups < cp ? cp % groups == 0 : groups % cp == 0), "ssm_cp_costs: heads ", heads,
           " / groups ", groups, " cannot be split over cp ", cp, " (hidden-parallel)");
  const int64_t h_l = heads / cp, g_l = groups >= cp ? groups / cp : 1;
  return h_l * head_dim + 2 * g_l * state + h_l;
}

LinearCpTerms ssm_cp_terms(SsmCpStrategy strategy, const SsmCpShape& s) {
  check_shape(s);
  if (strategy == SsmCpStrategy::hidden_parallel)
    return {.channels_in = s.hidden_parallel_channels(), .channels_out = s.heads / s.cp * s.head_dim};
  // Per chunk and row: each head's final state [P, N] and its cumulative decay.
  const int64_t states = s.chunks_per_rank * s.batch * s.heads * s.state_elem_bytes;
  return {.state_passing = true, .summary_block = states * (s.head_dim * s.state + 1),
          .conv_channels = s.conv_channels(), .incoming_state_block = states * s.head_dim * s.state};
}

}  // namespace cpbench
