#pragma once
// Admission control for `cpbench run`: before any rank is spawned, refuse (UsageError, one line, exit
// 2) work that cannot run on this machine, instead of starting it and letting the machine run out of
// memory or processes. README "Limits" lists what is checked; in short, for every case:
//   1. the local-rank cap: a spawned case starts cp x dp rank processes at once on this machine; more
//      than HostLimits::max_local_ranks is refused.
//   2. absurd sizes: one term of a rank's memory (below) alone exceeds the machine's physical memory
//      (MemTotal); the message names the scenario key that drives it (batch.seq_len, model.vocab,
//      model.hidden, ...).
//   3. memory: the case's local ranks together must fit in MemAvailable.
// Refusals say what would fit here (the largest cp of that case) and that larger W runs under
// torchrun or SLURM across nodes.
//
// Memory model of one rank (bytes, CPU cases; doubles so absurd sizes cannot overflow). B batch_size,
// S seq_len, P = S padded for the layout (bounded by S + 2W per document + 2W), s = P / W local tokens,
// e the case dtype's element size, L layers, H hidden, Hq heads, Hkv kv_heads, D head_dim, F ffn,
// V vocab:
//   runtime      LibTorch's resident size of a rank (HostLimits::runtime_bytes, see host_limits())
//   parameters   3 x (2 V H + L (2H + Hq D H + 2 H Hkv D + Hq D H + 3 H F) + H) x e
//                (weights, gradients, the reference's gradient copies)
//   data         2 x B S (33 + 16 [mRoPE] + H e [inputs_embeds])   (global batch and its shard)
//   reference    first rank of each CP group only: the dense single-rank reference over S tokens,
//                L B S^2 (1 + 2 Hq e) + B Hq S^2 e (mask, scores and probabilities kept per layer),
//                L B S (4H + 3F) e + 3 B S V e (layer activations, logits and their gradient);
//                bfloat16 / float16 cases also run a float64 reference (the precision rule): the same
//                terms with e = 8, plus its model copy 2 x (parameters) x 8 (weights, gradients)
//   activations  B x planner attention_activation_bytes(s) (harness/planner: what each layer keeps
//                for the backward plus the transport's buffers) + L B s (3F + 4H) e (norms, MLP)
//                + 3 B Hq s^2 max(4, e) (one block's scores) + 3 B s V e + 2 B S V e (local logits
//                and their gradient, logits gathered for the check)
//   comm         the transport's bytes_per_call(W, B, Hq, Hkv, s, D, e) (staging for one attention call)
//   other mixers each mixer's own terms (Mixer::memory_terms, kernels/mixers/<mixer>/): its weights, its
//                recurrence's working set, and what each layer keeps under the case's strategy (the
//                mixer's layer_cost, the planner's number), B x that, at most 2 chunks per document; the
//                reference rank also for one rank over S.
// The attention terms (weights, the S x S reference, block scores, the planner's attention
// activations) count the attention layers only.
// device: cuda cases count the runtime only in host memory; their tensors live on the GPU, where the
// same terms (all but the runtime) plus kCudaRuntimeBytes are checked against each GPU's free memory
// (admit_device), the ranks sharing a GPU summed and the reference counted on cp-rank 0's.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/runner/scenario.hpp"

namespace cpbench {

struct MemoryTerm {
  std::string what;  // "reference attention (S x S)", ...
  std::string key;   // the scenario key that drives it ("batch.seq_len"), "" for the runtime
  double bytes = 0;
};

struct RankMemory {
  double total = 0;                // bytes, the sum of terms
  std::vector<MemoryTerm> terms;
  // The largest term that has a scenario key (nullptr when none has).
  [[nodiscard]] const MemoryTerm* largest_keyed() const;
};

// One rank of case `c`. `reference_rank`: the first rank of a CP group, which also runs the reference.
[[nodiscard]] RankMemory estimate_rank_memory(const ScenarioSpec& scenario, const CaseSpec& c, double runtime_bytes,
                                              bool reference_rank);

// All `c.world_size()` ranks of a case on one machine (dp of them run the reference), bytes.
[[nodiscard]] double case_local_bytes(const ScenarioSpec& scenario, const CaseSpec& c, double runtime_bytes);

struct HostLimits {
  double available_bytes = 0;   // MemAvailable
  double total_bytes = 0;       // MemTotal
  int64_t max_local_ranks = 1;  // rank processes one case may start on this machine
  std::string cap_origin;       // how the cap was set, for messages: "4 x 2 cores", "--max-local-ranks"
  double runtime_bytes = 0;     // LibTorch's resident size per rank
};

// Rank processes allowed at once by default: kRanksPerCore x the cores this process may run on.
inline constexpr int64_t kRanksPerCore = 4;
// Measured once (README "Limits"): a rank of the tiny model after LibTorch and Gloo start holds
// ~177 MiB of private anonymous memory (smaps_rollup), about what the `cpbench run` process itself
// holds after LibTorch initialised. host_limits() takes the larger of this and its own.
inline constexpr double kRankRuntimeFloorBytes = 176.0 * 1024 * 1024;

// This machine: /proc/meminfo, the CPU affinity mask, the calling process's own anonymous resident
// memory. `max_local_ranks` > 0 overrides the default cap (the CLI passes --max-local-ranks /
// CPBENCH_MAX_LOCAL_RANKS); `origin` names where it came from.
[[nodiscard]] HostLimits host_limits(int64_t max_local_ranks = 0, const std::string& origin = "--max-local-ranks");

// Throws UsageError with one line naming the first case that cannot run here (and how many more
// cannot). `local_ranks`: 0 = spawned mode (each case starts cp x dp ranks here, the cap applies);
// > 0 = joined mode with that many ranks of the job on this machine (LOCAL_WORLD_SIZE; no cap, an
// external launcher started them), only cases of world size `job_world_size` count.
void admit(const ScenarioSpec& scenario, const std::vector<CaseSpec>& cases, const HostLimits& limits,
           int64_t local_ranks = 0, int64_t job_world_size = 0);

// device: cuda. The CUDA context, cuBLAS / NCCL workspaces and the caching allocator's slack of one
// rank: an allowance, not a measurement (a context alone is ~0.5 GiB on an H100 with lazy loading).
inline constexpr double kCudaRuntimeBytes = 1024.0 * 1024 * 1024;

// One rank's device memory for case `c` (bytes): kCudaRuntimeBytes and the tensor terms above.
[[nodiscard]] RankMemory estimate_device_memory(const ScenarioSpec& scenario, const CaseSpec& c, bool reference_rank);

// The device memory each of `gpus` GPUs holds for case `c` (bytes, one entry per GPU): local rank r
// on GPU r % gpus (device_choice.hpp); spawned (`local_ranks` 0: all cp x dp ranks here), cp-rank 0 of
// each DP replica (rank % cp == 0) with its reference; joined (`local_ranks` > 0 of the job here),
// every local rank counted as a reference rank.
[[nodiscard]] std::vector<double> gpu_bytes(const ScenarioSpec& scenario, const CaseSpec& c, int64_t gpus,
                                            int64_t local_ranks = 0);

// One visible CUDA device as admission sees it (harness/runner/device_memory.hpp asks cudaMemGetInfo).
struct GpuMemory {
  std::string name;        // "NVIDIA H200"
  double free_bytes = 0;   // cudaMemGetInfo free
  double total_bytes = 0;  // cudaMemGetInfo total
};

// device: cuda admission, a plain function of the GPUs' free memory: throws UsageError with one line
// naming the first case whose ranks on some GPU (gpu_bytes) need more than its free memory, or one of
// whose terms alone exceeds the largest GPU's total (naming the scenario key), with what fits (the
// largest cp) and how many more cases cannot. No-op for device: cpu or no GPU. `local_ranks` /
// `job_world_size` as admit().
void admit_device(const ScenarioSpec& scenario, const std::vector<CaseSpec>& cases, const std::vector<GpuMemory>& gpus,
                  int64_t local_ranks = 0, int64_t job_world_size = 0);

// "1.5 GiB"
[[nodiscard]] std::string format_bytes(double bytes);

}  // namespace cpbench
