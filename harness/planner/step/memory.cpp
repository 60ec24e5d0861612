#include "harness/planner/step/memory.hpp"

#include "harness/planner/dsa_stages.hpp"

#include <algorithm>

#include "harness/planner/step/embedding.hpp"
#include "harness/planner/step/mlp.hpp"
#include "harness/planner/step/moe.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench::plan::step {

namespace {

// One micro-batch's saved activations on a GPU's stage under `rc`.
double stage_activations(const CaseShape& s, const std::vector<LayerKind>& kinds, const std::vector<KindPrice>& prices,
                         Recompute rc) {
  const ModelShape& m = s.model;
  const double T = s.sp_tokens();
  double per_token = dense_mlp_layers(m) * mlp_activation_per_token(m, rc) +
                     static_cast<double>(m.moe_layers) * moe_activation_per_token(m, rc);
  double rows = 0;  // the linear mixers' bytes per row
  for (size_t i = 0; i < kinds.size(); ++i) {
    const double L = static_cast<double>(kinds[i].layers);
    if (kinds[i].mixer == kDefaultMixer)
      per_token += L * attention_activation_per_token(m, rc);
    else if (rc == Recompute::full)
      per_token += L * 2.0 * static_cast<double>(m.hidden);
    else
      rows += L * prices[i].saved_bytes;
  }
  return s.stage(per_token * T + rows * static_cast<double>(s.train.micro_batch));
}

// The largest layer's whole activations (what full recompute brings back at once).
double one_layer(const CaseShape& s, const std::vector<LayerKind>& kinds, const std::vector<KindPrice>& prices) {
  const ModelShape& m = s.model;
  const double ffn = std::max(m.moe_layers > 0 ? moe_activation_per_token(m, Recompute::none) : 0.0,
                              m.mlp_layers > m.moe_layers ? mlp_activation_per_token(m, Recompute::none) : 0.0);
  double mixer = 0;
  for (size_t i = 0; i < kinds.size(); ++i)
    mixer = std::max(mixer, kinds[i].mixer == kDefaultMixer
                                ? attention_activation_per_token(m, Recompute::none) * s.sp_tokens()
                                : prices[i].saved_bytes * static_cast<double>(s.train.micro_batch));
  return mixer + ffn * s.sp_tokens();
}

double cp_buffers(const CaseShape& s, const std::vector<LayerKind>& kinds, const std::vector<KindPrice>& prices) {
  double out = 0;
  const ModelShape& m = s.model;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i].mixer != kDefaultMixer || s.par.cp <= 1) continue;
    if (kinds[i].kind == "dsa") {
      // DSA on allgather: the gathered key side (latent, rope key, index key) each layer keeps for its
      // backward, and its fp32 gradient buffer: the sizes of dsa_costs' wire.
      const dsa_costs::DsaDims d = dsa_dims(m);
      const int64_t layers = std::max<int64_t>(
          1, s.train.recompute == Recompute::full ? 1 : static_cast<int64_t>(s.stage(static_cast<double>(kinds[i].layers))));
      const int64_t local = s.seq_len / s.par.cp;
      out += static_cast<double>(layers * dsa_costs::forward_bytes(d, s.par.cp, s.train.micro_batch, local, 2)) +
             static_cast<double>(dsa_costs::backward_bytes(d, s.par.cp, s.train.micro_batch, local, 2)) *
                 static_cast<double>(s.par.cp) / static_cast<double>(s.par.cp - 1);
      continue;
    }
    const auto t = make_transport(prices[i].transport, TransportOptions{prices[i].ulysses});
    ActivationShape a;
    a.cp = s.par.cp;
    a.layers = s.train.recompute == Recompute::full ? 1 : static_cast<int64_t>(s.stage(static_cast<double>(kinds[i].layers)));
    a.layers = std::max<int64_t>(a.layers, 1);
    a.batch = s.train.micro_batch;
    a.q_heads = m.heads / s.par.tp;
    a.kv_heads = std::max<int64_t>(1, (m.attention.is_mla() ? m.heads : m.kv_heads) / s.par.tp);
    a.local_tokens = s.seq_len / s.par.cp;
    a.head_dim = m.attention.is_mla() ? (m.attention.mla.qk_head_dim() + m.attention.mla.v_head_dim) / 2 : m.head_dim;
    a.element_size = 2;
    out += static_cast<double>(t->peak_activation_bytes(a));
  }
  return out;
}

}  // namespace

double in_flight(const CaseShape& s) {
  const double pp = static_cast<double>(s.par.pp), vp = static_cast<double>(s.par.vp);
  if (s.par.pp <= 1) return 1;
  const double f = std::min(s.microbatches(), pp);
  return s.par.vp > 1 ? f * (1 + (pp - 1) / (pp * vp)) : f;
}

Memory gpu_memory(const CaseShape& s, const GpuParams& p, const std::vector<LayerKind>& kinds,
                  const std::vector<KindPrice>& prices) {
  const StepConstants& k = s.k;
  const double n = static_cast<double>(s.par.shard_group());
  const double ne = std::max(1.0, n / static_cast<double>(s.par.ep));
  const auto sharded = [&](bool shard) { return shard ? p.dense / n + p.expert / ne : p.total(); };
  Memory mem;
  mem.params = k.param_bytes * sharded(s.par.zero >= 3);
  mem.grads = k.grad_bytes * sharded(s.par.zero >= 2);
  mem.optimizer = k.optimizer_bytes * sharded(s.par.zero >= 1);
  if (s.train.offload == Offload::optimizer) {  // states on the CPU; what stays is DeepSpeed's resident set
    mem.optimizer = 0;
    mem.grads = (k.offload_resident_bytes_per_param - k.param_bytes) * sharded(s.par.zero >= 2);
  }
  if (s.par.zero >= 3 && n > 1) mem.gathered = 2 * p.largest_layer * (2 + k.grad_reduce_bytes);
  const Recompute rc = s.train.recompute;
  const double per_micro = stage_activations(s, kinds, prices, rc);
  const double working = rc == Recompute::full ? one_layer(s, kinds, prices) : 0.0;
  const double first = per_micro * in_flight(s) + working;
  const double logits = logits_bytes(s);
  // The last stage: the logits and the loss are freed before the backward recomputes its first layer.
  const double last = per_micro + std::max(working, logits);
  mem.cp_buffers = cp_buffers(s, kinds, prices);
  if (s.par.pp > 1 && first > last) {
    mem.activations = first;  // the first stage is the peak: no logits there
  } else {
    mem.activations = per_micro + std::max(0.0, working - logits);
    mem.logits = logits;
  }
  mem.overhead = k.allocator_overhead * (mem.total() - mem.overhead);
  return mem;
}

}  // namespace cpbench::plan::step
