#include "kernels/mixers/gdn/gdn_cp_costs.hpp"

#include <algorithm>

#include "kernels/mixers/gdn/gdn_scan.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

void check_gdn_shape(const GdnCpShape& s) {
  CP_CHECK(s.batch >= 1 && s.seq_len >= 0 && s.cp >= 1 && s.key_heads >= 1 && s.value_heads >= 1 &&
               s.key_head_dim >= 1 && s.value_head_dim >= 1 && s.conv >= 1 && s.elem_bytes >= 1 &&
               s.state_elem_bytes >= 1 && s.chunks_per_rank >= 1,
           "gdn_cp_costs: a size is not positive: batch ", s.batch, " seq_len ", s.seq_len, " cp ", s.cp,
           " key_heads ", s.key_heads, " value_heads ", s.value_heads, " key_head_dim ", s.key_head_dim,
           " value_head_dim ", s.value_head_dim, " conv ", s.conv, " elem_bytes ", s.elem_bytes,
           " state_elem_bytes ", s.state_elem_bytes, " chunks_per_rank ", s.chunks_per_rank);
  CP_CHECK(s.seq_len % s.cp == 0, "gdn_cp_costs: seq_len ", s.seq_len, " is not a multiple of cp ", s.cp);
  CP_CHECK(s.value_heads % s.key_heads == 0, "gdn_cp_costs: key_heads ", s.key_heads, " do not divide value_heads ",
           s.value_heads);
}

}  // namespace

GdnCpShape gdn_cp_shape(const GdnConfig& c, const LinearCpShape& shared) {
  return {shared, c.key_heads, c.value_heads, c.key_head_dim, c.value_head_dim};
}

int64_t GdnCpShape::local_key_heads() const {
  CP_CHECK(value_heads % cp == 0 && (key_heads < cp ? cp % key_heads == 0 : key_heads % cp == 0),
           "gdn_cp_costs: value_heads ", value_heads, " / key_heads ", key_heads, " cannot be split over cp ", cp,
           " (head-parallel)");
  return key_heads >= cp ? key_heads / cp : 1;
}

int64_t GdnCpShape::head_parallel_channels() const {
  const int64_t hk = local_key_heads(), hv = value_heads / cp;
  return 2 * hk * key_head_dim + hv * value_head_dim + 2 * hv;
}

LinearCpTerms gdn_cp_terms(GdnCpStrategy strategy, const GdnCpShape& s) {
  check_gdn_shape(s);
  if (strategy == GdnCpStrategy::head_parallel)
    return {.channels_in = s.head_parallel_channels(), .channels_out = s.value_heads / s.cp * s.value_head_dim};
  // Per chunk and row: each value head's transition [dk, dk] and contribution [dk, dv].
  const int64_t rows_dk = s.chunks_per_rank * s.batch * s.value_heads * s.key_head_dim * s.state_elem_bytes;
  return {.state_passing = true, .summary_block = rows_dk * (s.key_head_dim + s.value_head_dim),
          .conv_channels = s.conv_channels(), .incoming_state_block = rows_dk * s.value_head_dim};
}

GdnCpBytes gdn_cp_bytes(GdnCpStrategy strategy, const GdnCpShape& s) {
  return linear_cp_bytes(s, gdn_cp_terms(strategy, s));
}

int64_t gdn_cp_extra_memory_bytes(GdnCpStrategy strategy, const GdnCpShape& s) {
  return linear_cp_extra_memory_bytes(s, gdn_cp_terms(strategy, s));
}

double delta_rule_cp_flops(GdnCpStrategy strategy, const GdnCpShape& s, int64_t chunk, bool channel_gate) {
  check_gdn_shape(s);
  const int64_t W = s.cp, S = s.seq_len, local = S / W, dk = s.key_head_dim, dv = s.value_head_dim;
  const double H = static_cast<double>(s.value_heads), tokens = static_cast<double>(local);
  if (W > 1 && strategy == GdnCpStrategy::head_parallel)
    return gdn_scan_flops(S, chunk, dk, dv, channel_gate) * static_cast<double>(S) * H / static_cast<double>(W);
  const double scan = gdn_scan_flops(local, chunk, dk, dv, channel_gate) * tokens * H;
  if (W == 1) return scan;
  const double compose = static_cast<double>(W * std::max<int64_t>(1, s.chunks_per_rank)) * 2.0 *
                         static_cast<double>(dk * dk * dv) * H;
  return scan + delta_rule_summary_flops(dk, dv) * tokens * H + compose;
}

}  // namespace cpbench
