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

LinearCpTerms kda_cp_terms(GdnCpStrategy strategy, const GdnCpShape& s) {
  LinearCpTerms t = gdn_cp_terms(strategy, s);  // its shape checks; state passing's blocks are GDN's
  if (strategy == GdnCpStrategy::head_parallel) t.channels_in = kda_head_parallel_channels(s);
  return t;
}

}  // namespace cpbench
