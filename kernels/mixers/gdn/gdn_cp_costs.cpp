#include "kernels/mixers/gdn/gdn_cp_costs.hpp"

#include <algorithm>

#include "kernels/mixers/gdn/gdn_scan.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
constexpr StrategyNames<GdnCpStrategy, 2> kGdnStrategies{
    {{GdnCpStrategy::head_parallel, "head_parallel"}, {GdnCpStrategy::state_passing, "state_passing"}}};
}  // namespace

const char* to_string(GdnCpStrategy strategy) { return strategy_name(kGdnStrategies, strategy); }
std::optional<GdnCpStrategy> parse_gdn_cp_strategy(const std::string& name) {
  return parse_strategy(kGdnStrategies, name);
}
std::vector<std::string> known_gdn_cp_strategies() { return strategy_names(kGdnStrategies); }

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

int64_t pair_block(const GdnCpShape& s) {
  return s.chunks_per_rank * s.batch * s.value_heads * s.key_head_dim * (s.key_head_dim + s.value_head_dim) *
         s.state_elem_bytes;
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

GdnCpBytes gdn_head_parallel_bytes(const GdnCpShape& s) {
  check_gdn_shape(s);
  if (s.cp == 1) return {};
  return channel_parallel_bytes(s.batch, s.seq_len, s.cp, s.head_parallel_channels(),
                                s.value_heads / s.cp * s.value_head_dim, s.elem_bytes);
}

GdnCpBytes gdn_state_passing_bytes(const GdnCpShape& s) {
  check_gdn_shape(s);
  return state_passing_exchange_bytes(s.cp, pair_block(s), halo_block_bytes(s.chunks_per_rank, s.batch, s.conv, s.conv_channels(), s.elem_bytes));
}

GdnCpBytes gdn_cp_bytes(GdnCpStrategy strategy, const GdnCpShape& s) {
  return strategy == GdnCpStrategy::state_passing ? gdn_state_passing_bytes(s) : gdn_head_parallel_bytes(s);
}

int64_t gdn_cp_extra_memory_bytes(GdnCpStrategy strategy, const GdnCpShape& s) {
  check_gdn_shape(s);
  if (s.cp == 1) return 0;
  if (strategy == GdnCpStrategy::head_parallel)
    return channel_parallel_memory(s.batch, s.seq_len, s.head_parallel_channels(),
                                   s.value_heads / s.cp * s.value_head_dim, s.elem_bytes);
  return s.cp * (pair_block(s) + halo_block_bytes(s.chunks_per_rank, s.batch, s.conv, s.conv_channels(), s.elem_bytes)) +
         s.chunks_per_rank * s.batch * s.value_heads * s.key_head_dim * s.value_head_dim * s.state_elem_bytes;
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

GdnCpBytes gdn_state_passing_pair_bytes(const GdnCpShape& s) {
  check_gdn_shape(s);
  return state_passing_exchange_bytes(s.cp, pair_block(s), 0);
}

}  // namespace cpbench
