#include "harness/planner/step/attention.hpp"

#include <algorithm>
#include <limits>

#include "harness/planner/dsa_stages.hpp"
#include "harness/planner/layer_kinds.hpp"
#include "harness/planner/mixer_cost.hpp"
#include "harness/planner/mla_wire_price.hpp"
#include "harness/planner/plan.hpp"
#include "harness/planner/step/pytorch_cp.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"
#include "kernels/mixers/mixer.hpp"
#include "sharders/mask.hpp"
#include "sharders/registry.hpp"

namespace cpbench::plan::step {

namespace {

bool is_sliding_mask(const std::string& mask) { return mask.rfind("sliding_window:", 0) == 0; }

// One attention layer of `m` as a model of its own, heads split by tp.
ModelShape one_layer(const ModelShape& m, int64_t tp) {
  ModelShape k;
  k.name = m.name;
  k.layers = 1;
  k.hidden = m.hidden;
  k.heads = m.heads / tp;
  k.kv_heads = std::max<int64_t>(1, (m.attention.is_mla() ? m.heads : m.kv_heads) / tp);
  k.head_dim = m.head_dim;
  k.attention.sinks = m.attention.sinks;
  k.source = m.source;
  if (m.attention.is_mla()) k.head_dim = (m.attention.mla.qk_head_dim() + m.attention.mla.v_head_dim) / 2;
  if (has_dsa(m)) {  // DSA: its stages (dsa_stages.hpp) read the MLA and index dims
    k.attention = m.attention;
    k.attention.dsa.indexer_kinds.clear();  // one layer: a full one (shared layers are priced as full here)
  }
  return k;
}

PlanRequest sub_request(const PlanRequest& r, const ModelShape& model, int64_t tp, int64_t cp, const std::string& mask) {
  PlanRequest k = r;
  k.model = model;
  k.cps = {cp};
  k.mask = mask;
  k.pass = Pass::train;
  k.mixer_strategies = r.mixer_strategies;
  k.ssm_strategies.clear();
  // A CP group spans tp x cp consecutive ranks: it stays on NVLink while tp x cp fits a node.
  k.cluster.gpus_per_node = std::max<int64_t>(1, r.cluster.gpus_per_node / tp);
  return k;
}

// make_plan, or, when one layout rejects the request (UsageError), the layouts that accept it.
Plan plan_layouts(const PlanRequest& k) {
  try {
    return make_plan(k);
  } catch (const UsageError&) {
  }
  Plan all;
  std::vector<std::string> sharders = k.sharders;
  if (sharders.empty())
    for (const auto& n : known_layouts())
      if (attention_routing(n) == AttentionRouting::transport) sharders.push_back(n);
  for (const auto& s : sharders) {
    PlanRequest one = k;
    one.sharders = {s};
    try {
      Plan p = make_plan(one);
      for (auto& c : p.cases) all.cases.push_back(std::move(c));
    } catch (const UsageError&) {
    }
  }
  return all;
}

void keep_best(std::map<std::string, KindPrice>& best, const std::string& sharder, const KindPrice& p) {
  auto it = best.find(sharder);
  if (it == best.end() || p.step_s < it->second.step_s) best[sharder] = p;
}

std::map<std::string, KindPrice> price_attention(const PlanRequest& r, const LayerKind& kind, int64_t tp, int64_t cp) {
  const ModelShape& m = r.model;
  PlanRequest k = sub_request(r, one_layer(m, tp), tp, cp, kind.mask);
  const bool mla = kind.kind == "mla";
  if (k.transports.empty()) k.transports = planned_transports();
  if (kind.window > 0)
    for (const auto& t : window_transports())
      if (std::find(k.transports.begin(), k.transports.end(), t) == k.transports.end()) k.transports.push_back(t);
  if (mla) {
    std::vector<std::string> carriers;
    for (const auto& t : k.transports) {
      const auto tr = make_transport(t, TransportOptions{takes_ulysses(t) ? 2 : 0});
      if (tr->unsupported_mla(MlaWire::latent).empty() && tr->unsupported_mla(MlaWire::expanded).empty())
        carriers.push_back(t);
    }
    k.transports = carriers;
  }
  std::map<std::string, KindPrice> best;
  if (k.transports.empty()) return best;
  const Plan p = plan_layouts(k);
  // The MLA wire's query reads the real dims and heads / tp.
  PlanRequest wire_r = k;
  wire_r.model.attention.mla = m.attention.mla;
  wire_r.model.heads = m.heads / tp;
  for (const auto& c : p.cases) {
    const std::string registry = c.ulysses > 0 ? "hybrid" : c.transport;
    if (mla) {
      const auto tr = make_transport(registry, TransportOptions{c.ulysses});
      const MlaWirePrice w = price_mla_wires(*tr, mla_wire_query(wire_r, c, 1));
      for (const MlaWire wire : {MlaWire::expanded, MlaWire::latent}) {
        const CallTime& t = wire == MlaWire::latent ? w.latent : w.expanded;
        KindPrice kp{registry, c.ulysses, c.transport, to_string(wire), t.step_s, t.step_s - t.exposed_s,
                     t.forward_s - t.forward_exposed_s,
                     static_cast<double>(wire == MlaWire::latent ? w.bytes_latent : w.bytes_expanded),
                     c.attention_flops_per_rank.empty() ? 0.0
                                                        : *std::max_element(c.attention_flops_per_rank.begin(),
                                                                            c.attention_flops_per_rank.end()),
                     0};
        keep_best(best, c.sharder, kp);
      }
      continue;
    }
    KindPrice kp;
    kp.transport = registry, kp.ulysses = c.ulysses, kp.label = c.transport;
    kp.step_s = c.predicted_step_s;
    kp.compute_s = c.compute_s;
    kp.fwd_compute_s = c.compute_s / kStepFactor;
    kp.bytes = static_cast<double>(c.bytes_per_rank);
    kp.fwd_flops = c.attention_flops_per_rank.empty()
                       ? 0.0
                       : *std::max_element(c.attention_flops_per_rank.begin(), c.attention_flops_per_rank.end());
    keep_best(best, c.sharder, kp);
  }
  return best;
}

// PyTorch's context_parallel (pytorch_cp.hpp) on the layout's cases: the layout's FLOPs per rank, the
// stack's time and bytes.
std::map<std::string, KindPrice> price_pytorch_cp(const PlanRequest& r, const LayerKind& kind, int64_t tp, int64_t cp) {
  const ModelShape& m = r.model;
  PlanRequest k = sub_request(r, one_layer(m, tp), tp, cp, kind.mask);
  if (k.sharders.empty()) k.sharders = {"load_balanced"};
  if (k.transports.empty()) k.transports = {"allgather"};
  const Plan p = plan_layouts(k);
  std::map<std::string, KindPrice> best;
  for (const auto& c : p.cases) {
    TorchCpQuery q;
    q.cp = cp;
    q.local_tokens = c.local_tokens;
    q.heads = q.kv_heads = k.model.heads;  // K/V expanded to the query's heads before SDPA (repeat_kv)
    q.head_dim = m.head_dim;
    q.elem_bytes = dtype_size(r.dtype);
    q.ring_rotate = c.transport == "ring";
    const TorchCpLayer t = pytorch_cp_layer(k.cluster, q);
    KindPrice kp;
    kp.transport = c.transport, kp.label = "pytorch-" + c.transport;
    kp.step_s = t.step_s();
    kp.compute_s = t.compute_s();
    kp.fwd_compute_s = t.fwd_compute_s();
    kp.bytes = t.bytes;
    kp.fwd_flops = c.attention_flops_per_rank.empty()
                       ? 0.0
                       : *std::max_element(c.attention_flops_per_rank.begin(), c.attention_flops_per_rank.end());
    keep_best(best, c.sharder, kp);
  }
  return best;
}

std::map<std::string, KindPrice> price_mixer(const PlanRequest& r, const LayerKind& kind, int64_t tp, int64_t cp) {
  const ModelShape& m = r.model;
  ModelShape k;
  static_cast<MixerConfigs&>(k) = m;
  k.name = m.name;
  k.layers = 1;
  k.mixers = std::string(1, kind.mixer);
  k.hidden = m.hidden;
  k.heads = m.heads, k.kv_heads = m.kv_heads, k.head_dim = m.head_dim;
  const Plan p = plan_layouts(sub_request(r, k, tp, cp, "causal"));
  std::map<std::string, KindPrice> best;
  const double t = static_cast<double>(tp);  // TP splits the mixer's heads: its work, bytes and memory
  for (const auto& c : p.cases) {
    if (c.ssm.strategy.empty()) continue;
    KindPrice kp;
    kp.transport = kp.label = c.ssm.strategy;
    kp.step_s = c.ssm.step_s / t;
    kp.compute_s = c.ssm.compute_s / t;
    kp.fwd_compute_s = kp.compute_s / 3.0;  // mixer_case's fwd + bwd = 3 x forward
    kp.bytes = static_cast<double>(c.ssm.bytes_per_rank) / t;
    kp.fwd_flops = c.ssm.flops_per_rank / t;
    kp.saved_bytes = static_cast<double>(c.ssm.activation_bytes) / t;
    keep_best(best, c.sharder, kp);
  }
  return best;
}

}  // namespace

std::vector<LayerKind> layer_kinds(const PlanRequest& r) {
  const ModelShape& m = r.model;
  std::vector<LayerKind> out;
  const int64_t A = m.attention_layers();
  const std::string full_mask = is_sliding_mask(r.mask) && m.sliding_window > 0 ? "causal" : r.mask;
  if (A > 0) {
    if (has_dsa(m)) {
      out.push_back({"dsa", A, full_mask, 0, kDefaultMixer});  // the two stages and the key-side wire
    } else if (m.attention.is_mla()) {
      out.push_back({"mla", A, full_mask, 0, kDefaultMixer});
    } else {
      const int64_t sliding = m.sliding_window > 0 ? m.sliding_layers : 0;
      if (sliding > 0)
        out.push_back({"sliding_attention", sliding, "sliding_window:" + std::to_string(m.sliding_window),
                       m.sliding_window, kDefaultMixer});
      if (A > sliding) out.push_back({"full_attention", A - sliding, full_mask, 0, kDefaultMixer});
    }
  }
  if (const Mixer* mixer = planned_mixer(m)) out.push_back({mixer->label(), m.layers_of(mixer->letter()), "", 0, mixer->letter()});
  return out;
}

AttentionPricer::AttentionPricer(const PlanRequest& request, Stack stack)
    : request_(request), stack_(stack), kinds_(layer_kinds(request)) {
  if (stack_ != Stack::pytorch_cp) return;
  for (const auto& k : kinds_)
    CP_CHECK_USAGE(k.kind == "full_attention", "--stack pytorch-cp: PyTorch's context_parallel is priced for full ",
                   "causal attention only; model '", request.model.name, "' has ", k.layers, " ", k.kind, " layers");
  CP_CHECK_USAGE(request.mask == "causal" && request.doc_lens.empty(), "--stack pytorch-cp: its load-balanced ",
                 "context_parallel needs one causal mask over the row (is_causal), not --mask ", request.mask,
                 request.doc_lens.empty() ? "" : " with documents");
  for (const auto& s : request.sharders)
    CP_CHECK_USAGE(s == "load_balanced", "--sharders ", s, ": --stack pytorch-cp shards round-robin (head-tail) only: ",
                   "load_balanced");
  for (const auto& t : request.transports)
    CP_CHECK_USAGE(t == "allgather" || t == "ring", "--transports ", t, ": --stack pytorch-cp rotates K/V by ",
                   "allgather (its default) or ring (the all-to-all rotate) only");
}

const LayoutPrices& AttentionPricer::at(int64_t tp, int64_t cp) {
  const auto key = std::make_pair(tp, cp);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::vector<std::map<std::string, KindPrice>> per_kind;
  for (const auto& k : kinds_)
    per_kind.push_back(k.mixer != kDefaultMixer                       ? price_mixer(request_, k, tp, cp)
                       : stack_ == Stack::pytorch_cp && cp > 1 ? price_pytorch_cp(request_, k, tp, cp)
                                                                  : price_attention(request_, k, tp, cp));
  LayoutPrices out;
  if (!per_kind.empty())
    for (const auto& [sharder, first] : per_kind.front()) {
      std::vector<KindPrice> prices;
      for (const auto& kind : per_kind)
        if (auto it = kind.find(sharder); it != kind.end()) prices.push_back(it->second);
      if (prices.size() == per_kind.size()) out[sharder] = prices;
    }
  return cache_.emplace(key, std::move(out)).first->second;
}

double attention_layer_params(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden), hq = static_cast<double>(m.heads);
  if (m.attention.is_mla()) {
    const MlaDims& d = m.attention.mla;
    const double qk = static_cast<double>(d.qk_head_dim()), v = static_cast<double>(d.v_head_dim);
    const double ql = static_cast<double>(m.q_lora_rank);
    const double q = ql > 0 ? h * ql + ql * hq * qk : h * hq * qk;
    return q + h * static_cast<double>(d.latent_dim()) +
           static_cast<double>(d.kv_lora_rank) * hq * static_cast<double>(d.qk_nope_head_dim + d.v_head_dim) + hq * v * h;
  }
  const double d = static_cast<double>(m.head_dim), hkv = static_cast<double>(m.kv_heads);
  return h * (hq + 2 * hkv) * d + hq * d * h;
}

double mixer_layer_params(const ModelShape& m, char letter) {
  const Mixer* mixer = nullptr;
  for (const Mixer* x : mixers_in(m.mixers))
    if (x->letter() == letter) mixer = x;
  if (mixer == nullptr) return 0;
  LayerCostQuery q;
  q.hidden = m.hidden;
  q.rows = 1;
  q.seq_len = 4096;
  q.cp = 1;
  q.elem_bytes = 2;
  q.chunks_per_rank = 1;
  return mixer->layer_cost(m, mixer->strategies().front(), q).dense_flops / (2.0 * 4096);
}

double attention_activation_per_token(const ModelShape& m, Recompute rc) {
  const double e = 2, h = static_cast<double>(m.hidden), hq = static_cast<double>(m.heads);
  if (rc == Recompute::full) return e * h;
  double kept;
  if (m.attention.is_mla()) {
    const MlaDims& d = m.attention.mla;
    kept = e * (2 * h + hq * (2.0 * static_cast<double>(d.qk_head_dim()) + 2.0 * static_cast<double>(d.v_head_dim)) +
                static_cast<double>(d.latent_dim() + m.q_lora_rank)) +
           4 * hq;
  } else {
    kept = e * (2 * h + 2 * hq * static_cast<double>(m.head_dim) + 2 * static_cast<double>(m.kv_heads * m.head_dim)) +
           4 * hq;
  }
  return rc == Recompute::selective ? kept - e * h : kept;
}

double attention_core_flops_per_token(const ModelShape& m, int64_t seq_len, const std::string& mask) {
  const double S = static_cast<double>(seq_len);
  double visible = (S + 1) / 2;
  const MaskSpec spec = MaskSpec::parse(mask);
  if (spec.kind == MaskSpec::Kind::full) visible = S;
  if (spec.kind == MaskSpec::Kind::sliding_window) {
    const double w = std::min(static_cast<double>(spec.window), S);
    visible = w - w * (w - 1) / (2 * S);  // sum_i min(i + 1, w) / S
  }
  const double qk = m.attention.is_mla() ? static_cast<double>(m.attention.mla.qk_head_dim()) : static_cast<double>(m.head_dim);
  const double v = m.attention.is_mla() ? static_cast<double>(m.attention.mla.v_head_dim) : static_cast<double>(m.head_dim);
  if (has_dsa(m) && spec.kind == MaskSpec::Kind::causal) {
    // DSA: the indexer on the layers that run their own, the sparse core on every layer (dsa_costs' causal-row
    // means), per layer.
    const dsa_costs::DsaDims d = dsa_dims(m);
    const double share = static_cast<double>(dsa_indexer_layers(m)) / static_cast<double>(m.attention_layers());
    return share * dsa_costs::indexer_flops_per_token(d, seq_len) + dsa_costs::sparse_core_flops_per_token(d, seq_len);
  }
  return 2.0 * static_cast<double>(m.heads) * (qk + v) * visible;
}

}  // namespace cpbench::plan::step
