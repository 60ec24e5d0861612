#include "harness/model/ssm_cp_costs.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench {

const char* to_string(SsmCpStrategy strategy) {
  switch (strategy) {
    case SsmCpStrategy::hidden_parallel:
      return "hidden_parallel";
    case SsmCpStrategy::state_passing:
      return "state_passing";
  }
  return "?";
}

std::optional<SsmCpStrategy> parse_ssm_cp_strategy(const std::string& name) {
  for (auto s : {SsmCpStrategy::hidden_parallel, SsmCpStrategy::state_passing})
    if (name == to_string(s)) return s;
  return std::nullopt;
}

std::vector<std::string> known_ssm_cp_strategies() {
  return {to_string(SsmCpStrategy::hidden_parallel), to_string(SsmCpStrategy::state_passing)};
}

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
int64_t halo_block(const SsmCpShape& s) {
  return s.chunks_per_rank * s.batch * (s.conv - 1) * s.conv_channels() * s.elem_bytes;
}

}  // namespace

int64_t SsmCpShape::hidden_parallel_channels() const {
  CP_CHECK(heads % cp == 0 && (groups < cp ? cp % groups == 0 : groups % cp == 0), "ssm_cp_costs: heads ", heads,
           " / groups ", groups, " cannot be split over cp ", cp, " (hidden-parallel)");
  const int64_t h_l = heads / cp, g_l = groups >= cp ? groups / cp : 1;
  return h_l * head_dim + 2 * g_l * state + h_l;
}

SsmCpBytes hidden_parallel_bytes(const SsmCpShape& s) {
  check_shape(s);
  if (s.cp == 1) return {};
  const int64_t per_a2a = (s.cp - 1) * s.batch * (s.seq_len / s.cp) *
                          (s.hidden_parallel_channels() + s.heads / s.cp * s.head_dim) * s.elem_bytes;
  return {per_a2a, per_a2a, 2, 2};
}

SsmCpBytes state_passing_bytes(const SsmCpShape& s) {
  check_shape(s);
  if (s.cp == 1) return {};
  const int64_t sent = (s.cp - 1) * (summary_block(s) + halo_block(s));
  const int64_t calls = s.conv > 1 ? 2 : 1;
  return {sent, sent, calls, calls};
}

SsmCpBytes ssm_cp_bytes(SsmCpStrategy strategy, const SsmCpShape& s) {
  return strategy == SsmCpStrategy::state_passing ? state_passing_bytes(s) : hidden_parallel_bytes(s);
}

int64_t ssm_cp_extra_memory_bytes(SsmCpStrategy strategy, const SsmCpShape& s) {
  check_shape(s);
  if (s.cp == 1) return 0;
  if (strategy == SsmCpStrategy::hidden_parallel)
    return s.batch * s.seq_len * (s.hidden_parallel_channels() + s.heads / s.cp * s.head_dim) * s.elem_bytes;
  return s.cp * (summary_block(s) + halo_block(s)) +
         s.chunks_per_rank * s.batch * s.heads * s.head_dim * s.state * s.state_elem_bytes;
}

std::vector<std::pair<int64_t, int64_t>> contiguous_runs(const std::vector<int64_t>& positions) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  const auto n = static_cast<int64_t>(positions.size());
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || positions[static_cast<size_t>(i)] != positions[static_cast<size_t>(i - 1)] + 1)
      runs.emplace_back(i, i + 1);
    else
      runs.back().second = i + 1;
  }
  return runs;
}

int64_t max_runs_per_rank(const GlobalLayout& g) {
  int64_t most = 0;
  for (const auto& r : g.ranks) most = std::max<int64_t>(most, static_cast<int64_t>(contiguous_runs(r).size()));
  return most;
}

std::string state_passing_unsupported_reason(const Layout& layout, int64_t cp) {
  if (cp <= 1) return "";
  // Lengths that every layout pads to without rounding (multiples of 2W and of workload_balanced's
  // default chunk x W at both sizes), so the comparison sees the layout, not its padding.
  const int64_t s1 = 256 * cp, s2 = 4 * s1;
  const auto runs = [&](int64_t len) {
    LayoutRequest req;
    req.cp = cp;
    req.seq_len = len;
    if (layout.packed()) req.doc_lens = {len};
    return max_runs_per_rank(layout.compute(req));
  };
  // Striped-like layouts own a number of chunks proportional to S (4x here); chunked ones a number
  // that does not depend on S, up to the balancing of data-dependent layouts (a chunk more or less).
  const int64_t a = runs(s1), b = runs(s2);
  if (b < 2 * a) return "";
  return detail::concat("ssm_cp state_passing: layout ", layout.name(), " gives a rank ", a, " separate chunks of a ",
                        s1, "-token row at cp ", cp, " and ", b, " at ", s2,
                        " tokens; state passing exchanges one state per chunk and needs ranks that own a fixed "
                        "number of contiguous chunks (contiguous, load_balanced, thd, sdpa_wrap, workload_balanced)");
}

}  // namespace cpbench
