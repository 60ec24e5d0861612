#include "harness/planner/presets.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "harness/fs_util.hpp"

#include "harness/model/model.hpp"
#include "harness/planner/format.hpp"
#include "harness/runner/device_peaks.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan {

int64_t ModelShape::attention_layers() const { return count_layers(mixers, layers, kDefaultMixer); }
int64_t ModelShape::layers_of(char letter) const { return count_layers(mixers, layers, letter); }

namespace {

// HfModel does not carry tie_word_embeddings; the step's parameter count needs it (a tied LM head is no
// second vocab x hidden matrix). Read from the config's own text; absent or unreadable: untied.
bool tied_embeddings(const HfModel& h) {
  std::string text;
  if (const ShippedModel* s = find_shipped_model(h.name); s && h.file == s->path) text = s->text;
  else if (!h.file.empty() && fsu::exists(h.file)) {
    std::ifstream in(h.file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) return false;
  try {
    const auto j = nlohmann::json::parse(text);
    const auto& t = j.contains("text_config") ? j["text_config"] : j;
    if (t.contains("tie_word_embeddings") && t["tie_word_embeddings"].is_boolean()) return t["tie_word_embeddings"].get<bool>();
    if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()) return j["tie_word_embeddings"].get<bool>();
  } catch (const std::exception&) {
  }
  return false;
}

}  // namespace

ModelShape model_shape(const HfModel& h) {
  ModelShape m;
  m.name = h.name;
  m.layers = static_cast<int64_t>(h.mixers.size());
  m.hidden = h.hidden;
  m.heads = h.heads;
  m.kv_heads = h.kv_heads;
  m.head_dim = h.head_dim;
  static_cast<MixerConfigs&>(m) = h;
  if (h.mixers.find_first_not_of(kDefaultMixer) != std::string::npos) m.mixers = h.mixers;
  m.sliding_window = h.sliding_window;
  m.sliding_layers = h.sliding_layers();
  m.source = h.file;
  m.vocab = h.vocab;
  m.ffn = h.ffn;
  m.mlp_layers = h.mlp_layers;
  m.moe_layers = h.moe_layers;
  m.experts = h.experts;
  m.experts_per_token = h.experts_per_token;
  m.shared_experts = h.shared_experts;
  m.q_lora_rank = h.q_lora_rank;
  m.gated_mlp = h.model_type != "nemotron_h";
  m.tied_embeddings = tied_embeddings(h);
  return m;
}

const std::vector<ModelShape>& model_presets() {
  static const std::vector<ModelShape> all = [] {
    std::vector<ModelShape> v;
    for (const auto& s : shipped_models()) v.push_back(model_shape(parse_hf_config(s.text, s.path, s.name)));
    return v;
  }();
  return all;
}

namespace {

// The kernel model fitted to ring-flash-attention's published 8 x H800 fwd + bwd table (docs/planner.md,
// "The kernel model"; PlanKernelModel.* in tests/unit/plan_test.cpp): causal_penalty and contention
// are fitted (least squares on the three efficiencies, F from the "theoretic" step); the others are
// priors. FlashAttention-2's forward sweep reaches ~71% / ~91% of its 16K-token rate at 512 / 2K keys
// per row: k / (k + 200). launch 10 us: a kernel launch plus the host work around one block call.
// Merge bytes per element, counted from the passes of a torch-level fp32 merge (ring-flash-attention's
// _update_out_and_lse: convert 6, subtract 12, scale 8, subtract 12 = 38) and of the backward (FA2's
// dO.O and dQ-accumulator passes 14 + dq += 10 = 24; dk, dv += 10 each). HBM: ~90% of the spec.
KernelModel fitted_kernel(double hbm_bandwidth, const std::string& source) {
  KernelModel k;
  k.causal_penalty = 1.1325;
  k.row_overhead_keys = 200;
  k.launch_s = 10e-6;
  k.hbm_bandwidth = hbm_bandwidth;
  k.merge_bytes = 38;
  k.dq_bytes = 24;
  k.dkv_bytes = 10;
  k.contention = 0.59;
  k.source = source;
  return k;
}

// The dense bf16 peak of a GPU from the runner's device table (harness/runner/device_peaks.hpp: one source
// for the datasheets' figures); FP8 is twice it on Hopper and Blackwell.
double bf16_peak(const std::string& device) {
  const auto d = find_device_peak(device, 0);
  CP_CHECK(d.has_value(), "cluster presets: no device peak for '", device, "'");
  return d->bf16;
}

}  // namespace

const std::vector<Cluster>& cluster_presets() {
  // Achieved bf16 attention FLOP/s of FlashAttention-3-class kernels on Hopper (~600 TFLOP/s forward,
  // peers-and-limits §9.4); H200 is the same GH100 compute with more HBM. NVLink 4: ~400 GB/s per GPU
  // and direction in practice; 400 Gb/s InfiniBand: one NIC per GPU, 50 GB/s. H800: NVLink cut to
  // 400 GB/s bidirectional (200 GB/s per direction); its F is the kernel fit's dense-block peak of a
  // FlashAttention-2 kernel (ring-flash-attention's setting).
  static const std::string carried =
      "fitted on ring-flash-attention's 8 x H800 table; dimensionless constants carried over, F and HBM of this GPU";
  // Dense GEMM peaks (no sparsity): the runner's device table (device_peaks.hpp) for H100 / H200 / H800
  // (the same GH100 compute), A100 (no FP8: 0, --precision fp8 is refused) and B200; GB200 and GB300 2.5
  // / 5 PFLOP/s per GPU (NVIDIA's GB200 NVL72 figures / 72). Host links per GPU and direction: PCIe Gen4 x16 ~25 GB/s,
  // Gen5 ~50 GB/s, Grace's NVLink-C2C 900 GB/s shared by two GPUs (~200 GB/s each in practice).
  // Memory: what torch reports as the device's total (an 80 GB H100 79.2 GiB, A100 79.3, H200 140.4;
  // B200 178, GB200's 186 GB 173, GB300's 288 GB 268).
  static constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  static const double H100 = bf16_peak("NVIDIA H100 80GB HBM3");
  static const std::vector<Cluster> all = {
      {"h100-nvlink", 600e12, 400e9, 400e9, 5e-6, 8, 79.2 * GiB,
       "H100 SXM 80 GB, every rank on NVLink (one node, or an NVLink Switch domain across nodes)",
       fitted_kernel(3.0e12, carried), 150e12, H100, 2 * H100, 50e9},
      {"h200-nvlink", 600e12, 400e9, 400e9, 5e-6, 8, 140.4 * GiB,
       "H200 SXM 141 GB, every rank on NVLink (one node, or an NVLink Switch domain across nodes)",
       fitted_kernel(4.3e12, carried), 150e12, H100, 2 * H100, 50e9},
      {"h100-ib400", 600e12, 400e9, 50e9, 10e-6, 8, 79.2 * GiB,
       "H100 SXM 80 GB, 8 per node on NVLink, nodes over 400 Gb/s InfiniBand (one NIC per GPU)",
       fitted_kernel(3.0e12, carried), 150e12, H100, 2 * H100, 50e9},
      {"h200-ib400", 600e12, 400e9, 50e9, 10e-6, 8, 140.4 * GiB,
       "H200 SXM 141 GB, 8 per node on NVLink, nodes over 400 Gb/s InfiniBand (one NIC per GPU)",
       fitted_kernel(4.3e12, carried), 150e12, H100, 2 * H100, 50e9},
      {"h800-nvlink", 338.3e12, 200e9, 200e9, 5e-6, 8, 79.2 * GiB,
       "H800 SXM 80 GB, 8 on NVLink at 200 GB/s per direction, FlashAttention-2 kernels (ring-flash-attention's "
       "benchmark machine)",
       fitted_kernel(3.0e12, "fitted on ring-flash-attention's 8 x H800 fwd + bwd table"), 338.3e12 / 4, H100,
       2 * H100, 50e9},
      // A100: FlashAttention-2's dense-block forward peak ~230 TFLOP/s (its paper: up to 73% of 312);
      // NVLink 3 600 GB/s both ways, ~240 GB/s per direction in practice; 200 Gb/s HDR InfiniBand per GPU.
      {"a100-nvlink", 230e12, 240e9, 25e9, 10e-6, 8, 79.3 * GiB,
       "A100 SXM 80 GB, 8 per node on NVLink 3, nodes over 200 Gb/s HDR InfiniBand (one NIC per GPU)",
       fitted_kernel(2.0e12, carried), 230e12 / 4, bf16_peak("NVIDIA A100-SXM4-80GB"), 0, 25e9},
      // Blackwell: attention ~1.2 PFLOP/s forward (FlashAttention-4-class kernels, about half the dense
      // peak), NVLink 5 1.8 TB/s both ways, ~750 GB/s per direction in practice; 400 Gb/s NICs (HGX) or
      // 800 Gb/s (GB300's ConnectX-8).
      {"b200", 1200e12, 750e9, 50e9, 10e-6, 8, 178 * GiB,
       "B200 192 GB (HGX), 8 per node on NVLink 5, nodes over 400 Gb/s InfiniBand (one NIC per GPU)",
       fitted_kernel(8.0e12, carried), 300e12, bf16_peak("NVIDIA B200"), 2 * bf16_peak("NVIDIA B200"), 50e9},
      {"gb200", 1200e12, 750e9, 50e9, 5e-6, 72, 173 * GiB,
       "GB200 NVL72: 72 B200-class GPUs (186 GB) in one NVLink 5 domain, racks over 400 Gb/s InfiniBand",
       fitted_kernel(8.0e12, carried), 300e12, 2500e12, 5000e12, 200e9},
      {"gb300", 1200e12, 750e9, 100e9, 5e-6, 72, 268 * GiB,
       "GB300 NVL72: 72 Blackwell Ultra GPUs (288 GB) in one NVLink 5 domain, racks over 800 Gb/s ConnectX-8",
       fitted_kernel(8.0e12, carried), 300e12, 2500e12, 5000e12, 200e9},
  };
  return all;
}

std::string default_cluster(const std::vector<int64_t>& cps) {
  const Cluster nvlink = cluster_preset("h100-nvlink");
  for (int64_t W : cps)
    if (W > nvlink.gpus_per_node) return "h100-ib400";
  return nvlink.name;
}

ModelShape model_preset(const std::string& name) {
  for (const auto& m : model_presets())
    if (m.name == name) return m;
  if (const auto tiny = ModelConfig::preset_names(); std::find(tiny.begin(), tiny.end(), name) != tiny.end()) {
    const ModelConfig c = ModelConfig::preset_named(name);
    ModelShape m;
    m.name = name;
    m.layers = c.layers;
    m.hidden = c.hidden;
    m.heads = c.heads;
    m.kv_heads = c.kv_heads;
    m.head_dim = c.head_dim();
    if (c.mixers.find_first_not_of(kDefaultMixer) != std::string::npos) m.mixers = c.mixers;
    static_cast<MixerConfigs&>(m) = c;
    return m;
  }
  std::vector<std::string> known;
  for (const auto& m : model_presets()) known.push_back(m.name);
  for (const auto& t : ModelConfig::preset_names()) known.push_back(t);
  throw UsageError(detail::concat("--model: unknown model preset '", name, "' (known: ", join(known),
                                  "; or a path to a Hugging Face config.json)"));
}

Cluster cluster_preset(const std::string& name) {
  for (const auto& c : cluster_presets())
    if (c.name == name) return c;
  std::vector<std::string> known;
  for (const auto& c : cluster_presets()) known.push_back(c.name);
  throw UsageError(detail::concat("--cluster: unknown cluster preset '", name, "' (known: ", join(known), ")"));
}

Kernel parse_kernel(const std::string& text) {
  if (text == "fitted") return Kernel::fitted;
  if (text == "pairs") return Kernel::pairs;
  if (text == "blocks") return Kernel::blocks;
  throw UsageError("--kernel: unknown kernel model '" + text + "' (known: fitted, pairs, blocks)");
}

std::string to_string(Kernel k) {
  switch (k) {
    case Kernel::fitted:
      return "fitted";
    case Kernel::pairs:
      return "pairs";
    case Kernel::blocks:
      return "blocks";
  }
  return "?";
}

Pass parse_pass(const std::string& text) {
  if (text == "train") return Pass::train;
  if (text == "forward") return Pass::forward;
  throw UsageError("--pass: unknown pass '" + text + "' (known: train, forward)");
}

std::string to_string(Pass p) { return p == Pass::train ? "train" : "forward"; }

int64_t dtype_size(const std::string& d) {
  if (d == "bf16" || d == "bfloat16" || d == "fp16" || d == "float16") return 2;
  if (d == "fp32" || d == "float32") return 4;
  if (d == "fp64" || d == "float64") return 8;
  throw UsageError("--dtype: unknown dtype '" + d + "' (known: bf16, fp16, fp32, fp64)");
}

}  // namespace cpbench::plan
