#pragma once
// Pieces every CP transport shares (internal to kernels/): input validation, the state a transport's
// autograd node keeps, host staging for Gloo, and timing + NVTX of the comm / compute phases.
#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>

#include "kernels/comm/communicator.hpp"
#include "sharders/core/nvtx.hpp"
#include "kernels/attention/attention_math.hpp"
#include "kernels/attention/fused_attention.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench::kernels {

// Shapes of one attend() call, validated against each other, the metadata and the CP group.
struct AttendShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, tokens = 0, head_dim = 0;  // tokens = S (local)
  int world = 1, rank = 0;
};
// Throws cpbench::Error naming the transport, the offending shapes and the rank.
[[nodiscard]] AttendShape check_attend(const std::string& transport, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const AttentionContext& ctx);

// The plans of one step: this rank's queries against each rank's key block, built once from CPU-side
// token metadata (make_plan_cache in transport.hpp) and read by every attend() call of the step.
class PlanCache {
 public:
  PlanCache(const MaskSpec& mask, const TokenMeta& local, const TokenMeta& all, int rank, int world,
            const at::Device& device);
  // Queries of this rank against the key block of rank `src` (columns [src*S, (src+1)*S) of all).
  [[nodiscard]] const BlockPlan& plan(int src) const;
  [[nodiscard]] const MaskSpec& mask() const { return mask_; }
  [[nodiscard]] int world() const { return static_cast<int>(plans_.size()); }
  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int64_t batch() const { return batch_; }
  [[nodiscard]] int64_t tokens() const { return tokens_; }

 private:
  MaskSpec mask_;
  int rank_ = 0;
  int64_t batch_ = 0, tokens_ = 0;
  std::vector<BlockPlan> plans_;
};

// True when the rule makes the block of `meta` against itself exactly the lower triangle: a causal
// mask (document: one document per row), every token valid, one segment per row, positions strictly
// increasing along each row. Host tensors.
[[nodiscard]] bool diagonal_is_causal(const MaskSpec& mask, const TokenMeta& meta);

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
  // Counts the route in stats (forward only: one count per evaluated block and call).
  void count_route(KernelRoute r) const;
};

// The plan of queries `q` against keys `k` under `mask`: the same cells, visible pairs and
// effective mask as plan_block(build_mask(mask, q, k)) up to rows / cols trimming (none here), but
// without building the whole [B, Sq, Sk] mask. Each kBlockTile cell is classified from per-tile
// bounds of the metadata (position, segment and document ranges, key validity), which decide full
// and empty cells exactly; only the cells they leave open get their masks built. So planning costs
// O(Sq + Sk + cells + masked cells' area), not O(Sq x Sk). Two device -> host copies.
[[nodiscard]] BlockPlan plan_block(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k);

[[nodiscard]] TransportState make_state(const AttentionContext& ctx, const AttendShape& shape,
                                        const at::Device& device);

// Gloo sends and receives CPU tensors only: with a Gloo group and device tensors, everything that
// travels is staged through host memory. `wire` tensors live where the communicator needs them.
struct Wire {
  at::Device device;  // where the maths runs
  bool staged = false;
  Wire(const comm::Communicator& comm, const at::Device& compute_device);
  [[nodiscard]] at::Tensor to_wire(const at::Tensor& t) const;    // contiguous, on the wire device
  [[nodiscard]] at::Tensor from_wire(const at::Tensor& t) const;  // on the compute device
  [[nodiscard]] at::TensorOptions options(at::ScalarType dtype) const;
};

// Adds the span's time to AttentionStats (when present) and marks it with an NVTX range
// "<prefix>:attn_comm" or "<prefix>:attn_compute". CPU: the host clock. CUDA: two device events on
// the compute stream (comm::DeviceTime; no host synchronization), resolved after the step by
// resolve_device_times(): a compute span is what the stream spent on the kernels, a comm span what it
// spent waiting for a transfer (NCCL's wait blocks the stream, not the host).
// `label` names the span in the step's timeline (AttentionStats::record_spans): the step it belongs to,
// "<transport>_<fwd|bwd>:<step>" (see StepRange); a comm span is recorded as a wait.
class Phase {
 public:
  enum class Kind { comm, compute };
  Phase(const TransportState& st, Kind kind, std::string label);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  AttentionStats* stats_;
  Kind kind_;
  std::string label_;
  nvtx::Range range_;
  std::chrono::steady_clock::time_point start_;
  at::Device device_{at::kCPU};
  comm::DeviceTime start_dev_;  // CUDA only
};

// The NVTX range of one transport step, "<prefix>:<transport>_<fwd|bwd>:<step>" (docs/timeline.md);
// the block maths, waits and posts of that step nest inside it.
[[nodiscard]] std::string step_label(const char* transport, bool backward, int step);
class StepRange {
 public:
  StepRange(const TransportState& st, const std::string& label) : range_{st.nvtx_prefix, label.c_str()} {}
  StepRange(const StepRange&) = delete;
  StepRange& operator=(const StepRange&) = delete;

 private:
  nvtx::Range range_;
};

// Time a transfer was in flight, from its post to the return of its wait (overlapped or not): the
// communication time achieved_bandwidth divides by. Added to AttentionStats::transfer_seconds by done(),
// and recorded as a transfer span named `label` (grad: dK/dV traffic) when the stats record spans.
// CUDA: from an event on the compute stream at the post to one after the wait, i.e. until both the
// transfer and the compute it overlapped were done: an upper bound of the transfer time (so
// achieved_bandwidth is a lower bound) when the compute took longer.
struct InFlight {
  explicit InFlight(const TransportState& st);
  std::chrono::steady_clock::time_point posted = std::chrono::steady_clock::now();
  comm::DeviceTime posted_dev;  // CUDA only
  void done(const TransportState& st, const std::string& label, bool grad = false) const;
};

// Gloo tags: one per message stream, so streams between the same pair of ranks never match each other.
inline constexpr int kTagRingForwardKV = 0x52f0;
inline constexpr int kTagRingBackwardKV = 0x52f1;
inline constexpr int kTagRingBackwardDKV = 0x52f2;

// Bytes of one rank's key/value block: 2 * B * Hkv * S * D * element_size.
[[nodiscard]] int64_t kv_block_bytes(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                                     int64_t element_size);
// Element size in which dK/dV accumulate and travel: float32 for 16-bit inputs, else the input's.
[[nodiscard]] int64_t grad_element_size(int64_t element_size);

// The reason a (mask, dtype, device, cp) combination cannot run, or "" (shared by both transports).
[[nodiscard]] std::string common_unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options, int64_t cp);

// Ring attention (kernels/transports/ring.cpp) over st's ring: q [B, Hq, S, D], k and v [B, Hkv, S, D] of
// this ring position; st.plans plans these queries against every ring position's key block (world =
// ring size, rank = ring position). Differentiable in q, k, v; backward collective over the ring.
[[nodiscard]] at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const TransportState& st);

// Factories behind the registry (kernels/transports/registry.cpp).
[[nodiscard]] std::shared_ptr<const Transport> make_allgather_transport();
[[nodiscard]] std::shared_ptr<const Transport> make_ring_transport();
[[nodiscard]] std::shared_ptr<const Transport> make_a2a_transport(bool rank_order_positions);
[[nodiscard]] std::shared_ptr<const Transport> make_a2a_rank_order_transport();
[[nodiscard]] std::shared_ptr<const Transport> make_hybrid_transport(const TransportOptions& options);

}  // namespace cpbench::kernels
