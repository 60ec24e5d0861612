#include "harness/planner/dsa_stages.hpp"

namespace cpbench::plan {

dsa_costs::DsaDims dsa_dims(const ModelShape& m) {
  dsa_costs::DsaDims d;
  d.mla = m.attention.mla;
  d.heads = m.heads;
  d.index_heads = m.attention.dsa.index_heads;
  d.index_head_dim = m.attention.dsa.index_head_dim;
  d.topk = m.attention.dsa.topk;
  return d;
}

bool has_dsa(const ModelShape& m) { return m.attention.is_mla() && m.attention.dsa.enabled(); }

int64_t dsa_indexer_layers(const ModelShape& m) {
  const auto& kinds = m.attention.dsa.indexer_kinds;
  if (kinds.empty()) return m.attention_layers();
  int64_t n = 0;
  for (auto k : kinds) n += k == DsaIndexerKind::full ? 1 : 0;
  return n;
}

DsaRankWork dsa_rank_work(const dsa_costs::DsaDims& d, const std::vector<std::vector<int64_t>>& ranks,
                          const std::vector<int64_t>& visible) {
  DsaRankWork w;
  for (const auto& r : ranks) {
    double idx = 0, sp = 0;
    for (int64_t q : r) {
      const double n = static_cast<double>(visible[static_cast<size_t>(q)]);
      idx += dsa_costs::indexer_flops(d, n);
      sp += dsa_costs::sparse_core_flops(d, n);
    }
    w.indexer.push_back(idx);
    w.sparse.push_back(sp);
  }
  return w;
}

}  // namespace cpbench::plan
