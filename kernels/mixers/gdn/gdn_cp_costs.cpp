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

double delta_rule_pass_bytes(const GdnCpShape& s, int64_t chunk, bool channel_gate) {
  const double e = static_cast<double>(s.elem_bytes), dk = static_cast<double>(s.key_head_dim),
               dv = static_cast<double>(s.value_head_dim), Q = static_cast<double>(std::max<int64_t>(1, chunk));
  return e * (6 * dk + 6 * dv + Q + 2 * dk * dv / Q) + (channel_gate ? 5 * 4 * dk : 0.0);
}

double delta_rule_cp_hbm_bytes(GdnCpStrategy strategy, const GdnCpShape& s, int64_t chunk, bool channel_gate) {
  check_gdn_shape(s);
  const int64_t W = s.cp, S = s.seq_len;
  const double H = static_cast<double>(s.value_heads), pass = delta_rule_pass_bytes(s, chunk, channel_gate);
  if (W > 1 && strategy == GdnCpStrategy::head_parallel)
    return pass * static_cast<double>(S) * H / static_cast<double>(W);
  const double tokens = static_cast<double>(S / W) * H;
  if (W == 1) return pass * tokens;
  const double e = static_cast<double>(s.elem_bytes), dk = static_cast<double>(s.key_head_dim),
               dv = static_cast<double>(s.value_head_dim);
  const double summary = e * (2 * dk + dv) + (channel_gate ? 4 * dk : 0.0);
  return (pass + summary) * tokens;
}

double head_parallel_copy_bytes(int64_t forward_bytes, int64_t cp) {
  if (cp <= 1) return 0;
  return 2.0 * static_cast<double>(forward_bytes) * static_cast<double>(cp) / static_cast<double>(cp - 1);
}

LinearCoreTraffic delta_rule_core_traffic(GdnCpStrategy strategy, const GdnCpShape& s, int64_t chunk,
                                          bool channel_gate, const LinearCpBytes& bytes) {
  const double hbm = delta_rule_cp_hbm_bytes(strategy, s, chunk, channel_gate);
  if (strategy == GdnCpStrategy::head_parallel) return {hbm, head_parallel_copy_bytes(bytes.forward, s.cp), bytes};
  LinearCpTerms pairs = gdn_cp_terms(strategy, s);
  pairs.conv_channels = 0;  // the pairs' all-gather alone
  return {hbm, 0.0, linear_cp_bytes(s, pairs)};
}

}  // namespace cpbench
