#include "harness/planner/step/params.hpp"

#include <algorithm>

#include "harness/planner/mixer_cost.hpp"
#include "harness/planner/step/attention.hpp"
#include "harness/planner/step/embedding.hpp"
#include "harness/planner/step/mlp.hpp"
#include "harness/planner/step/moe.hpp"

namespace cpbench::plan::step {

namespace {

// Per-layer sums without embeddings: the mixers, dense MLPs and MoE layers (dense part / expert part).
struct LayerSums {
  double dense = 0, expert = 0, active = 0, largest = 0;
};

LayerSums layer_sums(const ModelShape& m) {
  LayerSums s;
  const double attn = attention_layer_params(m);
  s.dense += static_cast<double>(m.attention_layers()) * attn;
  double mixer = 0;
  if (const Mixer* x = planned_mixer(m)) {
    mixer = mixer_layer_params(m, x->letter());
    s.dense += static_cast<double>(m.layers_of(x->letter())) * mixer;
  }
  const double mlp = mlp_layer_params(m);
  s.dense += dense_mlp_layers(m) * mlp;
  const MoeParams moe = moe_layer_params(m);
  const double L = static_cast<double>(m.moe_layers);
  s.dense += L * (moe.shared + moe.router);
  s.expert += L * moe.routed;
  s.active = s.dense + L * (moe.active - moe.shared - moe.router);
  s.largest = std::max(attn, mixer) + std::max(m.moe_layers > 0 ? moe.routed + moe.shared + moe.router : 0.0, mlp);
  return s;
}

}  // namespace

ModelParams model_params(const ModelShape& m) {
  const LayerSums s = layer_sums(m);
  ModelParams p;
  p.embedding = embedding_params(m);
  p.expert = s.expert;
  p.total = s.dense + s.expert + p.embedding + head_params(m);
  p.active = s.active + p.embedding + head_params(m);
  return p;
}

GpuParams gpu_params(const CaseShape& s) {
  const LayerSums l = layer_sums(s.model);
  const double tp = static_cast<double>(s.par.tp), ep = static_cast<double>(s.par.ep);
  const double emb = embedding_params(s.model), head = head_params(s.model);
  const double ends = s.par.pp == 1 ? emb + head : std::max(emb, head);
  GpuParams g;
  g.dense = (s.stage(l.dense) + ends) / tp;
  g.expert = s.stage(l.expert) / ep;
  const MoeParams moe = moe_layer_params(s.model);
  g.largest_layer = (l.largest - moe.routed) / tp + moe.routed / ep;
  return g;
}

}  // namespace cpbench::plan::step
