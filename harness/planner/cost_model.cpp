#include "harness/planner/cost_model.hpp"

#include "kernels/transports/window_halo.hpp"

#include <algorithm>
#include <numeric>

#include "kernels/mixers/linear/scan_plan.hpp"  // max_runs_per_rank
#include "sharders/core/check.hpp"

namespace cpbench::plan {

namespace {

double max_over_mean(const std::vector<double>& v) {
  if (v.empty()) return 1;
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return mean > 0 ? *std::max_element(v.begin(), v.end()) / mean : 1.0;
}

// What each layer saves for the backward whatever the transport (docs/planner.md, item 9): the layer
// input and the attention block's normed input, q, k, v, the output and the fp32 log-sum-exp. The
// transport adds its own buffers (Transport::peak_activation_bytes).
int64_t layer_activation_bytes(const ModelShape& m, int64_t s, int64_t e) {
  return s * (2 * m.hidden * e + 2 * m.heads * m.head_dim * e + 2 * m.kv_heads * m.head_dim * e + 4 * m.heads);
}

}  // namespace

int64_t attention_activation_bytes(const ModelShape& m, int64_t local_tokens, int64_t cp, int64_t element_size,
                                   const Transport& transport, int64_t halo_sent, int64_t halo_received) {
  const int64_t layers = m.attention_layers();
  if (layers == 0) return 0;
  ActivationShape shape;
  shape.cp = cp;
  shape.layers = layers;
  shape.q_heads = m.heads;
  shape.kv_heads = m.kv_heads;
  shape.local_tokens = local_tokens;
  shape.head_dim = m.head_dim;
  shape.element_size = element_size;
  shape.halo_sent = halo_sent;
  shape.halo_received = halo_received;
  return layers * layer_activation_bytes(m, local_tokens, element_size) + transport.peak_activation_bytes(shape);
}

int64_t attention_activation_bytes(const ModelShape& m, int64_t local_tokens, int64_t cp, int64_t element_size,
                                   const std::string& transport) {
  return attention_activation_bytes(m, local_tokens, cp, element_size, *make_transport(transport));
}

const StreamCache::Entry& StreamCache::get(const GlobalLayout& g, const std::vector<int64_t>& docs,
                                           const MaskSpec& mask) {
  if (!g.cu_seqlens_padded.empty()) {
    packed_ = make(g, docs, mask);
    return packed_;
  }
  auto it = unpacked_.find(g.padded_seq_len);
  if (it == unpacked_.end()) it = unpacked_.emplace(g.padded_seq_len, make(g, docs, mask)).first;
  return it->second;
}

StreamCache::Entry StreamCache::make(const GlobalLayout& g, const std::vector<int64_t>& docs,
                                     const MaskSpec& mask) {
  Entry e{stream_of(g, docs), {}};
  e.visible = mask_area::visible_per_position(e.stream, mask);
  return e;
}

LayoutWork layout_work(const Layout& layout, int64_t W, int64_t seq_len, const std::vector<int64_t>& docs,
                       const MaskSpec& mask, Kernel kernel, StreamCache& cache, bool ssm_runs, bool window_halo,
                       const dsa_costs::DsaDims* dsa) {
  LayoutWork w;
  LayoutRequest req;
  req.cp = W;
  req.seq_len = seq_len;
  req.doc_lens = docs;
  req.mask = mask;
  // The thd Sharder folds a row's trailing padding into its last document (SharderOptions::thd_trailing):
  // the stream the runner shards has the last slot grown and the same real tokens.
  int64_t total = 0;
  for (int64_t d : docs) total += d;
  const bool fold = layout.packed() && !docs.empty() && seq_len > total;
  if (fold) req.doc_lens.back() += seq_len - total;
  GlobalLayout g;
  try {
    g = layout.compute(req);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (fold) {
    g.cu_seqlens.assign(1, 0);
    for (int64_t d : docs) g.cu_seqlens.push_back(g.cu_seqlens.back() + d);
  }
  const StreamCache::Entry& e = cache.get(g, docs, mask);
  if (ssm_runs) w.runs_per_rank = max_runs_per_rank(g);
  if (window_halo && mask.kind == MaskSpec::Kind::sliding_window && !layout.packed()) {
    const kernels::WindowHalo h = kernels::window_halo(g.ranks, mask.window);
    for (int r = 0; r < static_cast<int>(g.ranks.size()); ++r) {
      w.halo_sent = std::max(w.halo_sent, h.sent_by(r));
      w.halo_received = std::max(w.halo_received, h.received_by(r));
      w.halo_steps = std::max(w.halo_steps, h.steps_of(r));
    }
  }
  w.P = g.padded_seq_len;
  w.s = g.local_len();
  w.pairs = mask_area::rank_areas(g, e.visible);
  if (dsa != nullptr) w.dsa = dsa_rank_work(*dsa, g.ranks, e.visible);
  w.local_pairs = mask_area::local_block_areas(g, e.stream, mask);
  w.segments = mask_area::rank_segments(g, e.stream);
  if (kernel == Kernel::blocks) w.blocks = mask_area::nonempty_blocks(g, e.stream, mask);
  if (kernel == Kernel::fitted) {
    // Every block of every rank costs O(W * P); past 2^22 the ranks most likely to be the slowest stand
    // in for all (the ring and the all-gather wait for the slowest rank).
    const int64_t n = static_cast<int64_t>(w.pairs.size());
    if (n * w.P <= (int64_t{1} << 22) || static_cast<size_t>(n) <= kPricedRanks) {
      for (int64_t r = 0; r < n; ++r) w.priced.push_back(r);
    } else {
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + 4, order.end(), [&](int64_t a, int64_t b) {
        return w.pairs[static_cast<size_t>(a)] > w.pairs[static_cast<size_t>(b)] ||
               (w.pairs[static_cast<size_t>(a)] == w.pairs[static_cast<size_t>(b)] && a < b);
      });
      w.priced.assign(order.begin(), order.begin() + 4);
      for (int64_t r : {int64_t{0}, n - 1, n / 3, 2 * n / 3}) w.priced.push_back(r);
      std::sort(w.priced.begin(), w.priced.end());
      w.priced.erase(std::unique(w.priced.begin(), w.priced.end()), w.priced.end());
    }
    const mask_area::BlockAreas areas(g, e.stream, mask);
    for (int64_t r : w.priced) w.block_areas.push_back(areas.of_rank(r));
  }
  return w;
}

RowPassTimes row_pass_times(const PlanRequest& r, int64_t row_pairs, int64_t row_len) {
  const ModelShape& m = r.model;
  const double F = r.cluster.attention_flops;
  if (r.kernel != Kernel::fitted) {
    const double f = attention_flops(static_cast<double>(row_pairs), m.heads, m.head_dim, AttentionPass::forward) / F;
    return {f, kBackwardFactor * f};
  }
  mask_area::BlockArea row;
  row.pairs = row_pairs;
  row.rows = row.keys = row_len;
  const HeadShape h{m.heads, m.kv_heads, m.head_dim};
  const RankKernelTime t = rank_kernel_time(r.cluster.kernel, F, h, {row}, -1);
  return {t.fwd, t.bwd};
}

double unsharded_time(const PlanRequest& r, int64_t row_pairs) {
  const RowPassTimes t = row_pass_times(r, row_pairs, r.seq_len);
  return static_cast<double>(r.model.attention_layers()) * (r.pass == Pass::train ? t.fwd + t.bwd : t.fwd);
}

PlanCase make_case(const PlanRequest& r, int64_t element_size, const LayoutWork& w, const std::string& sharder,
                   const std::string& transport, int64_t W, double ideal_s, int64_t ulysses) {
  PlanCase c;
  c.sharder = sharder;
  c.transport = ulysses > 0 ? transport + "-u" + std::to_string(ulysses) : transport;
  c.ulysses = ulysses;
  c.cp = W;
  c.ideal_s = ideal_s;
  const ModelShape& m = r.model;
  const double L = static_cast<double>(m.attention_layers());
  const double unit = attention_flops(1.0, m.heads, m.head_dim, AttentionPass::forward);  // per visible pair
  const double F = r.cluster.attention_flops;
  c.padded_seq_len = w.P;
  c.local_tokens = w.s;
  const double s2 = static_cast<double>(w.s) * static_cast<double>(w.s);
  std::vector<double> work(w.pairs.size());
  for (size_t i = 0; i < w.pairs.size(); ++i) {
    c.attention_flops_per_rank.push_back(L * unit * static_cast<double>(w.pairs[i]));
    work[i] = r.kernel == Kernel::blocks ? static_cast<double>(w.blocks[i]) * s2 : static_cast<double>(w.pairs[i]);
  }
  // A head-parallel transport's all-to-all group (consecutive ranks) splits its tokens' work evenly.
  const auto transport_of_case = make_transport(transport, TransportOptions{ulysses});
  const int64_t hp = transport_of_case->head_parallel_degree(W);
  if (hp > 1) {
    for (size_t g = 0; g + static_cast<size_t>(hp) <= c.attention_flops_per_rank.size(); g += static_cast<size_t>(hp)) {
      const auto first = c.attention_flops_per_rank.begin() + static_cast<std::ptrdiff_t>(g);
      const double mean = std::accumulate(first, first + hp, 0.0) / static_cast<double>(hp);
      std::fill(first, first + hp, mean);
    }
  }
  c.imbalance = max_over_mean(c.attention_flops_per_rank);

  // Per priced rank: forward compute, and with the fitted kernel model its backward and merge passes.
  std::vector<double> c_fwd, c_local, c_bwd, merge_fwd, merge_bwd;
  if (r.kernel == Kernel::fitted) {
    const HeadShape h{m.heads, m.kv_heads, m.head_dim};
    for (size_t i = 0; i < w.priced.size(); ++i) {
      const RankKernelTime t = rank_kernel_time(r.cluster.kernel, F, h, w.block_areas[i], w.priced[i]);
      c_fwd.push_back(t.fwd);
      c_local.push_back(t.local_fwd);
      c_bwd.push_back(t.bwd);
      merge_fwd.push_back(t.merge_fwd);
      merge_bwd.push_back(t.merge_bwd);
    }
    std::vector<double> step(c_fwd.size());
    for (size_t i = 0; i < step.size(); ++i) step[i] = c_fwd[i] + c_bwd[i] + merge_fwd[i] + merge_bwd[i];
    c.compute_imbalance = w.priced.size() == w.pairs.size() ? max_over_mean(step) : max_over_mean(work);
  } else {
    for (size_t i = 0; i < w.pairs.size(); ++i) {
      const bool blocks = r.kernel == Kernel::blocks;
      const double local = blocks ? (w.local_pairs[i] > 0 ? s2 : 0.0) : static_cast<double>(w.local_pairs[i]);
      c_fwd.push_back(unit * work[i] / F);
      c_local.push_back(unit * local / F);
    }
    c.compute_imbalance = max_over_mean(work);
  }
  const double c_max = *std::max_element(c_fwd.begin(), c_fwd.end());

  // Bytes, time and the transport's own memory are the transport's formulas; the planner only feeds
  // them this case's shapes, link and compute.
  const auto& t = transport_of_case;
  const int64_t e = element_size;
  CallShape call{W, 1, m.heads, m.kv_heads, w.s, m.head_dim, e};
  call.halo_sent = w.halo_sent;  // ring_window's (0 unless the mask is a sliding window it runs)
  call.halo_received = w.halo_received;
  call.halo_steps = w.halo_steps;
  const int64_t call_bytes = t->bytes_per_call(call);
  const int64_t fwd_bytes = t->forward_bytes_per_call(call);
  CP_CHECK(fwd_bytes >= 0 && call_bytes >= fwd_bytes, "planner: transport ", transport, " reports ", call_bytes,
           " bytes per call, less than its forward traffic ", fwd_bytes);
  CallCostInputs in;
  in.cp = W;
  in.c_fwd_max = c_max;
  in.fwd_bytes = static_cast<double>(fwd_bytes);
  in.bwd_bytes = static_cast<double>(call_bytes - fwd_bytes);
  in.bandwidth = W <= r.cluster.gpus_per_node ? r.cluster.intra_bandwidth : r.cluster.inter_bandwidth;
  in.latency_s = r.cluster.latency_s;
  in.c_fwd = c_fwd;
  in.c_local = c_local;
  in.c_bwd = c_bwd;
  in.merge_fwd = merge_fwd;
  in.merge_bwd = merge_bwd;
  in.call = call;
  in.rank_work = work;
  // A Ulysses group of consecutive ranks stays on one node when it fits there.
  if (ulysses > 0 && ulysses <= r.cluster.gpus_per_node) in.group_bandwidth = r.cluster.intra_bandwidth;
  // The whole padded row's work split evenly over W (what a head-parallel transport gives each rank):
  // one block of P x P with every rank's visible pairs.
  {
    int64_t pairs = 0;
    for (int64_t p : w.pairs) pairs += p;
    const RowPassTimes row = row_pass_times(r, pairs, w.P);
    in.c_even_fwd = row.fwd / static_cast<double>(W);
    in.c_even_bwd = row.bwd / static_cast<double>(W);
  }
  if (r.kernel == Kernel::fitted) in.contention = r.cluster.kernel.contention;
  const CallTime ct = t->time_per_call(in);
  const bool train = r.pass == Pass::train;
  c.bytes_per_rank = m.attention_layers() * (train ? call_bytes : fwd_bytes);
  // Forward only: the forward's bytes and hops (latency counted once per hop).
  c.transfer_s = L * (train ? ct.transfer_s
                            : (W > 1 ? in.fwd_bytes / in.bandwidth + static_cast<double>(W - 1) * in.latency_s : 0.0));
  c.exposed_comm_s = L * (train ? ct.exposed_s : ct.forward_exposed_s);
  c.predicted_step_s = L * (train ? ct.step_s : ct.forward_s);
  c.compute_s = c.predicted_step_s - c.exposed_comm_s;
  c.attention_step_s = c.predicted_step_s;
  c.efficiency = c.predicted_step_s > 0 ? ideal_s / c.predicted_step_s : 1.0;
  c.max_segments = *std::max_element(w.segments.begin(), w.segments.end());
  c.peak_activation_bytes = attention_activation_bytes(m, w.s, W, e, *t, w.halo_sent, w.halo_received);
  if (has_dsa(m) && !w.dsa.sparse.empty()) {
    // DSA (dsa_stages.hpp): the two stages per rank replace the dense core; the key-side wire replaces
    // the transport's K/V bytes, all exposed.
    const dsa_costs::DsaDims d = dsa_dims(m);
    const double Li = static_cast<double>(dsa_indexer_layers(m));
    const double factor = train ? kStepFactor : 1.0;
    DsaCase& x = c.dsa;
    x.enabled = true;
    const auto stage = [&](const std::vector<double>& v, double layers, double& max_flops, double& balance) {
      max_flops = layers * *std::max_element(v.begin(), v.end());
      balance = max_over_mean(v);
      return max_flops * factor / F;
    };
    x.indexer_s = stage(w.dsa.indexer, Li, x.indexer_flops_max, x.indexer_balance);
    x.sparse_s = stage(w.dsa.sparse, L, x.sparse_flops_max, x.sparse_balance);
    const int64_t fwd = dsa_costs::forward_bytes(d, W, 1, w.s, e), bwd = dsa_costs::backward_bytes(d, W, 1, w.s, e);
    x.wire_bytes = L * static_cast<double>(train ? fwd + bwd : fwd);
    x.wire_s = W > 1 ? L * ((train ? 2.0 : 1.0) * static_cast<double>(W - 1) * in.latency_s +
                            static_cast<double>(train ? fwd + bwd : fwd) / in.bandwidth)
                     : 0.0;
    x.step_s = x.indexer_s + x.sparse_s + x.wire_s;
    std::vector<double> total(w.dsa.sparse.size());
    double sum = 0;
    for (size_t i = 0; i < total.size(); ++i) {
      total[i] = Li * w.dsa.indexer[i] + L * w.dsa.sparse[i];
      sum += total[i];
    }
    c.attention_flops_per_rank = total;
    c.imbalance = c.compute_imbalance = max_over_mean(total);
    c.bytes_per_rank = static_cast<int64_t>(x.wire_bytes);
    c.transfer_s = c.exposed_comm_s = x.wire_s;
    c.compute_s = x.indexer_s + x.sparse_s;
    c.predicted_step_s = c.attention_step_s = x.step_s;
    c.ideal_s = sum / static_cast<double>(W) * factor / F;
    c.efficiency = c.predicted_step_s > 0 ? c.ideal_s / c.predicted_step_s : 1.0;
    // Memory: what each layer keeps, plus the gathered key side every layer keeps for its backward and the
    // fp32 gradient buffer (the wire's sizes), not the transport's expanded K/V.
    c.peak_activation_bytes = m.attention_layers() * layer_activation_bytes(m, w.s, e) +
                              (W > 1 ? m.attention_layers() * fwd + bwd * W / (W - 1) : 0);
    c.fits_memory = r.cluster.memory_bytes <= 0 || static_cast<double>(c.peak_activation_bytes) <= r.cluster.memory_bytes;
  }
  c.fits_memory = r.cluster.memory_bytes <= 0 || static_cast<double>(c.peak_activation_bytes) <= r.cluster.memory_bytes;
  return c;
}

CallTime call_time(const std::string& transport, int64_t cp, double c_fwd_max, double fwd_bytes, double bwd_bytes,
                   double bandwidth, double latency_s, const std::vector<double>& c_fwd,
                   const std::vector<double>& c_local) {
  CallCostInputs in;
  in.cp = cp;
  in.c_fwd_max = c_fwd_max;
  in.fwd_bytes = fwd_bytes;
  in.bwd_bytes = bwd_bytes;
  in.bandwidth = bandwidth;
  in.latency_s = latency_s;
  in.c_fwd = c_fwd;
  in.c_local = c_local;
  return make_transport(transport)->time_per_call(in);
}

}  // namespace cpbench::plan
