#pragma once
// Pieces every CP transport shares (internal to kernels/): input validation, the state a transport's
// autograd node keeps, and the factories. Staging and timing of the steps: transfer_phases.hpp; cost
// formulas: kv_passing_costs.hpp, head_parallel_costs.hpp; block plans: kernels/attention/plan_cache.hpp.
#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention/fused_attention.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/attention/plan_cache.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench::kernels {

// Shapes of one attend() call, validated against each other, the metadata and the CP group.
struct AttendShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, tokens = 0, head_dim = 0;  // tokens = S (local)
  int world = 1, rank = 0;
  int64_t v_head_dim = 0;  // V's head dim: head_dim, except under MLA (dv)
  // MLA's latent wire (AttentionContext::kv_up): k is the latent [B, 1, S, latent_dim]; kv_heads is then
  // q_heads (the heads it up-projects to), head_dim = dn + dr.
  bool latent = false;
  int64_t latent_dim = 0, qk_nope_head_dim = 0;
};
// Throws cpbench::Error naming the transport, the offending shapes and the rank.
[[nodiscard]] AttendShape check_attend(const std::string& transport, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const AttentionContext& ctx);

// (query, key) pairs of one forward call's blocks, summed over the batch, per head: visible under the
// mask, and evaluated by the kernels (routed_pairs).
struct CallPairs {
  int64_t visible = 0, computed = 0;  // visible: the work rule's pairs (BlockPlan::work_pairs)
  int64_t up_projected_blocks = 0;    // MLA latent wire: key blocks up-projected (unpack_kv) in the forward
};

// ---- The K/V a call moves (the wire block), one form for every kv-passing transport ----
// [2, B, Hkv, S, D]: K and V stacked (one head dim; every non-MLA call); [1, B, H, S, Dk + Dv]: MLA's
// expanded wire (K and V concatenated per head); [1, B, 1, S, r + dr]: MLA's latent wire (the latent,
// c and the shared RoPE key, once per token). Differentiable: attend() packs before its autograd node,
// which takes the block and returns its gradient in the same form.
[[nodiscard]] at::Tensor pack_kv(const at::Tensor& k, const at::Tensor& v, const AttendShape& sh);
// A block of that form (on the compute device) -> its k [B, H, S, D] and v [B, H, S, Dv] in the kernel
// dtype `kd`; the latent up-projected per head with w_up (kernels/attention/mla.hpp). Forward and backward
// call it on every block they attend.
[[nodiscard]] std::pair<at::Tensor, at::Tensor> unpack_kv(const at::Tensor& block, const at::Tensor& kv_up,
                                                          const AttendShape& sh, at::ScalarType kd);
// dK and dV of `block` (the compute dtype) -> the block's gradient in its form, in the compute dtype;
// latent: d latent, and the block's d w_up added to dkv_up.
[[nodiscard]] at::Tensor pack_kv_grad(const at::Tensor& dk, const at::Tensor& dv, const at::Tensor& block,
                                      const at::Tensor& kv_up, const AttendShape& sh, at::Tensor& dkv_up);
// An optional tensor as an autograd Function's input (see optional_sinks below).
[[nodiscard]] inline std::optional<at::Tensor> optional_tensor(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// What a transport's forward hands to its backward. Owned by the autograd node (see
// kernels/comm/autograd.hpp, make_saved_object): the Communicator is a copy; `stats` is the caller's
// and must outlive the backward.
struct TransportState {
  comm::Communicator comm;
  MaskSpec mask;
  std::shared_ptr<const PlanCache> plans;
  KernelPolicy policy = KernelPolicy::fused;
  double scale = 0;
  AttentionStats* stats = nullptr;
  std::string nvtx_prefix;
  AttendShape shape;
  at::Device device{at::kCPU};  // where the maths runs (CUDA: spans are timed with device events)
  // The ring K/V travel around (ring_attention): ranks of `comm` in ring order, this rank at position
  // ring_index. Empty: every rank of `comm`, in rank order (the plain ring). The hybrid transport
  // runs one ring per Ulysses position over the CP group's ranks.
  std::vector<int> ring;
  int ring_index = 0;
  bool sink_every_step = false;  // AttentionContext::sink_every_step (the sink_per_step control)

  [[nodiscard]] int ring_size() const { return ring.empty() ? comm.size() : static_cast<int>(ring.size()); }
  [[nodiscard]] int ring_rank() const { return ring.empty() ? comm.rank() : ring_index; }
  // The communicator rank at ring position i (taken modulo the ring size).
  [[nodiscard]] int ring_peer(int i) const {
    const int n = ring_size(), j = ((i % n) + n) % n;
    return ring.empty() ? j : ring[static_cast<size_t>(j)];
  }

  // Plan of this rank's queries against the key block of rank `src` (from the step's PlanCache).
  [[nodiscard]] const BlockPlan& plan(int src) const { return plans->plan(src); }
  // The dtype the block kernels read q, k, v in, and the route of block `src`.
  [[nodiscard]] at::ScalarType kernel_dtype(const at::Tensor& q) const;
  [[nodiscard]] KernelRoute route(int src, const at::Tensor& q_kernel) const;
  // How blocks of inputs in dtype `input` come back: FA2's roundings under the flash_numerics policy
  // (16-bit inputs), and in the kernel's dtype when the rank holds a `single_block` (W = 1).
  [[nodiscard]] BlockNumerics numerics(at::ScalarType input, bool single_block = false) const;
  // Forward only: counts block `plan`'s route in stats (one count per evaluated block and call) and
  // adds its visible and evaluated pairs to `pairs`.
  void count_block(const BlockPlan& plan, KernelRoute route, CallPairs& pairs) const;
  // Forward only: adds one call with `bytes` sent and `pairs` to stats (bytes, pairs, both FLOP counts).
  void count_call(int64_t bytes, const CallPairs& pairs) const;
};

[[nodiscard]] TransportState make_state(const AttentionContext& ctx, const AttendShape& shape,
                                        const at::Device& device);

// Gloo tags: one per message stream, so streams between the same pair of ranks never match each other.
inline constexpr int kTagRingForwardKV = 0x52f0;
inline constexpr int kTagRingBackwardKV = 0x52f1;
inline constexpr int kTagRingBackwardDKV = 0x52f2;

// The reason a (mask, dtype, device, cp) combination cannot run, or "" (shared by both transports).
[[nodiscard]] std::string common_unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options, int64_t cp);

// Ring attention (kernels/transports/ring.cpp) over st's ring: q [B, Hq, S, D], k and v [B, Hkv, S, D] of
// this ring position; st.plans plans these queries against every ring position's key block (world =
// ring size, rank = ring position). Differentiable in q, k, v; backward collective over the ring.
// `sinks`: [Hq] of these queries' heads or undefined (kernels/attention/sink.hpp), differentiable.
// `kv_up`: MLA's W_up under the latent wire (then k is the latent, v undefined; AttentionContext::kv_up).
[[nodiscard]] at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& sinks, const TransportState& st,
                                        const at::Tensor& kv_up = {});

// K/V values per token of the call's wire block (pack_kv): the latent's r + dr, else Hkv * (D + Dv).
[[nodiscard]] int64_t wire_token_elements(const AttendShape& sh);
// MLA calls (the latent wire, or V's head dim not K's): throws unless `bytes`, what this rank sent in one
// pass (forward, or backward), equal the transport's formula (kv_passing_costs.hpp, CallShape's
// kv_token_elements) for inputs of `element_size` bytes. `transport`: "allgather" or "ring".
void check_wire_bytes(const TransportState& st, int64_t bytes, bool forward, const std::string& transport,
                      int64_t element_size);

// Attention of a rank that holds a single key block (W = 1; single_block.cpp), for every transport: st
// plans one block (st.plan(0)); the result as the multi-block paths give it, from one kernel call without
// merge buffers. `transport` names the steps ("allgather", "ring"). `kv_up`: MLA's W_up under the latent
// wire (k the latent, v undefined), which nothing carries here: the latent is up-projected first as the
// layer would (mla.hpp mla_expand). Differentiable in q, k, v, sinks and kv_up.
[[nodiscard]] at::Tensor single_block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& sinks, const TransportState& st,
                                                const std::string& transport, const at::Tensor& kv_up = {});

// A sink as an autograd Function's input: none when undefined (torch's Function takes an undefined
// tensor only inside an optional).
[[nodiscard]] inline std::optional<at::Tensor> optional_sinks(const at::Tensor& sinks) {
  return sinks.defined() ? std::optional<at::Tensor>(sinks) : std::nullopt;
}

// The sink rule's place in a merge loop (kernels/attention/sink.hpp): after_block is true right after a
// block was merged, false once after the last one. Applies the sink once per query (after the merge),
// or after every block under the sink_per_step control. No-op without sinks or before any merge.
void merge_sink(const TransportState& st, at::Tensor& out, at::Tensor& lse, const at::Tensor& sinks,
                bool after_block);

// Factories behind the registry (kernels/transports/registry.cpp).
[[nodiscard]] std::shared_ptr<const Transport> make_allgather_transport();
[[nodiscard]] std::shared_ptr<const Transport> make_ring_transport();
[[nodiscard]] std::shared_ptr<const Transport> make_windowed_ring_transport();
[[nodiscard]] std::shared_ptr<const Transport> make_a2a_transport(bool rank_order_positions);
[[nodiscard]] std::shared_ptr<const Transport> make_a2a_rank_order_transport();
[[nodiscard]] std::shared_ptr<const Transport> make_hybrid_transport(const TransportOptions& options);

}  // namespace cpbench::kernels
