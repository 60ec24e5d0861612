#include "harness/planner/step/embedding.hpp"

namespace cpbench::plan::step {

double embedding_params(const ModelShape& m) { return static_cast<double>(m.vocab) * static_cast<double>(m.hidden); }

double head_params(const ModelShape& m) { return m.tied_embeddings ? 0.0 : embedding_params(m); }

Component head_component(const CaseShape& s) {
  Component c;
  c.name = "embedding+head+loss";
  const double V = static_cast<double>(s.model.vocab) / static_cast<double>(s.par.tp);
  const double tokens = s.microbatches() * s.row_tokens();
  c.flops = tokens * 2 * V * static_cast<double>(s.model.hidden) * s.gemm_passes();
  const double loss_bytes = tokens * V * 4 * 3;
  c.bytes = loss_bytes;
  c.time_s = c.flops / s.bf16_gemm_rate() + loss_bytes / s.hbm();
  return c;
}

double logits_bytes(const CaseShape& s) {
  return s.row_tokens() * static_cast<double>(s.model.vocab) / static_cast<double>(s.par.tp) * s.k.logit_bytes;
}

}  // namespace cpbench::plan::step
