#include "harness/planner/step/parallel.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench::plan::step {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Attention heads TP splits (MLA: every head carries its own K and V, kv heads = heads).
int64_t kv_heads_of(const ModelShape& m) { return m.attention.is_mla() ? m.heads : m.kv_heads; }

bool tp_fits(const ModelShape& m, const Cluster& c, int64_t tp) {
  if (tp > c.gpus_per_node) return false;
  if (m.attention_layers() > 0 && (m.heads % tp != 0 || kv_heads_of(m) % tp != 0)) return false;
  return true;
}

}  // namespace

void validate_degrees(const StepRequest& r) {
  const ModelShape& m = r.attention.model;
  const Cluster& c = r.attention.cluster;
  CP_CHECK_USAGE(r.gpus >= 1, "--gpus: expected a positive number of GPUs, got ", r.gpus);
  const auto check_pos = [](const char* flag, int64_t v) {
    CP_CHECK_USAGE(v >= 0, flag, ": expected a positive degree, got ", v);
  };
  check_pos("--tp", r.tp), check_pos("--pp", r.pp), check_pos("--vp", r.vp), check_pos("--dp", r.dp),
      check_pos("--ep", r.ep);
  CP_CHECK_USAGE(r.zero >= -1 && r.zero <= 3, "--zero: expected 0, 1, 2 or 3, got ", r.zero);
  CP_CHECK_USAGE(r.micro_batch >= 1, "--micro-batch: expected >= 1 sequences, got ", r.micro_batch);
  CP_CHECK_USAGE(r.global_batch >= 0, "--global-batch: expected >= 1 sequences, got ", r.global_batch);
  int64_t fixed = 1;
  for (int64_t d : {r.tp, r.pp, r.dp}) fixed *= std::max<int64_t>(d, 1);
  const bool one_cp = r.attention.cps.size() == 1;
  if (one_cp) fixed *= r.attention.cps[0];
  const bool all = r.tp > 0 && r.pp > 0 && r.dp > 0 && one_cp;
  const std::string given = "--tp " + std::to_string(std::max<int64_t>(r.tp, 1)) + " x --pp " +
                            std::to_string(std::max<int64_t>(r.pp, 1)) + " x --dp " +
                            std::to_string(std::max<int64_t>(r.dp, 1)) + " x --cp " +
                            (one_cp ? std::to_string(r.attention.cps[0]) : std::string("?")) + " = " +
                            std::to_string(fixed);
  CP_CHECK_USAGE(all ? fixed == r.gpus : r.gpus % fixed == 0, "--gpus ", r.gpus, ": the degrees ", given,
                 all ? ", not " : ", which does not divide ", r.gpus);
  if (r.tp > 0) {
    CP_CHECK_USAGE(r.tp <= c.gpus_per_node, "--tp ", r.tp, ": tensor parallelism across nodes (cluster '", c.name,
                   "' has ", c.gpus_per_node, " GPUs per node)");
    if (m.attention_layers() > 0)
      CP_CHECK_USAGE(m.heads % r.tp == 0 && kv_heads_of(m) % r.tp == 0, "--tp ", r.tp, ": model '", m.name, "' has ",
                     m.heads, " heads and ", kv_heads_of(m), " kv heads, not divisible by ", r.tp);
  }
  if (r.ep > 1) {
    CP_CHECK_USAGE(m.experts > 0, "--ep ", r.ep, ": model '", m.name, "' has no experts");
    CP_CHECK_USAGE(m.experts % r.ep == 0, "--ep ", r.ep, ": model '", m.name, "' has ", m.experts,
                   " experts, not divisible by ", r.ep);
    if (r.dp > 0 && one_cp)
      CP_CHECK_USAGE((r.dp * r.attention.cps[0]) % r.ep == 0, "--ep ", r.ep, ": does not divide --dp x --cp = ",
                     r.dp * r.attention.cps[0]);
  }
  const int64_t stages = std::max<int64_t>(r.pp, 1) * std::max<int64_t>(r.vp, 1);
  if (r.vp > 1) CP_CHECK_USAGE(r.pp > 1, "--vp ", r.vp, ": interleaving needs --pp > 1");
  CP_CHECK_USAGE(m.layers % stages == 0, r.vp > 1 ? "--vp " : "--pp ", r.vp > 1 ? r.vp : r.pp, ": model '", m.name,
                 "' has ", m.layers, " layers, not divisible by ", r.pp > 0 ? "--pp x --vp = " : "", stages);
}

std::vector<Parallel> enumerate_parallel(const StepRequest& r) {
  const ModelShape& m = r.attention.model;
  const Cluster& c = r.attention.cluster;
  std::vector<int64_t> cps = r.attention.cps;
  if (cps.empty())
    for (int64_t d : divisors(r.gpus))
      if (d == 1 || r.attention.seq_len % (2 * d) == 0) cps.push_back(d);
  const std::vector<int64_t> zeros = r.zero >= 0 ? std::vector<int64_t>{r.zero} : std::vector<int64_t>{1, 3};
  std::vector<Parallel> out;
  for (int64_t tp : divisors(r.gpus)) {
    if ((r.tp > 0 && tp != r.tp) || !tp_fits(m, c, tp)) continue;
    for (int64_t pp : divisors(r.gpus / tp)) {
      if (r.pp > 0 && pp != r.pp) continue;
      // --vp given: that; else interleaving is searched with pp > 1: every vp whose pp x vp divides the layers.
      std::vector<int64_t> vps;
      if (r.vp > 0) {
        if (m.layers % (pp * r.vp) == 0 && (r.vp == 1 || pp > 1)) vps.push_back(r.vp);
      } else {
        for (int64_t vp = 1; vp == 1 || (pp > 1 && pp * vp <= m.layers); ++vp)
          if (m.layers % (pp * vp) == 0) vps.push_back(vp);
      }
      for (int64_t vp : vps) {
        for (int64_t cp : cps) {
          if ((r.gpus / tp / pp) % cp != 0) continue;
          const int64_t dp = r.gpus / tp / pp / cp;
          if (r.dp > 0 && dp != r.dp) continue;
          std::vector<int64_t> eps{1};
          if (m.experts > 0) {
            eps.clear();
            for (int64_t ep : divisors(dp * cp))
              if (m.experts % ep == 0 && (r.ep <= 0 || ep == r.ep)) eps.push_back(ep);
          } else if (r.ep > 1) {
            eps.clear();
          }
          for (int64_t ep : eps)
            for (int64_t z : zeros) out.push_back(Parallel{tp, pp, vp, dp, cp, ep, z});
        }
      }
    }
  }
  return out;
}

int64_t span(const Parallel& p, Dim d) {
  switch (d) {
    case Dim::tp:
      return p.tp;
    case Dim::cp:
      return p.tp * p.cp;
    case Dim::dp:
      return p.tp * p.cp * p.dp;
    case Dim::ep:
      return p.tp * p.ep;
    case Dim::pp:
      return p.gpus();
  }
  return 1;
}

double group_bandwidth(const Cluster& c, int64_t s) { return s <= c.gpus_per_node ? c.intra_bandwidth : c.inter_bandwidth; }

}  // namespace cpbench::plan::step
