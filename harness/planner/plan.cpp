#include "harness/planner/plan.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <sstream>
#include <tuple>

#include "harness/model/model.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"
#include "sharders/mask_area.hpp"
#include "sharders/registry.hpp"

namespace cpbench::plan {

namespace {

// FlashAttention-style backward does 5 matmuls to the forward's 2 (peers-and-limits §9.1).
constexpr double kBackwardFactor = 2.5;
constexpr double kStepFactor = 1.0 + kBackwardFactor;

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string fmt_time(double s) {
  std::ostringstream os;
  os << std::setprecision(3);
  if (s >= 1) {
    os << s << " s";
  } else if (s >= 1e-3) {
    os << s * 1e3 << " ms";
  } else {
    os << s * 1e6 << " us";
  }
  return os.str();
}

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  std::ostringstream os;
  os << std::setprecision(3) << b << " " << units[u];
  return os.str();
}

std::string fmt(double x, int precision = 3) {
  std::ostringstream os;
  os << std::setprecision(precision) << x;
  return os.str();
}

std::string fmt_fixed(double x, int decimals) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(decimals) << x;
  return os.str();
}

std::string pct(double x) { return fmt_fixed(100 * x, 0) + "%"; }

// splitmix64: a portable, seedable source for the document distributions.
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform01() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() {
    const double u1 = uniform01(), u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
};

// "key=value,key=value" -> map; every key must be in `allowed`.
std::map<std::string, double> parse_params(const std::string& spec, const std::string& params,
                                           const std::vector<std::string>& allowed) {
  std::map<std::string, double> out;
  std::stringstream ss(params);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    CP_CHECK_USAGE(eq != std::string::npos, "--doc-dist '", spec, "': expected key=value, got '", item, "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    CP_CHECK_USAGE(std::find(allowed.begin(), allowed.end(), key) != allowed.end(), "--doc-dist '", spec,
                   "': unknown parameter '", key, "' (known: ", join(allowed), ")");
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    CP_CHECK_USAGE(used == value.size() && !value.empty(), "--doc-dist '", spec, "': ", key, " must be a number, got '",
                   value, "'");
    out[key] = v;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// presets
// ---------------------------------------------------------------------------------------------------

const std::vector<ModelShape>& model_presets() {
  static const std::vector<ModelShape> all = {
      {"llama3-8b", 32, 4096, 32, 8, 128},
      {"llama3-70b", 80, 8192, 64, 8, 128},
      {"qwen2.5-7b", 28, 3584, 28, 4, 128},
      {"mistral-7b", 32, 4096, 32, 8, 128},
  };
  return all;
}

const std::vector<Cluster>& cluster_presets() {
  // Achieved bf16 attention FLOP/s of FlashAttention-3-class kernels on Hopper (~600 TFLOP/s forward,
  // peers-and-limits §9.4); H200 is the same GH100 compute with more HBM. NVLink 4: ~400 GB/s per GPU
  // and direction in practice; 400 Gb/s InfiniBand: one NIC per GPU, 50 GB/s.
  static const std::vector<Cluster> all = {
      {"h100-nvlink", 600e12, 400e9, 400e9, 5e-6, 8, 80e9,
       "H100 SXM 80 GB, every rank on NVLink (one node, or an NVLink Switch domain across nodes)"},
      {"h200-nvlink", 600e12, 400e9, 400e9, 5e-6, 8, 141e9,
       "H200 SXM 141 GB, every rank on NVLink (one node, or an NVLink Switch domain across nodes)"},
      {"h100-ib400", 600e12, 400e9, 50e9, 10e-6, 8, 80e9,
       "H100 SXM 80 GB, 8 per node on NVLink, nodes over 400 Gb/s InfiniBand (one NIC per GPU)"},
      {"h200-ib400", 600e12, 400e9, 50e9, 10e-6, 8, 141e9,
       "H200 SXM 141 GB, 8 per node on NVLink, nodes over 400 Gb/s InfiniBand (one NIC per GPU)"},
  };
  return all;
}

ModelShape model_preset(const std::string& name) {
  for (const auto& m : model_presets())
    if (m.name == name) return m;
  if (name == "tiny" || name == "small") {
    const ModelConfig c = ModelConfig::preset_named(name);
    return {name, c.layers, c.hidden, c.heads, c.kv_heads, c.hidden / c.heads};
  }
  std::vector<std::string> known;
  for (const auto& m : model_presets()) known.push_back(m.name);
  known.push_back("tiny");
  known.push_back("small");
  throw UsageError(detail::concat("--model: unknown model preset '", name, "' (known: ", join(known), ")"));
}

Cluster cluster_preset(const std::string& name) {
  for (const auto& c : cluster_presets())
    if (c.name == name) return c;
  std::vector<std::string> known;
  for (const auto& c : cluster_presets()) known.push_back(c.name);
  throw UsageError(detail::concat("--cluster: unknown cluster preset '", name, "' (known: ", join(known), ")"));
}

Kernel parse_kernel(const std::string& text) {
  if (text == "pairs") return Kernel::pairs;
  if (text == "blocks") return Kernel::blocks;
  throw UsageError("--kernel: unknown kernel model '" + text + "' (known: pairs, blocks)");
}

std::string to_string(Kernel k) { return k == Kernel::pairs ? "pairs" : "blocks"; }

int64_t dtype_size(const std::string& d) {
  if (d == "bf16" || d == "bfloat16" || d == "fp16" || d == "float16") return 2;
  if (d == "fp32" || d == "float32") return 4;
  if (d == "fp64" || d == "float64") return 8;
  throw UsageError("--dtype: unknown dtype '" + d + "' (known: bf16, fp16, fp32, fp64)");
}

std::vector<int64_t> draw_documents(const std::string& spec, int64_t seq_len) {
  CP_CHECK_USAGE(seq_len >= 1, "--doc-dist needs --seq-len (the tokens the documents fill), got ", seq_len);
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string params = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::function<double(SplitMix&)> draw;
  uint64_t seed = 0;
  if (kind == "lognormal") {
    auto p = parse_params(spec, params, {"mean", "sigma", "seed"});
    CP_CHECK_USAGE(p.count("mean") && p["mean"] >= 1, "--doc-dist '", spec, "': lognormal needs mean >= 1");
    const double sigma = p.count("sigma") ? p["sigma"] : 1.0;
    CP_CHECK_USAGE(sigma >= 0, "--doc-dist '", spec, "': sigma must be >= 0");
    const double mu = std::log(p["mean"]) - sigma * sigma / 2;  // so that E[length] = mean
    seed = static_cast<uint64_t>(p.count("seed") ? p["seed"] : 0);
    draw = [mu, sigma](SplitMix& g) { return std::exp(mu + sigma * g.normal()); };
  } else if (kind == "uniform") {
    auto p = parse_params(spec, params, {"min", "max", "seed"});
    CP_CHECK_USAGE(p.count("min") && p.count("max") && p["min"] >= 1 && p["max"] >= p["min"], "--doc-dist '", spec,
                   "': uniform needs 1 <= min <= max");
    const auto lo = static_cast<int64_t>(p["min"]), hi = static_cast<int64_t>(p["max"]);
    seed = static_cast<uint64_t>(p.count("seed") ? p["seed"] : 0);
    draw = [lo, hi](SplitMix& g) {
      return static_cast<double>(lo + static_cast<int64_t>(g.next() % static_cast<uint64_t>(hi - lo + 1)));
    };
  } else {
    throw UsageError(detail::concat("--doc-dist '", spec,
                                    "': unknown distribution (known: lognormal:mean=M,sigma=S,seed=N, "
                                    "uniform:min=A,max=B,seed=N)"));
  }
  SplitMix gen{seed * 0x2545F4914F6CDD1DULL + 1};
  std::vector<int64_t> docs;
  int64_t total = 0;
  while (total < seq_len) {
    const int64_t len = std::clamp<int64_t>(std::llround(draw(gen)), 1, seq_len - total);
    docs.push_back(len);
    total += len;
  }
  return docs;
}

// ---------------------------------------------------------------------------------------------------
// cost model
// ---------------------------------------------------------------------------------------------------

CallTime call_time(const std::string& transport, int64_t W, double c_max, double fwd_bytes, double bwd_bytes, double B,
                   double a, const std::vector<double>& c_fwd, const std::vector<double>& c_local) {
  CallTime t;
  if (W <= 1) {
    t.step_s = kStepFactor * c_max;
    return t;
  }
  const double hops = static_cast<double>(W - 1);
  if (transport == "ring") {
    // Each of the W-1 hops carries one block while the rank computes on the one it holds; the slowest
    // rank's work is assumed spread evenly over its W steps.
    const double hop_f = a + fwd_bytes / hops / B, hop_b = a + bwd_bytes / hops / B;
    const double step_f = c_max / static_cast<double>(W), step_b = kBackwardFactor * step_f;
    t.exposed_s = hops * (std::max(0.0, hop_f - step_f) + std::max(0.0, hop_b - step_b));
    t.transfer_s = hops * (hop_f + hop_b);
    t.step_s = kStepFactor * c_max + t.exposed_s;
    return t;
  }
  if (transport == "allgather") {
    // The K/V all-gather (ring algorithm, W-1 hops) overlaps only the local block; the dK/dV
    // reduce-scatter runs after every block's gradients, fully exposed.
    const double t_ag = hops * a + fwd_bytes / B, t_rs = hops * a + bwd_bytes / B;
    const std::vector<double> c = c_fwd.empty() ? std::vector<double>{c_max} : c_fwd;
    double worst = 0;
    for (size_t r = 0; r < c.size(); ++r) {
      const double local = c_local.empty() ? c[r] / static_cast<double>(W) : c_local[r];
      worst = std::max(worst, std::max(t_ag, local) + (c[r] - local) + kBackwardFactor * c[r]);
    }
    t.step_s = worst + t_rs;
    t.exposed_s = t.step_s - kStepFactor * c_max;
    t.transfer_s = t_ag + t_rs;
    return t;
  }
  throw UsageError(
      detail::concat("the planner has no time model for transport '", transport, "' (known: allgather, ring)"));
}

namespace {

// Per (sharder, W): the layout and its work per rank, shared by every transport.
struct LayoutWork {
  int64_t P = 0, s = 0;
  std::vector<int64_t> pairs, local_pairs, blocks, segments;
};

// Unpacked layouts at one W often pad to the same length and then share the stream and its
// per-position visible counts; building them is most of a case's cost at 1M tokens.
class StreamCache {
 public:
  struct Entry {
    mask_area::Stream stream;
    std::vector<int64_t> visible;
  };
  const Entry& get(const GlobalLayout& g, const std::vector<int64_t>& docs, const mask_area::Mask& mask) {
    if (!g.cu_seqlens_padded.empty()) {
      packed_ = make(g, docs, mask);
      return packed_;
    }
    auto it = unpacked_.find(g.padded_seq_len);
    if (it == unpacked_.end()) it = unpacked_.emplace(g.padded_seq_len, make(g, docs, mask)).first;
    return it->second;
  }

 private:
  static Entry make(const GlobalLayout& g, const std::vector<int64_t>& docs, const mask_area::Mask& mask) {
    Entry e{mask_area::stream_of(g, docs), {}};
    e.visible = mask_area::visible_per_position(e.stream, mask);
    return e;
  }
  std::map<int64_t, Entry> unpacked_;
  Entry packed_;
};

LayoutWork layout_work(const Layout& layout, int64_t W, int64_t seq_len, const std::vector<int64_t>& docs,
                       const std::string& mask_text, const mask_area::Mask& mask, Kernel kernel, StreamCache& cache) {
  LayoutWork w;
  LayoutRequest req;
  req.cp = W;
  req.seq_len = seq_len;
  req.doc_lens = docs;
  req.mask = mask_text;
  req.window = mask.window;
  GlobalLayout g;
  try {
    g = layout.compute(req);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  const StreamCache::Entry& e = cache.get(g, docs, mask);
  w.P = g.padded_seq_len;
  w.s = g.local_len();
  w.pairs = mask_area::rank_areas(g, e.visible);
  w.local_pairs = mask_area::local_block_areas(g, e.stream, mask);
  w.segments = mask_area::rank_segments(g, e.stream);
  if (kernel == Kernel::blocks) w.blocks = mask_area::nonempty_blocks(g, e.stream, mask);
  return w;
}

double max_over_mean(const std::vector<double>& v) {
  if (v.empty()) return 1;
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return mean > 0 ? *std::max_element(v.begin(), v.end()) / mean : 1.0;
}

struct Resolved {
  mask_area::Mask mask;
  int64_t element_size = 2;
};

Resolved validate(PlanRequest& r) {
  const ModelShape& m = r.model;
  CP_CHECK_USAGE(m.layers >= 1 && m.heads >= 1 && m.kv_heads >= 1 && m.head_dim >= 1 && m.hidden >= 1, "model '",
                 m.name, "': --layers, --heads, --kv-heads, --head-dim and --hidden must all be >= 1 (got ", m.layers,
                 ", ", m.heads, ", ", m.kv_heads, ", ", m.head_dim, ", ", m.hidden, "); give --model or all five");
  CP_CHECK_USAGE(m.heads % m.kv_heads == 0, "model '", m.name, "': --heads ", m.heads,
                 " is not a multiple of --kv-heads ", m.kv_heads);
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
  res.mask = mask_area::Mask::parse(r.mask);
  res.element_size = dtype_size(r.dtype);

  if (r.sharders.empty())
    for (const auto& n : known_layouts())
      if (n != "local_only" && n != "sdpa_wrap") r.sharders.push_back(n);
  std::vector<std::string> canonical;
  for (const auto& n : r.sharders) {
    const std::string c_name = make_layout(n)->name();  // UsageError listing the known ones
    if (std::find(canonical.begin(), canonical.end(), c_name) == canonical.end()) canonical.push_back(c_name);
  }
  r.sharders = canonical;
  CP_CHECK_USAGE(!r.transports.empty(), "--transports: give at least one of ", join(known_transports()));
  for (const auto& t : r.transports) {
    (void)make_transport(t);               // UsageError listing the known ones
    (void)call_time(t, 2, 0, 0, 0, 1, 0);  // a time model exists for it
  }
  return res;
}

// Peak attention-path activation memory of one rank (docs/planner.md): what each layer saves for the
// backward (layer input and the attention block's normed input, q, k, v, output, fp32 log-sum-exp),
// plus the transport's own buffers: ring, the double-buffered K/V and dK/dV blocks in flight; allgather,
// the gathered K/V of every layer kept for the backward and the [W] dK/dV buffer of the reduce-scatter.
int64_t peak_activation_bytes(const ModelShape& m, int64_t s, int64_t W, int64_t e, const std::string& transport) {
  const int64_t grad_e = std::max<int64_t>(4, e);
  const int64_t per_layer =
      s * (2 * m.hidden * e + 2 * m.heads * m.head_dim * e + 2 * m.kv_heads * m.head_dim * e + 4 * m.heads);
  const int64_t kv_block = 2 * m.kv_heads * s * m.head_dim * e;
  const int64_t dkv_block = 2 * m.kv_heads * s * m.head_dim * grad_e;
  int64_t saved = m.layers * per_layer, transient = 0;
  if (transport == "ring") {
    transient = W > 1 ? 2 * kv_block + 2 * dkv_block : 0;
  } else {
    saved += m.layers * (W - 1) * kv_block;
    transient = W > 1 ? W * dkv_block : 0;
  }
  return saved + transient;
}

PlanCase make_case(const PlanRequest& r, const Resolved& res, const LayoutWork& w, const std::string& sharder,
                   const std::string& transport, int64_t W, double ideal_s) {
  PlanCase c;
  c.sharder = sharder;
  c.transport = transport;
  c.cp = W;
  c.ideal_s = ideal_s;
  const ModelShape& m = r.model;
  const double L = static_cast<double>(m.layers);
  const double unit = 4.0 * static_cast<double>(m.heads * m.head_dim);  // FLOPs per visible pair, fwd
  const double F = r.cluster.attention_flops;
  c.padded_seq_len = w.P;
  c.local_tokens = w.s;
  const double s2 = static_cast<double>(w.s) * static_cast<double>(w.s);
  std::vector<double> work(w.pairs.size()), c_fwd(w.pairs.size()), c_local(w.pairs.size());
  for (size_t i = 0; i < w.pairs.size(); ++i) {
    c.attention_flops_per_rank.push_back(L * unit * static_cast<double>(w.pairs[i]));
    const bool blocks = r.kernel == Kernel::blocks;
    work[i] = blocks ? static_cast<double>(w.blocks[i]) * s2 : static_cast<double>(w.pairs[i]);
    const double local = blocks ? (w.local_pairs[i] > 0 ? s2 : 0.0) : static_cast<double>(w.local_pairs[i]);
    c_fwd[i] = unit * work[i] / F;
    c_local[i] = unit * local / F;
  }
  c.imbalance = max_over_mean(c.attention_flops_per_rank);
  c.compute_imbalance = max_over_mean(work);
  const double c_max = *std::max_element(c_fwd.begin(), c_fwd.end());

  const auto t = make_transport(transport);
  const int64_t e = res.element_size;
  const int64_t call_bytes = t->bytes_per_call(W, 1, m.kv_heads, w.s, m.head_dim, e);
  // Both transports send (W-1) K/V blocks in the input dtype in the forward; the rest of the
  // transport's own formula is backward traffic.
  const int64_t fwd_bytes = (W - 1) * 2 * m.kv_heads * w.s * m.head_dim * e;
  CP_CHECK(call_bytes >= fwd_bytes, "planner: transport ", transport, " reports ", call_bytes,
           " bytes per call, less than its forward K/V traffic ", fwd_bytes);
  const double bw = W <= r.cluster.gpus_per_node ? r.cluster.intra_bandwidth : r.cluster.inter_bandwidth;
  const CallTime ct = call_time(transport, W, c_max, static_cast<double>(fwd_bytes),
                                static_cast<double>(call_bytes - fwd_bytes), bw, r.cluster.latency_s, c_fwd, c_local);
  c.bytes_per_rank = m.layers * call_bytes;
  c.compute_s = L * kStepFactor * c_max;
  c.transfer_s = L * ct.transfer_s;
  c.exposed_comm_s = L * ct.exposed_s;
  c.predicted_step_s = L * ct.step_s;
  c.efficiency = c.predicted_step_s > 0 ? ideal_s / c.predicted_step_s : 1.0;
  c.max_segments = *std::max_element(w.segments.begin(), w.segments.end());
  c.peak_activation_bytes = peak_activation_bytes(m, w.s, W, e, transport);
  c.fits_memory = r.cluster.memory_bytes <= 0 || static_cast<double>(c.peak_activation_bytes) <= r.cluster.memory_bytes;
  return c;
}

std::string label(const PlanCase& c) { return c.sharder + "/" + c.transport; }

// Why `b` ranks above `u`: which part of the step makes the difference.
std::string versus(const PlanCase& b, const PlanCase& u) {
  const double gap = u.predicted_step_s / b.predicted_step_s - 1;
  std::string s = label(u) + " ";
  if (b.fits_memory && !u.fits_memory)
    return s + "does not fit in device memory (" + fmt_bytes(static_cast<double>(u.peak_activation_bytes)) + ")";
  if (gap < 0.01) {
    s += "is within 1% (" + fmt_time(u.predicted_step_s) + ")";
    if (u.max_segments > b.max_segments)
      return s + " but cuts a rank's tokens into " + std::to_string(u.max_segments) + " segments vs " +
             std::to_string(b.max_segments) + " (smaller, less efficient kernel calls; not in the time model)";
    if (u.peak_activation_bytes > b.peak_activation_bytes)
      return s + " but needs more activation memory (" + fmt_bytes(static_cast<double>(u.peak_activation_bytes)) +
             " vs " + fmt_bytes(static_cast<double>(b.peak_activation_bytes)) + ")";
    return s + "; the simpler layout is preferred";
  }
  s += "is " + pct(gap) + " slower: ";
  const double d_compute = u.compute_s - b.compute_s, d_exposed = u.exposed_comm_s - b.exposed_comm_s;
  if (d_compute >= d_exposed)
    return s + "its slowest rank computes " + fmt_time(u.compute_s) + " vs " + fmt_time(b.compute_s) + " (imbalance " +
           fmt_fixed(u.imbalance, 3) + " vs " + fmt_fixed(b.imbalance, 3) +
           (u.padded_seq_len > b.padded_seq_len ? ", padding to " + std::to_string(u.padded_seq_len) + " tokens" : "") +
           ")";
  return s + "it exposes " + fmt_time(u.exposed_comm_s) + " of communication vs " + fmt_time(b.exposed_comm_s);
}

void rank_and_recommend(Plan& plan) {
  const auto& req = plan.request;
  auto order_of = [&](const PlanCase& c) {
    const auto it = std::find(req.sharders.begin(), req.sharders.end(), c.sharder);
    const auto jt = std::find(req.transports.begin(), req.transports.end(), c.transport);
    return std::pair(it - req.sharders.begin(), jt - req.transports.begin());
  };
  std::map<std::string, std::vector<double>> rel;  // label -> step / best step, per cp
  for (int64_t W : req.cps) {
    std::vector<PlanCase*> ok;
    for (auto& c : plan.cases)
      if (c.cp == W) ok.push_back(&c);
    if (ok.empty()) continue;
    // Cases that fit first; then step time in 1% buckets (so near-ties fall to fragmentation, which
    // the time model does not price, then to memory, then to request order), which keeps the
    // ordering a strict weak order.
    bool any_fits = false;
    for (auto* c : ok) any_fits |= c->fits_memory;
    double best = std::numeric_limits<double>::infinity();
    for (auto* c : ok)
      if (c->fits_memory || !any_fits) best = std::min(best, c->predicted_step_s);
    auto key = [&](const PlanCase* c) {
      const auto bucket = static_cast<int64_t>(std::floor((c->predicted_step_s / best - 1) * 100 + 1e-9));
      return std::tuple(!(c->fits_memory || !any_fits), bucket, c->max_segments, c->peak_activation_bytes,
                        order_of(*c));
    };
    std::stable_sort(ok.begin(), ok.end(), [&](const PlanCase* a, const PlanCase* b) { return key(a) < key(b); });
    CpRecommendation cr;
    cr.cp = W;
    for (size_t i = 0; i < ok.size(); ++i) {
      ok[i]->rank = static_cast<int>(i + 1);
      cr.ranking.push_back(label(*ok[i]));
      rel[label(*ok[i])].push_back(ok[i]->predicted_step_s / best);
    }
    const PlanCase& b = *ok[0];
    cr.sharder = b.sharder;
    cr.transport = b.transport;
    cr.predicted_step_s = b.predicted_step_s;
    cr.efficiency = b.efficiency;
    cr.reason = label(b) + " at cp=" + std::to_string(W) + ": " + fmt_time(b.predicted_step_s) +
                " of attention per step, " + pct(b.efficiency) + " parallel efficiency; imbalance " +
                fmt_fixed(b.imbalance, 3) + " (max/mean attention FLOPs), " + fmt_time(b.exposed_comm_s) +
                " of communication exposed (" + fmt_bytes(static_cast<double>(b.bytes_per_rank)) + " sent per rank)";
    if (!b.fits_memory) cr.reason += "; WARNING: no case fits in device memory";
    if (ok.size() > 1) cr.reason += "; " + versus(b, *ok[1]);
    // The best case of a different layout, when the runner-up only differs in transport.
    for (size_t i = 1; i < ok.size(); ++i)
      if (ok[i]->sharder != b.sharder) {
        if (i > 1) cr.reason += "; " + versus(b, *ok[i]);
        break;
      }
    const PlanCase* worst = *std::max_element(
        ok.begin(), ok.end(), [](const PlanCase* x, const PlanCase* y) { return x->imbalance < y->imbalance; });
    if (worst->imbalance > 1.05 && worst->sharder != b.sharder)
      cr.reason += "; least balanced: " + worst->sharder + " (imbalance " + fmt_fixed(worst->imbalance, 3) + ")";
    plan.recommendation.per_cp.push_back(cr);
  }
  if (plan.recommendation.per_cp.empty()) {
    plan.recommendation.reason = "no case could be planned";
    return;
  }
  // Overall: the sharder/transport pair with the lowest mean (step / best step) over the CP sizes it
  // was planned at (pairs missing at some cp are ranked after complete ones).
  const size_t n_cp = plan.recommendation.per_cp.size();
  std::string best_label;
  std::pair<bool, double> best_score{true, 0};
  for (const auto& cr : plan.recommendation.per_cp)
    for (const auto& l : cr.ranking) {
      const auto& v = rel[l];
      const std::pair<bool, double> score{v.size() != n_cp,
                                          std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size())};
      if (best_label.empty() || score < best_score) {
        best_label = l;
        best_score = score;
      }
    }
  Recommendation& rec = plan.recommendation;
  const auto slash = best_label.find('/');
  rec.sharder = best_label.substr(0, slash);
  rec.transport = best_label.substr(slash + 1);
  // The CP size: the largest W at which this pair keeps >= 80% parallel efficiency, else its most
  // efficient W.
  const PlanCase* chosen = nullptr;
  const PlanCase* most_efficient = nullptr;
  for (const auto& c : plan.cases) {
    if (label(c) != best_label) continue;
    if (!most_efficient || c.efficiency > most_efficient->efficiency) most_efficient = &c;
    if (c.efficiency >= 0.8 && c.fits_memory && (!chosen || c.cp > chosen->cp)) chosen = &c;
  }
  const bool kept = chosen != nullptr;
  if (!chosen) chosen = most_efficient;
  rec.cp = chosen->cp;
  rec.predicted_step_s = chosen->predicted_step_s;
  rec.efficiency = chosen->efficiency;
  std::vector<std::string> wins, behind;
  for (const auto& cr : rec.per_cp) {
    if (cr.sharder == rec.sharder && cr.transport == rec.transport) {
      wins.push_back(std::to_string(cr.cp));
    } else {
      for (const auto& c : plan.cases)
        if (c.cp == cr.cp && label(c) == best_label)
          behind.push_back("cp=" + std::to_string(cr.cp) + " " + pct(c.predicted_step_s / cr.predicted_step_s - 1) +
                           " behind " + cr.sharder + "/" + cr.transport);
    }
  }
  rec.reason =
      best_label + (wins.empty() ? "" : " is the best choice at cp " + join(wins)) +
      (behind.empty() ? "" : std::string(wins.empty() ? " ranks best on average; at " : "; at ") + join(behind)) +
      "; cp=" + std::to_string(rec.cp) +
      (kept ? " is the largest CP size that keeps >= 80% parallel efficiency (" + pct(rec.efficiency) + ")"
            : " is its most efficient CP size (" + pct(rec.efficiency) + "; none reaches 80%)");
  for (const auto& cr : rec.per_cp)
    if (cr.cp == rec.cp && cr.sharder == rec.sharder && cr.transport == rec.transport) rec.reason += ". " + cr.reason;
}

}  // namespace

Plan make_plan(const PlanRequest& request) {
  Plan plan;
  plan.request = request;
  PlanRequest& r = plan.request;
  const Resolved res = validate(r);
  const ModelShape& m = r.model;

  // The unsharded row: what one device would compute (the "ideal" divides it by W).
  const mask_area::Stream row = mask_area::unpacked_stream(r.seq_len, r.doc_lens, r.seq_len);
  const int64_t row_pairs = mask_area::run_area(row, res.mask, 0, r.seq_len);
  plan.real_tokens = row.valid_tokens();
  const double unit = 4.0 * static_cast<double>(m.heads * m.head_dim);
  plan.total_attention_flops = static_cast<double>(m.layers) * unit * static_cast<double>(row_pairs);
  const double total_time = kStepFactor * plan.total_attention_flops / r.cluster.attention_flops;

  for (int64_t W : r.cps) {
    StreamCache cache;
    for (const auto& sharder : r.sharders) {
      const auto layout = make_layout(sharder);
      const LayoutWork w = layout_work(*layout, W, r.seq_len, r.doc_lens, r.mask, res.mask, r.kernel, cache);
      for (const auto& transport : r.transports)
        plan.cases.push_back(make_case(r, res, w, sharder, transport, W, total_time / static_cast<double>(W)));
    }
  }
  if (res.mask.kind == mask_area::Mask::Kind::document && r.doc_lens.empty())
    plan.notes.push_back("--mask document without --doc-lens / --doc-dist: the row is one document (plain causal)");
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
  return plan;
}

std::vector<double> predicted_rank_flops(const std::string& sharder, int64_t cp, int64_t seq_len,
                                         const std::vector<int64_t>& doc_lens, const std::string& mask_text,
                                         int64_t q_heads, int64_t head_dim, Kernel kernel) {
  const auto layout = make_layout(sharder);
  const mask_area::Mask mask = mask_area::Mask::parse(mask_text);
  StreamCache cache;
  const LayoutWork w = layout_work(*layout, cp, seq_len, doc_lens, mask_text, mask, kernel, cache);
  const double unit = 4.0 * static_cast<double>(q_heads * head_dim);
  const double s2 = static_cast<double>(w.s) * static_cast<double>(w.s);
  std::vector<double> out;
  for (size_t i = 0; i < w.pairs.size(); ++i)
    out.push_back(unit *
                  (kernel == Kernel::blocks ? static_cast<double>(w.blocks[i]) * s2 : static_cast<double>(w.pairs[i])));
  return out;
}

// ---------------------------------------------------------------------------------------------------
// output
// ---------------------------------------------------------------------------------------------------

nlohmann::json plan_to_json(const Plan& plan) {
  using nlohmann::json;
  const auto& r = plan.request;
  json j;
  j["model"] = {{"name", r.model.name},   {"layers", r.model.layers},     {"hidden", r.model.hidden},
                {"heads", r.model.heads}, {"kv_heads", r.model.kv_heads}, {"head_dim", r.model.head_dim}};
  j["workload"] = {{"seq_len", r.seq_len},
                   {"real_tokens", plan.real_tokens},
                   {"documents", r.doc_lens.size()},
                   {"doc_lens", r.doc_lens},
                   {"mask", r.mask},
                   {"dtype", r.dtype},
                   {"total_attention_flops", plan.total_attention_flops}};
  j["cluster"] = {{"name", r.cluster.name},
                  {"attention_flops", r.cluster.attention_flops},
                  {"intra_bandwidth", r.cluster.intra_bandwidth},
                  {"inter_bandwidth", r.cluster.inter_bandwidth},
                  {"latency_s", r.cluster.latency_s},
                  {"gpus_per_node", r.cluster.gpus_per_node},
                  {"memory_bytes", r.cluster.memory_bytes}};
  j["kernel"] = to_string(r.kernel);
  json cases = json::array();
  for (const auto& c : plan.cases) {
    json k = {{"sharder", c.sharder}, {"transport", c.transport}, {"cp", c.cp}};
    k["rank"] = c.rank;
    k["imbalance"] = c.imbalance;
    k["compute_imbalance"] = c.compute_imbalance;
    k["attention_flops_per_rank"] = c.attention_flops_per_rank;
    k["bytes_per_rank"] = c.bytes_per_rank;
    k["predicted_step_s"] = c.predicted_step_s;
    k["efficiency"] = c.efficiency;
    k["ideal_s"] = c.ideal_s;
    k["compute_s"] = c.compute_s;
    k["transfer_s"] = c.transfer_s;
    k["exposed_comm_s"] = c.exposed_comm_s;
    k["peak_activation_bytes"] = c.peak_activation_bytes;
    k["max_segments"] = c.max_segments;
    k["fits_memory"] = c.fits_memory;
    k["padded_seq_len"] = c.padded_seq_len;
    k["local_tokens"] = c.local_tokens;
    cases.push_back(k);
  }
  j["cases"] = cases;
  const auto& rec = plan.recommendation;
  json per_cp = json::array();
  for (const auto& cr : rec.per_cp)
    per_cp.push_back({{"cp", cr.cp},
                      {"sharder", cr.sharder},
                      {"transport", cr.transport},
                      {"predicted_step_s", cr.predicted_step_s},
                      {"efficiency", cr.efficiency},
                      {"ranking", cr.ranking},
                      {"reason", cr.reason}});
  j["recommendation"] = {{"sharder", rec.sharder},
                         {"transport", rec.transport},
                         {"cp", rec.cp},
                         {"predicted_step_s", rec.predicted_step_s},
                         {"efficiency", rec.efficiency},
                         {"reason", rec.reason},
                         {"per_cp", per_cp}};
  j["notes"] = plan.notes;
  return j;
}

std::string plan_to_table(const Plan& plan) {
  const auto& r = plan.request;
  std::ostringstream os;
  os << "model " << r.model.name << ": " << r.model.layers << " layers, " << r.model.heads << " heads / "
     << r.model.kv_heads << " kv heads x " << r.model.head_dim << ", hidden " << r.model.hidden << "\n";
  os << "workload: " << r.seq_len << " tokens";
  if (!r.doc_lens.empty()) os << " (" << r.doc_lens.size() << " documents, " << plan.real_tokens << " real tokens)";
  os << ", mask " << r.mask << ", " << r.dtype << ", unsharded attention " << fmt(plan.total_attention_flops)
     << " FLOP fwd per step\n";
  os << "cluster " << r.cluster.name << ": " << fmt(r.cluster.attention_flops / 1e12) << " TFLOP/s attention, "
     << fmt(r.cluster.intra_bandwidth / 1e9) << " GB/s intra-node, " << fmt(r.cluster.inter_bandwidth / 1e9)
     << " GB/s inter-node, " << fmt_time(r.cluster.latency_s) << " latency, " << r.cluster.gpus_per_node
     << " GPUs per node; kernel model " << to_string(r.kernel) << "\n";
  for (int64_t W : r.cps) {
    std::vector<const PlanCase*> rows;
    for (const auto& c : plan.cases)
      if (c.cp == W) rows.push_back(&c);
    std::stable_sort(rows.begin(), rows.end(), [](const PlanCase* a, const PlanCase* b) { return a->rank < b->rank; });
    os << "\ncp=" << W << "  (ideal " << fmt_time(rows.empty() ? 0 : rows[0]->ideal_s) << " per step)\n";
    os << std::left << std::setw(5) << "rank" << std::setw(19) << "sharder" << std::setw(11) << "transport"
       << std::right << std::setw(10) << "imbalance" << std::setw(12) << "step" << std::setw(12) << "exposed"
       << std::setw(7) << "eff" << std::setw(13) << "sent/rank" << std::setw(13) << "act.mem" << std::setw(10)
       << "segments"
       << "\n";
    for (const auto* c : rows) {
      os << std::left << std::setw(5) << c->rank << std::setw(19) << c->sharder << std::setw(11) << c->transport
         << std::right;
      os << std::setw(10) << fmt_fixed(c->imbalance, 3) << std::setw(12) << fmt_time(c->predicted_step_s)
         << std::setw(12) << fmt_time(c->exposed_comm_s) << std::setw(7) << pct(c->efficiency) << std::setw(13)
         << fmt_bytes(static_cast<double>(c->bytes_per_rank)) << std::setw(13)
         << fmt_bytes(static_cast<double>(c->peak_activation_bytes)) << std::setw(10) << c->max_segments
         << (c->fits_memory ? "" : "  (does not fit)") << "\n";
    }
  }
  for (const auto& n : plan.notes) os << "\nnote: " << n;
  if (!plan.notes.empty()) os << "\n";
  const auto& rec = plan.recommendation;
  os << "\nrecommendation: " << rec.sharder << " + " << rec.transport << " at cp=" << rec.cp << "\n  " << rec.reason
     << "\n";
  for (const auto& cr : rec.per_cp) os << "  cp=" << cr.cp << ": " << cr.reason << "\n";
  return os.str();
}

// ---------------------------------------------------------------------------------------------------
// calibration
// ---------------------------------------------------------------------------------------------------

Calibration calibrate(const Report& report) {
  Calibration cal;
  double sum_f = 0, sum_t = 0;
  std::vector<double> rates;
  struct CommSample {
    std::string transport;
    int64_t cp;
    double fwd_bytes, bwd_bytes, c_fwd, exposed;
  };
  std::vector<CommSample> comm;
  for (const auto& res : report.results) {
    if (res.status != "ok" || res.ranks.empty()) continue;
    ++cal.results;
    const RankStats* slowest = nullptr;
    for (const auto& rs : res.ranks) {
      const double t = rs.attention_s;  // attention maths only (reports/result.hpp)
      if (rs.attention_flops <= 0 || t <= 0) continue;
      sum_f += rs.attention_flops;
      sum_t += t;
      rates.push_back(kStepFactor * rs.attention_flops / t);
      ++cal.rank_samples;
      if (!slowest || t > slowest->attention_s) slowest = &rs;
    }
    const auto axis = [&](const char* k) {
      const auto it = res.axes.find(k);
      return it == res.axes.end() ? std::string() : it->second;
    };
    const std::string transport = axis("transport"), cp_text = axis("cp"), dtype = axis("dtype");
    if (!slowest || slowest->bytes_sent <= 0 || cp_text.empty() || dtype.empty()) continue;
    if (transport != "ring" && transport != "allgather") continue;
    int64_t W = 0, e = 0;
    try {
      W = std::stoll(cp_text);
      e = dtype_size(dtype);
    } catch (const std::exception&) {
      continue;
    }
    if (W < 2) continue;
    // The forward's share of the transport's own byte formula (see make_case).
    const double total_unit = static_cast<double>(make_transport(transport)->bytes_per_call(W, 1, 1, 1, 1, e));
    const double fwd_share = static_cast<double>((W - 1) * 2 * e) / total_unit;
    comm.push_back({transport, W, slowest->bytes_sent * fwd_share, slowest->bytes_sent * (1 - fwd_share),
                    slowest->attention_s / kStepFactor, slowest->comm_s});
  }
  if (sum_t > 0) {
    cal.attention_flops = kStepFactor * sum_f / sum_t;
    double var = 0;
    for (double x : rates) var += (x - cal.attention_flops) * (x - cal.attention_flops);
    cal.flops_spread = std::sqrt(var / static_cast<double>(rates.size())) / cal.attention_flops;
  } else {
    cal.notes.push_back("no ok result with attention FLOPs and compute time; FLOP/s not fitted");
  }
  cal.comm_samples = static_cast<int64_t>(comm.size());
  double sum_e = 0;
  for (const auto& c : comm) sum_e += c.exposed;
  if (comm.empty()) {
    cal.notes.push_back("no ok result with cp > 1 and bytes sent; bandwidth not fitted");
  } else if (sum_e <= 0) {
    cal.notes.push_back("communication was fully hidden in every measured case; bandwidth not fitted");
  } else {
    // Least squares over log10(bandwidth): a grid of 0.01 decades, then golden-section refinement.
    auto sse = [&](double log_b) {
      const double b = std::pow(10.0, log_b);
      double s = 0;
      for (const auto& c : comm) {
        const double d = call_time(c.transport, c.cp, c.c_fwd, c.fwd_bytes, c.bwd_bytes, b, 0).exposed_s - c.exposed;
        s += d * d;
      }
      return s;
    };
    double best = 3, best_v = sse(3);
    for (int i = 1; i <= 1100; ++i) {
      const double x = 3 + 0.01 * i;
      const double v = sse(x);
      if (v < best_v) {
        best = x;
        best_v = v;
      }
    }
    if (best >= 14 - 1e-9 || best <= 3 + 1e-9) {
      cal.notes.push_back(detail::concat("the exposed communication fits no bandwidth between 1e3 and 1e14 B/s (",
                                         best > 10 ? "too little exposed" : "too much exposed",
                                         "); bandwidth not fitted"));
      return cal;
    }
    double lo = best - 0.01, hi = best + 0.01;
    const double g = (std::sqrt(5.0) - 1) / 2;
    for (int i = 0; i < 60; ++i) {
      const double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
      if (sse(a) < sse(b))
        hi = b;
      else
        lo = a;
    }
    cal.bandwidth = std::pow(10.0, (lo + hi) / 2);
    const double mean_e = sum_e / static_cast<double>(comm.size());
    cal.bandwidth_rms_error = std::sqrt(sse((lo + hi) / 2) / static_cast<double>(comm.size())) / mean_e;
  }
  return cal;
}

Cluster calibrated(const Cluster& c, const Calibration& cal) {
  Cluster out = c;
  out.name = c.name + "+calibrated";
  if (cal.attention_flops > 0) out.attention_flops = cal.attention_flops;
  if (cal.bandwidth > 0) out.intra_bandwidth = out.inter_bandwidth = cal.bandwidth;
  return out;
}

nlohmann::json calibration_to_json(const Calibration& c) {
  return {{"attention_flops", c.attention_flops},
          {"bandwidth", c.bandwidth},
          {"flops_spread", c.flops_spread},
          {"bandwidth_rms_error", c.bandwidth_rms_error},
          {"results", c.results},
          {"rank_samples", c.rank_samples},
          {"comm_samples", c.comm_samples},
          {"notes", c.notes}};
}

std::string calibration_to_text(const Calibration& c) {
  std::ostringstream os;
  os << "calibration from " << c.results << " ok results (" << c.rank_samples << " rank samples, " << c.comm_samples
     << " with communication):\n";
  if (c.attention_flops > 0)
    os << "  attention " << fmt(c.attention_flops) << " FLOP/s (forward-equivalent; per-rank spread "
       << pct(c.flops_spread) << ")\n";
  if (c.bandwidth > 0)
    os << "  bandwidth " << fmt(c.bandwidth) << " B/s (exposed-communication fit, relative RMS error "
       << pct(c.bandwidth_rms_error) << ")\n";
  for (const auto& n : c.notes) os << "  note: " << n << "\n";
  return os.str();
}

int64_t attention_activation_bytes(const ModelShape& model, int64_t local_tokens, int64_t cp, int64_t element_size,
                                   const std::string& transport) {
  return peak_activation_bytes(model, local_tokens, cp, element_size, transport);
}

}  // namespace cpbench::plan
