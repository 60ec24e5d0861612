#pragma once
// The planner's named inputs: model shapes, clusters, kernel models and dtype sizes. Unknown names
// throw cpbench::UsageError naming the flag and listing the known ones.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/hf_config.hpp"
#include "harness/planner/kernel_model.hpp"
#include "kernels/mixers/mixer_configs.hpp"

namespace cpbench::plan {

// The sizes of a model the planner prices: its mixer layers, the attention dimensions and the other
// mixers' sizes (MixerConfigs). `layers` counts every mixer layer; `mixers` says which is which (one
// registered mixer letter per layer; empty = every layer attention).
struct ModelShape : MixerConfigs {
  std::string name = "custom";
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::string mixers;
  int64_t sliding_window = 0;       // tokens; 0 = none (from the config)
  int64_t sliding_layers = 0;       // attention layers that use it
  std::string source;               // the config file it was read from ("" for flags)
  // The rest of a training step (harness/planner/step/): 0 when the model was given by flags alone.
  int64_t vocab = 0;                // vocab_size (embedding rows and LM-head columns)
  bool tied_embeddings = false;     // tie_word_embeddings: the LM head is the embedding (one matrix)
  int64_t ffn = 0;                  // intermediate size of one MLP (of one expert in an MoE layer)
  int64_t mlp_layers = 0;           // MLP blocks (one per layer; 0 for Mamba-2)
  int64_t moe_layers = 0;           // of which mixture-of-experts
  int64_t experts = 0, experts_per_token = 0, shared_experts = 0;  // routed experts, top-k, shared
  int64_t q_lora_rank = 0;          // MLA's query LoRA rank (0 = a full query projection)
  bool gated_mlp = true;            // SwiGLU-style (3 matrices); Nemotron-H's relu^2 MLP has 2
  [[nodiscard]] int64_t attention_layers() const;
  // Layers of the mixer of `letter` (count_layers, kernels/mixers/mixer.hpp).
  [[nodiscard]] int64_t layers_of(char letter) const;
};
// The planner's view of a model read from its config.json.
[[nodiscard]] ModelShape model_shape(const HfModel& model);

// One GPU type and its links. attention_flops is the forward attention FLOP/s of the kernel: the peak
// rate of dense blocks under the fitted kernel model (`kernel`), the achieved rate under `--kernel
// pairs|blocks` (fwd + bwd take kStepFactor = 3.5x the forward time); bandwidths are per GPU and direction.
struct Cluster {
  std::string name = "custom";
  double attention_flops = 0;  // FLOP/s
  double intra_bandwidth = 0;  // B/s, inside a node (NVLink)
  double inter_bandwidth = 0;  // B/s, between nodes
  double latency_s = 0;        // per message
  int64_t gpus_per_node = 8;
  double memory_bytes = 0;  // device memory (0 = unknown, not checked)
  std::string description;
  KernelModel kernel;  // constants of the fitted kernel model (docs/planner.md, "The kernel model")
  // Achieved FLOP/s of a linear mixer's recurrence (its own FLOP count, Mixer::layer_cost): a prior, a quarter of the attention rate (the inter-chunk passes are memory-bound;
  // docs/planner.md, "SSM layers").
  double ssm_flops = 0;
  // The whole step (harness/planner/step/): dense GEMM peaks per GPU, host link. 0 = unknown (flags only).
  double bf16_flops = 0;       // FLOP/s, dense bf16 tensor-core peak (no sparsity)
  double fp8_flops = 0;        // FLOP/s, dense FP8 peak
  double host_bandwidth = 0;   // B/s per GPU and direction between host memory and the GPU (PCIe / C2C)
};

// The shipped model configs (scenarios/models/*.json, compiled in), by file stem: llama3-8b,
// nemotron-h-8b, ...
[[nodiscard]] const std::vector<ModelShape>& model_presets();
[[nodiscard]] const std::vector<Cluster>& cluster_presets();
// Also accepts cpbench's own test models ("tiny", "tiny-hybrid", "small"). Unknown names: UsageError
// listing them.
[[nodiscard]] ModelShape model_preset(const std::string& name);
[[nodiscard]] Cluster cluster_preset(const std::string& name);
// The preset `cpbench plan` uses without --cluster: the all-NVLink H100 preset while every W fits in
// one node of it, else the InfiniBand one (nodes joined by 50 GB/s links, not NVLink).
[[nodiscard]] std::string default_cluster(const std::vector<int64_t>& cps);

// How attention time follows the mask. fitted (default): the cluster's kernel model, block by block
// (harness/planner/kernel_model.hpp). pairs: time ~ visible pairs at the cluster's FLOP/s, no overheads
// (FlashAttention-style kernels that skip masked tiles, ideally). blocks: every (local queries x one
// rank's keys) block with any visible pair is computed in full (cpbench's own CPU transports).
enum class Kernel { fitted, pairs, blocks };
[[nodiscard]] Kernel parse_kernel(const std::string& text);
[[nodiscard]] std::string to_string(Kernel kernel);

// What a predicted step is: train = forward + backward (default), forward = the forward pass alone.
enum class Pass { train, forward };
[[nodiscard]] Pass parse_pass(const std::string& text);
[[nodiscard]] std::string to_string(Pass pass);

// Element size of a dtype name: bf16/bfloat16, fp16/float16 -> 2, fp32/float32 -> 4, fp64/float64 -> 8.
[[nodiscard]] int64_t dtype_size(const std::string& dtype);

}  // namespace cpbench::plan
