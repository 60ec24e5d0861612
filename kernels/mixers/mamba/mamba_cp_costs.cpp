#include "kernels/mixers/mamba/mamba_cp_costs.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
constexpr StrategyNames<SsmCpStrategy, 2> kSsmStrategies{
    {{SsmCpStrategy::hidden_parallel, "hidden_parallel"}, {SsmCpStrategy::state_passing, "state_passing"}}};
}  // namespace

const char* to_string(SsmCpStrategy strategy) { return strategy_name(kSsmStrategies, strategy); }
std::optional<SsmCpStrategy> parse_ssm_cp_strategy(const std::string& name) {
  return parse_strategy(kSsmStrategies, name);
}
std::vector<std::string> known_ssm_cp_strategies() { return strategy_names(kSsmStrategies); }

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

int64_t summary_block(const SsmCpShape& s) {
  return s.chunks_per_rank * s.batch * s.heads * (s.head_dim * s.state + 1) * s.state_elem_bytes;
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

SsmCpBytes hidden_parallel_bytes(const SsmCpShape& s) {
  check_shape(s);
  if (s.cp == 1) return {};
  return channel_parallel_bytes(s.batch, s.seq_len, s.cp, s.hidden_parallel_channels(), s.heads / s.cp * s.head_dim,
                                s.elem_bytes);
}

SsmCpBytes state_passing_bytes(const SsmCpShape& s) {
  check_shape(s);
  return state_passing_exchange_bytes(s.cp, summary_block(s), halo_block_bytes(s.chunks_per_rank, s.batch, s.conv, s.conv_channels(), s.elem_bytes));
}

SsmCpBytes ssm_cp_bytes(SsmCpStrategy strategy, const SsmCpShape& s) {
  return strategy == SsmCpStrategy::state_passing ? state_passing_bytes(s) : hidden_parallel_bytes(s);
}

int64_t ssm_cp_extra_memory_bytes(SsmCpStrategy strategy, const SsmCpShape& s) {
  check_shape(s);
  if (s.cp == 1) return 0;
  if (strategy == SsmCpStrategy::hidden_parallel)
    return channel_parallel_memory(s.batch, s.seq_len, s.hidden_parallel_channels(), s.heads / s.cp * s.head_dim,
                                   s.elem_bytes);
  return s.cp * (summary_block(s) + halo_block_bytes(s.chunks_per_rank, s.batch, s.conv, s.conv_channels(), s.elem_bytes)) +
         s.chunks_per_rank * s.batch * s.heads * s.head_dim * s.state * s.state_elem_bytes;
}

}  // namespace cpbench
