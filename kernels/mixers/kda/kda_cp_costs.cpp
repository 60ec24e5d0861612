#include "kernels/mixers/kda/kda_cp_costs.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

GdnCpShape kda_cp_shape(const KdaConfig& c, const LinearCpShape& shared) {
  return {shared, c.heads, c.heads, c.key_head_dim, c.value_head_dim};
}

int64_t kda_head_parallel_channels(const GdnCpShape& s) {
  CP_CHECK(s.value_heads % s.cp == 0, "kda_cp_costs: heads ", s.value_heads, " cannot be split over cp ", s.cp,
           " (head-parallel)");
  return s.value_heads / s.cp * (3 * s.key_head_dim + s.value_head_dim + 1);
}

LinearCpBytes kda_cp_bytes(GdnCpStrategy strategy, const GdnCpShape& s) {
  if (strategy == GdnCpStrategy::state_passing) return gdn_state_passing_bytes(s);
  (void)gdn_head_parallel_bytes(s);  // its shape checks
  if (s.cp == 1) return {};
  return channel_parallel_bytes(s.batch, s.seq_len, s.cp, kda_head_parallel_channels(s),
                                s.value_heads / s.cp * s.value_head_dim, s.elem_bytes);
}

int64_t kda_cp_extra_memory_bytes(GdnCpStrategy strategy, const GdnCpShape& s) {
  if (strategy == GdnCpStrategy::state_passing || s.cp == 1) return gdn_cp_extra_memory_bytes(strategy, s);
  return channel_parallel_memory(s.batch, s.seq_len, kda_head_parallel_channels(s),
                                 s.value_heads / s.cp * s.value_head_dim, s.elem_bytes);
}

}  // namespace cpbench
