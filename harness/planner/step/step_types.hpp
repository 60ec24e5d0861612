#pragma once
// What a whole-step plan is (`cpbench plan --gpus N`; docs/planner.md, "The whole step"): the request, the
// parallel degrees, the training options, one priced component and one case. Plain structs; the folder's
// other files compute them:
//
//   parallel      degrees {tp, pp, vp, dp, cp, ep, zero}: validation and enumeration
//   attention     attention per layer kind (causal / sliding / MLA on its wire) and the linear mixers, each
//                 kind on the transport (or CP strategy) of the case's one layout
//   mlp, moe      dense MLP; MoE (top-k + shared experts, EP dispatch + combine all-to-alls)
//   embedding     embeddings, LM head and loss (the logits)
//   optimizer     Adam on the GPU, or offloaded to the CPU
//   collectives   FSDP / ZeRO, TP (sequence parallel), PP (bubble, p2p), DP
//   memory        parameters, gradients, optimizer states, activations, logits, CP buffers per GPU
//   step          one case: the components summed into step time, tokens/s/GPU, MFU, memory
//   search        every case for a GPU count; step_output / step_html print them
//   constants     every fitted constant, in one place
//
// Units: FLOPs, bytes, seconds, per GPU and per training step unless a name says otherwise.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/planner/plan_types.hpp"

namespace cpbench::plan::step {

enum class Recompute { none, selective, full };
enum class Precision { bf16, fp8 };
enum class Offload { none, optimizer };
// Whose CP attention a case runs: cpbench's transports (their own formulas and the kernel model), or
// PyTorch's context_parallel of torch 2.6 priced term by term (pytorch_cp.hpp).
enum class Stack { cpbench, pytorch_cp };
[[nodiscard]] Recompute parse_recompute(const std::string& text);  // UsageError naming --recompute
[[nodiscard]] Precision parse_precision(const std::string& text);  // UsageError naming --precision
[[nodiscard]] Offload parse_offload(const std::string& text);      // UsageError naming --offload
[[nodiscard]] Stack parse_stack(const std::string& text);          // UsageError naming --stack
[[nodiscard]] std::string to_string(Recompute r);
[[nodiscard]] std::string to_string(Precision p);
[[nodiscard]] std::string to_string(Offload o);
[[nodiscard]] std::string to_string(Stack s);

// One way to lay out the GPUs: tp * pp * dp * cp = GPUs (rank order tp innermost, then cp, dp, pp: the
// Megatron / torchtitan order); ep splits the experts over ep of the dp * cp ranks (it adds no GPU).
// zero: 0 = DDP, 1 = optimizer states sharded, 2 = + gradients, 3 = + parameters (FSDP), over dp * cp
// (torchtitan shards over dp_shard x cp).
struct Parallel {
  int64_t tp = 1, pp = 1, vp = 1, dp = 1, cp = 1, ep = 1, zero = 3;
  [[nodiscard]] int64_t gpus() const { return tp * pp * dp * cp; }
  [[nodiscard]] int64_t shard_group() const { return dp * cp; }  // the ZeRO / FSDP group
  bool operator==(const Parallel&) const = default;
};

// The training options of a case (given, or searched where a set is given).
struct Training {
  Recompute recompute = Recompute::full;
  Precision precision = Precision::bf16;
  Offload offload = Offload::none;
  int64_t micro_batch = 1;   // sequences per micro-batch per DP replica
  int64_t microbatches = 1;  // per step: global_batch / (micro_batch * dp)
};

// What `cpbench plan --gpus N` asks (0 / empty = search it).
struct StepRequest {
  PlanRequest attention;  // model, sequence, mask, cluster, transports, sharders (cps: the CP sizes to try,
                          // empty = every divisor of the GPU count)
  int64_t gpus = 0;
  int64_t tp = 0, pp = 0, vp = 0, dp = 0, ep = 0;
  int64_t zero = -1;                    // -1: search 1 and 3
  std::vector<Recompute> recompute;     // empty: search none, selective, full
  Precision precision = Precision::bf16;
  Offload offload = Offload::none;
  Stack stack = Stack::cpbench;
  int64_t micro_batch = 1;
  int64_t global_batch = 0;  // sequences per step; 0: micro_batch * dp * (pp > 1 ? 4 pp : 1)
  double reserve_bytes = -1;  // < 0: constants().memory_reserve_bytes
  int64_t top = 10;           // cases kept in the output (JSON and table), best first
};

// One priced part of the step. `time_s` is its share of step_s (compute, exposed communication, bubble
// or optimizer); flops / bytes are what it computes / moves per GPU per step (bytes on the link it uses,
// PCIe for the offload).
struct Component {
  std::string name;  // attention:full_attention, mixer:GDN, mlp, moe, embedding+head+loss, comm:cp, comm:tp,
                     // comm:ep, comm:fsdp | comm:dp, comm:pp, bubble, optimizer
  double flops = 0, bytes = 0, time_s = 0;
  double hidden_s = 0;  // communication: the part of its transfer time hidden behind compute
};

// One kind of layer and what the case's layout runs it with.
struct KindRun {
  std::string kind;       // full_attention | sliding_attention | mla | the mixer's label (GDN, KDA, SSM)
  int64_t layers = 0;     // in the whole model
  std::string mask;       // attention kinds: the mask they run
  std::string transport;  // the transport (hybrid-u<N>), or the linear mixer's CP strategy
  std::string wire;       // MLA only: expanded | latent
  double step_s = 0;      // these layers' part of the step (compute + exposed CP comm)
};

// Bytes of one GPU's memory at its peak.
struct Memory {
  double params = 0, grads = 0, optimizer = 0;  // model states as sharded (offloaded optimizer: 0)
  double gathered = 0;                          // FSDP's unsharded layers in flight (prefetch)
  double activations = 0;                       // saved for the backward under the recompute policy
  double cp_buffers = 0;                        // the CP transports' own buffers (Transport::peak_activation_bytes)
  double logits = 0;                            // LM head output, its fp32 copy and gradient
  double overhead = 0;                          // allocator fragmentation (constants)
  [[nodiscard]] double total() const {
    return params + grads + optimizer + gathered + activations + cp_buffers + logits + overhead;
  }
};

struct StepCase {
  Parallel parallel;
  Training training;
  int64_t global_batch = 0;  // sequences per step
  std::string sharder;       // the one layout of the whole model
  std::vector<KindRun> kinds;
  std::vector<Component> components;
  double step_s = 0, tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0, mfu = 0;
  Memory memory;
  double memory_budget = 0;  // the GPU's memory less the reserve
  bool fits_memory = false;
  [[nodiscard]] double memory_per_gpu_bytes() const { return memory.total(); }
  [[nodiscard]] double component_s(const std::string& name) const;  // 0 when absent
};

struct StepPlan {
  StepRequest request;
  std::vector<std::string> features;  // what the model line names: sinks, windows, MLA, experts, mixers
  double model_flops_per_token = 0;   // 6 N_active + attention per kind (docs/planner.md)
  double params = 0, active_params = 0;
  int64_t searched = 0;               // cases priced
  std::vector<StepCase> cases;        // best first: fitting ones by tokens/s/GPU, then the others
  std::vector<StepCase> best_per_cp;  // the best case at each CP size searched, by cp
  std::vector<std::string> notes;
};

}  // namespace cpbench::plan::step
