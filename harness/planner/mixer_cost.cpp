#include "harness/planner/mixer_cost.hpp"

#include <algorithm>

#include "harness/planner/format.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan {

namespace {

double pass_factor(const PlanRequest& r) { return r.pass == Pass::train ? 3.0 : 1.0; }

LayerCost layer_cost(const ModelShape& m, const Mixer& mixer, const std::string& strategy, int64_t rows, int64_t P,
                     int64_t W, int64_t e, int64_t chunks_per_rank) {
  LayerCostQuery q;
  q.hidden = m.hidden;
  q.rows = rows;
  q.seq_len = P;
  q.cp = W;
  q.elem_bytes = e;
  q.chunks_per_rank = chunks_per_rank;
  return mixer.layer_cost(m, strategy, q);
}

// The core's forward time on one rank: with its HBM traffic modelled (LayerCost::recurrence_hbm_bytes, the
// delta rule's passes), its FLOPs at the cluster's dense rate plus its passes at the HBM bandwidth (the
// kernels run one after another, so the two add); without it, its FLOPs at the cluster's ssm_flops (a prior
// that folds the memory-bound passes into one rate: Mamba's scan).
double core_time(const PlanRequest& r, const LayerCost& c) {
  const double hbm = r.cluster.kernel.hbm_bandwidth;
  if (c.recurrence_hbm_bytes > 0 && hbm > 0)
    return c.recurrence_flops / r.cluster.attention_flops + c.recurrence_hbm_bytes / hbm;
  return c.recurrence_flops / r.cluster.ssm_flops;
}

std::string flag_of(const std::string& axis) {
  std::string f = "--" + axis;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

}  // namespace

const Mixer* planned_mixer(const ModelShape& m) {
  const Mixer* found = nullptr;
  for (const Mixer* mixer : mixers_in(m.mixers)) {
    if (mixer->letter() == kDefaultMixer) continue;
    CP_CHECK_USAGE(found == nullptr, "model '", m.name, "': a model with both ", found ? found->description() : "",
                   " (", found ? std::string(1, found->letter()) : "", ") and ", mixer->description(), " (",
                   std::string(1, mixer->letter()), ") layers is not planned");
    found = mixer;
  }
  return found;
}

std::vector<std::string> planned_strategies(const Mixer& mixer, const PlanRequest& r) {
  const auto it = r.mixer_strategies.find(mixer.strategy_axis());
  const std::vector<std::string> known = mixer.strategies();
  if (it == r.mixer_strategies.end() || it->second.empty()) return known;
  std::vector<std::string> out;
  for (const auto& n : it->second) {
    CP_CHECK_USAGE(std::find(known.begin(), known.end(), n) != known.end(), flag_of(mixer.strategy_axis()),
                   ": unknown ", mixer.label(), " CP strategy '", n, "' (known: ", join(known), ")");
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

int64_t mixer_activation_bytes(const ModelShape& m, const Mixer& mixer, const std::string& strategy, int64_t batch,
                               int64_t P, int64_t W, int64_t e, int64_t chunks_per_rank) {
  return m.layers_of(mixer.letter()) * layer_cost(m, mixer, strategy, batch, P, W, e, chunks_per_rank).activation_bytes;
}

SsmCase mixer_case(const PlanRequest& r, const Mixer& mixer, int64_t e, const std::string& strategy, int64_t W,
                   int64_t P, int64_t chunks_per_rank) {
  const ModelShape& m = r.model;
  const double layers = static_cast<double>(m.layers_of(mixer.letter()));
  const LayerCost cost = layer_cost(m, mixer, strategy, 1, P, W, e, chunks_per_rank);
  SsmCase out;
  out.mixer = mixer.label();
  out.strategy = strategy;
  out.flops_per_rank = layers * (cost.recurrence_flops + cost.dense_flops);
  out.core_compute_s = layers * pass_factor(r) * core_time(r, cost);
  out.hbm_modelled = cost.recurrence_hbm_bytes > 0 && r.cluster.kernel.hbm_bandwidth > 0;
  out.compute_s = out.core_compute_s + layers * pass_factor(r) * cost.dense_flops / r.cluster.attention_flops;
  const bool train = r.pass == Pass::train;
  const double bandwidth = W <= r.cluster.gpus_per_node ? r.cluster.intra_bandwidth : r.cluster.inter_bandwidth;
  // The copies around the collectives run again for the backward's gradients (forward = backward, as the bytes).
  const double hbm = r.cluster.kernel.hbm_bandwidth;
  const double copy_s = hbm > 0 ? (train ? 2.0 : 1.0) * cost.copy_hbm_bytes / hbm : 0.0;
  const auto comm = [&](const LinearCpBytes& b) {
    const int64_t sent = train ? b.total() : b.forward;
    const int64_t calls = b.calls_forward + (train ? b.calls_backward : 0);
    return W > 1 ? layers * (static_cast<double>(sent) / bandwidth +
                             static_cast<double>(calls * (W - 1)) * r.cluster.latency_s + copy_s)
                 : 0.0;
  };
  out.bytes_per_rank = m.layers_of(mixer.letter()) * (train ? cost.bytes.total() : cost.bytes.forward);
  out.comm_s = comm(cost.bytes);
  out.core_comm_s = comm(cost.core_bytes);
  out.step_s = out.compute_s + out.comm_s;
  out.core_step_s = out.core_compute_s + out.core_comm_s;
  out.activation_bytes = mixer_activation_bytes(m, mixer, strategy, 1, P, W, e, chunks_per_rank);
  return out;
}

double mixer_unsharded_time(const PlanRequest& r) {
  const Mixer* mixer = planned_mixer(r.model);
  if (mixer == nullptr) return 0;
  const LayerCost cost =
      layer_cost(r.model, *mixer, mixer->strategies().front(), 1, r.seq_len, 1, dtype_size(r.dtype), 1);
  return static_cast<double>(r.model.layers_of(mixer->letter())) * pass_factor(r) *
         (core_time(r, cost) + cost.dense_flops / r.cluster.attention_flops);
}

}  // namespace cpbench::plan
