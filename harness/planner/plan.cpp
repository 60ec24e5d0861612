#include "harness/planner/plan.hpp"

#include "kernels/mixers/attention/dsa/dsa_context.hpp"

#include <algorithm>

#include "harness/planner/format.hpp"
#include "harness/planner/layer_kinds.hpp"
#include "harness/planner/mixer_cost.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"
#include "sharders/mask_area.hpp"
#include "sharders/registry.hpp"

namespace cpbench::plan {

namespace {

struct Resolved {
  MaskSpec mask;
  int64_t element_size = 2;
};

Resolved validate(PlanRequest& r) {
  const ModelShape& m = r.model;
  CP_CHECK_USAGE(m.mixers.empty() || static_cast<int64_t>(m.mixers.size()) == m.layers, "model '", m.name,
                 "': its mixer pattern has ", m.mixers.size(), " layers, --layers is ", m.layers);
  if (m.attention_layers() > 0 || m.layers < 1) {
    CP_CHECK_USAGE(m.layers >= 1 && m.heads >= 1 && m.kv_heads >= 1 && m.head_dim >= 1 && m.hidden >= 1, "model '",
                   m.name, "': --layers, --heads, --kv-heads, --head-dim and --hidden must all be >= 1 (got ", m.layers,
                   ", ", m.heads, ", ", m.kv_heads, ", ", m.head_dim, ", ", m.hidden, "); give --model or all five");
    CP_CHECK_USAGE(m.heads % m.kv_heads == 0, "model '", m.name, "': --heads ", m.heads,
                   " is not a multiple of --kv-heads ", m.kv_heads);
  }
  if (const Mixer* mixer = planned_mixer(m)) {
    CP_CHECK_USAGE(m.hidden >= 1, "model '", m.name, "': --hidden must be >= 1, got ", m.hidden);
    mixer->validate(m);
    CP_CHECK_USAGE(r.cluster.ssm_flops > 0, "cluster '", r.cluster.name, "': --ssm-flops must be > 0, got ",
                   r.cluster.ssm_flops);
  }
  int64_t total = 0;
  for (size_t d = 0; d < r.doc_lens.size(); ++d) {
    CP_CHECK_USAGE(r.doc_lens[d] >= 1, "--doc-lens[", d, "]: expected a positive length, got ", r.doc_lens[d]);
    CP_CHECK_USAGE(r.seq_len <= 0 || r.doc_lens[d] <= r.seq_len, "--doc-lens[", d, "]: a document of ", r.doc_lens[d],
                   " tokens is longer than the sequence (--seq-len ", r.seq_len, ")");
    total += r.doc_lens[d];
  }
  if (r.seq_len <= 0 && total > 0) r.seq_len = total;
  CP_CHECK_USAGE(r.seq_len >= 1, "--seq-len: expected a positive number of tokens (or --doc-lens), got ", r.seq_len);
  CP_CHECK_USAGE(total <= r.seq_len, "--doc-lens: the documents sum to ", total,
                 " tokens, longer than the sequence (--seq-len ", r.seq_len, ")");
  CP_CHECK_USAGE(!r.cps.empty(), "--cp: give at least one CP size, e.g. --cp 8,16,64");
  for (size_t i = 0; i < r.cps.size(); ++i)
    CP_CHECK_USAGE(r.cps[i] >= 1, "--cp[", i, "]: ", r.cps[i], " is not a CP size (W must be >= 1)");
  const Cluster& c = r.cluster;
  CP_CHECK_USAGE(c.attention_flops > 0, "cluster '", c.name, "': --flops must be > 0, got ", c.attention_flops);
  CP_CHECK_USAGE(c.intra_bandwidth > 0 && c.inter_bandwidth > 0, "cluster '", c.name,
                 "': --bandwidth must be > 0, got ", c.intra_bandwidth, " (intra-node), ", c.inter_bandwidth,
                 " (inter-node)");
  CP_CHECK_USAGE(c.latency_s >= 0, "cluster '", c.name, "': --latency must be >= 0, got ", c.latency_s);
  CP_CHECK_USAGE(c.gpus_per_node >= 1, "cluster '", c.name, "': --gpus-per-node must be >= 1, got ", c.gpus_per_node);
  Resolved res;
  res.mask = MaskSpec::parse(r.mask);
  res.element_size = dtype_size(r.dtype);

  if (r.sharders.empty())
    for (const auto& n : known_layouts())
      // sdpa_wrap is load_balanced's layout reached another way; the negative controls are wrong on purpose.
      if (attention_routing(n) == AttentionRouting::transport) r.sharders.push_back(n);
  std::vector<std::string> canonical;
  for (const auto& n : r.sharders) {
    const std::string c_name = make_layout(n)->name();  // UsageError listing the known ones
    if (std::find(canonical.begin(), canonical.end(), c_name) == canonical.end()) canonical.push_back(c_name);
  }
  r.sharders = canonical;
  // Every registered transport brings its bytes, time and memory formulas (the Transport interface),
  // so whatever the registry knows can be planned, and nothing else.
  if (r.transports.empty()) r.transports = planned_transports();
  for (const auto& t : r.transports) (void)takes_ulysses(t);  // UsageError listing the known ones
  const Mixer* mixer = planned_mixer(m);
  r.ssm_strategies = mixer ? planned_strategies(*mixer, r) : std::vector<std::string>{};
  return res;
}

// A case of a model without attention layers: the layout's sizes, no attention work.
PlanCase ssm_only_case(const LayoutWork& w, const std::string& sharder, int64_t W, double ideal_s) {
  PlanCase c;
  c.sharder = sharder;
  c.transport = "none";
  c.cp = W;
  c.padded_seq_len = w.P;
  c.local_tokens = w.s;
  c.attention_flops_per_rank.assign(static_cast<size_t>(W), 0.0);
  c.max_segments = *std::max_element(w.segments.begin(), w.segments.end());
  c.ideal_s = ideal_s;
  return c;
}

// `base` (its attention part) with the other mixer's part added to its step, time and memory.
PlanCase with_ssm(PlanCase c, const SsmCase& ssm, double memory_bytes) {
  c.ssm = ssm;
  c.predicted_step_s = c.attention_step_s + ssm.step_s;
  c.compute_s += ssm.compute_s;
  c.exposed_comm_s += ssm.comm_s;
  c.peak_activation_bytes += ssm.activation_bytes;
  c.fits_memory = memory_bytes <= 0 || static_cast<double>(c.peak_activation_bytes) <= memory_bytes;
  c.efficiency = c.predicted_step_s > 0 ? c.ideal_s / c.predicted_step_s : 1.0;
  return c;
}

}  // namespace

Plan make_plan(const PlanRequest& request) {
  Plan plan;
  plan.request = request;
  PlanRequest& r = plan.request;
  const Resolved res = validate(r);
  const ModelShape& m = r.model;

  // The unsharded row: what one device would compute (the "ideal" divides it by W).
  const Stream row = unpacked_stream(r.seq_len, r.doc_lens, r.seq_len);
  const int64_t row_pairs = mask_area::run_area(row, res.mask, 0, r.seq_len);
  plan.real_tokens = row.valid_tokens();
  plan.total_attention_flops = static_cast<double>(m.attention_layers()) *
                               attention_flops(static_cast<double>(row_pairs), m.heads, m.head_dim, AttentionPass::forward);
  const bool attention = m.attention_layers() > 0;
  const double total_time =
      (attention ? unsharded_time(r, row_pairs) : 0.0) + mixer_unsharded_time(r);
  const Mixer* mixer = planned_mixer(m);
  const bool linear = mixer != nullptr;  // a non-attention mixer: a strategy per case
  auto note = [&](const std::string& n) {
    if (std::find(plan.notes.begin(), plan.notes.end(), n) == plan.notes.end()) plan.notes.push_back(n);
  };
  // Without attention layers the transport changes nothing: one case per layout and strategy.
  const std::vector<std::string> transports = attention ? r.transports : std::vector<std::string>{"none"};
  if (!attention) note("the model has no attention layer: no attention transport is planned");

  // A window-only transport (ring_window) is priced when asked for, on the masks and layouts it runs.
  bool window_planned = false;
  for (const auto& t : transports) {
    const auto& window = window_transports();
    if (std::find(window.begin(), window.end(), t) == window.end()) continue;
    window_planned = true;
    const std::string why = make_transport(t)->unsupported_reason(res.mask, at::TensorOptions().dtype(at::kFloat), 1);
    if (!why.empty()) note(t + " not planned: " + why);
  }
  // DSA (dsa_stages.hpp): its two stages per rank on the transports that carry it.
  const bool dsa = attention && has_dsa(m);
  const dsa_costs::DsaDims dsa_d = dsa_dims(m);
  if (dsa) {
    const auto carriers = dsa_key_side_transports();
    note("DSA (index heads " + std::to_string(dsa_d.index_heads) + " x " + std::to_string(dsa_d.index_head_dim) +
         ", top-" + std::to_string(dsa_d.topk) + ", " + std::to_string(dsa_indexer_layers(m)) + " of " +
         std::to_string(m.attention_layers()) + " layers with their own indexer): every case prices the indexer "
         "and the sparse core per rank and the key-side wire (" +
         std::to_string(dsa_costs::wire_elements_per_token(dsa_d)) + " values per token); planned on " +
         "allgather and ring (a2a / hybrid, whose head split adds the score sums, are not planned)");
  }
  for (int64_t W : r.cps) {
    StreamCache cache;
    for (const auto& sharder : r.sharders) {
      const auto layout = make_layout(sharder);
      const LayoutWork w = layout_work(*layout, W, r.seq_len, r.doc_lens, res.mask, r.kernel, cache, linear,
                                       window_planned, dsa ? &dsa_d : nullptr);
      // The SSM strategies that can run this layout at W, each priced once (the same for every transport).
      std::vector<SsmCase> ssm_cases;
      for (const auto& strategy : r.ssm_strategies) {
        const std::string why = mixer->unsupported_reason(m, strategy, *layout, W);
        if (!why.empty()) {
          note("not planned at cp=" + std::to_string(W) + " for " + layout->name() + ": " + why);
          continue;
        }
        ssm_cases.push_back(mixer_case(r, *mixer, res.element_size, strategy, W, w.P, w.runs_per_rank));
      }
      if (linear && ssm_cases.empty()) continue;
      for (const auto& transport : transports) {
        // hybrid: every proper Ulysses degree of W (U = W is a2a, U = 1 the ring).
        std::vector<int64_t> degrees{0};
        if (attention && takes_ulysses(transport)) {
          degrees.clear();
          for (int64_t u = 2; u < W; ++u)
            if (W % u == 0) degrees.push_back(u);
        }
        for (int64_t u : degrees) {
          // The head-parallel transports split the heads: a model whose heads do not split is not planned.
          const double ideal = total_time / static_cast<double>(W);
          PlanCase base;
          if (dsa) {
            const auto carriers = dsa_key_side_transports();
            if (std::find(carriers.begin(), carriers.end(), transport) == carriers.end()) continue;
          }
          if (attention) {
            const auto t = make_transport(transport, TransportOptions{u});
            if (!t->unsupported_reason(res.mask, at::TensorOptions().dtype(at::kFloat), W).empty()) continue;
            if (const std::string why = t->unsupported_layout(*layout); !why.empty()) {
              note("not planned at cp=" + std::to_string(W) + ": " + transport + ": " + why);
              continue;
            }
            const std::string why = t->unsupported_heads(W, m.heads, m.kv_heads);
            if (!why.empty()) {
              note("not planned at cp=" + std::to_string(W) + ": " + why);
              continue;
            }
            base = make_case(r, res.element_size, w, sharder, transport, W, ideal, u);
          } else {
            base = ssm_only_case(w, sharder, W, ideal);
          }
          if (ssm_cases.empty()) plan.cases.push_back(base);
          for (const auto& sc : ssm_cases) plan.cases.push_back(with_ssm(base, sc, r.cluster.memory_bytes));
        }
      }
    }
  }
  if (m.sliding_window > 0) {
    const std::string window = "sliding_window:" + std::to_string(m.sliding_window);
    if (m.sliding_layers == m.attention_layers() && r.mask == window)
      note("mask " + window + ": every attention layer of the model uses its sliding window (" + m.source + ")");
    else
      note("the model uses a sliding window of " + std::to_string(m.sliding_window) + " tokens on " +
           std::to_string(m.sliding_layers) + " of its " + std::to_string(m.attention_layers()) +
           " attention layers; every attention layer is planned with mask " + r.mask);
  }
  if (res.mask.kind == MaskSpec::Kind::document && r.doc_lens.empty())
    plan.notes.push_back("--mask document without --doc-lens / --doc-dist: the row is one document (plain causal)");
  if (r.pass == Pass::forward)
    plan.notes.push_back("pass 'forward': steps, bytes and efficiencies cover the forward pass only");
  if (r.kernel == Kernel::blocks)
    plan.notes.push_back(
        "kernel model 'blocks': every non-empty (local queries x one rank's keys) block is computed "
        "in full, as cpbench's CPU transports do");
  for (const auto& c : plan.cases)
    if (!c.fits_memory) {
      plan.notes.push_back("some cases need more activation memory than the device has (" +
                           fmt_bytes(r.cluster.memory_bytes) + "); they are ranked last");
      break;
    }
  rank_and_recommend(plan);
  if (!dsa) plan.per_kind = plan_layer_kinds(plan);
  if (!plan.per_kind.empty())
    plan.notes.push_back(m.attention.is_mla()
                             ? "MLA: the cases above price its layers as plain attention (q/k head dim, no latent); "
                               "'per layer kind' below prices both wires (mla_wire expanded | latent)"
                             : "the cases above run every attention layer under one mask; 'per layer kind' below "
                               "plans the sliding and the full layers each on its own");
  return plan;
}

std::vector<double> predicted_rank_flops(const std::string& sharder, int64_t cp, int64_t seq_len,
                                         const std::vector<int64_t>& doc_lens, const std::string& mask_text,
                                         int64_t q_heads, int64_t head_dim, Kernel kernel) {
  const auto layout = make_layout(sharder);
  const MaskSpec mask = MaskSpec::parse(mask_text);
  StreamCache cache;
  const LayoutWork w = layout_work(*layout, cp, seq_len, doc_lens, mask, kernel, cache);
  const double s2 = static_cast<double>(w.s) * static_cast<double>(w.s);
  std::vector<double> out;
  for (size_t i = 0; i < w.pairs.size(); ++i)
    out.push_back(attention_flops(kernel == Kernel::blocks ? static_cast<double>(w.blocks[i]) * s2
                                                           : static_cast<double>(w.pairs[i]),
                                  q_heads, head_dim, AttentionPass::forward));
  return out;
}

}  // namespace cpbench::plan
