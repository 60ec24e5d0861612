#include "harness/planner/presets.hpp"

#include "harness/model/model.hpp"
#include "harness/planner/format.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan {

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

}  // namespace cpbench::plan
