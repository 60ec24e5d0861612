#pragma once
// CP attention transports: attention for this rank's queries against the keys of every CP rank.
//
// Shapes (B batch, Hq query heads, Hkv key/value heads with Hq % Hkv == 0, S local tokens, D head dim):
//   q [B, Hq, S, D], k and v [B, Hkv, S, D]  -> out [B, Hq, S, D], differentiable in q, k, v.
// Every rank holds the same number S of local tokens (layouts guarantee it). Metadata:
//   ctx.local = TokenMeta of this rank's tokens [B, S]
//   ctx.all   = TokenMeta of all ranks' tokens in rank order [B, W*S] (rank j's block at [j*S, (j+1)*S))
// A transport must not change the mask: a mask it cannot evaluate is reported by unsupported_reason() and
// the case is skipped, never silently run with another mask.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.hpp"
#include "sharders/mask.hpp"

namespace cpbench {

// Measurement sink: transports add what they did (the harness reads and resets it per phase).
struct AttentionStats {
  double compute_seconds = 0;       // attention maths (forward and backward)
  double comm_seconds = 0;          // time blocked in communication (exposed, not overlapped)
  int64_t bytes_sent = 0;           // bytes this rank sent (forward and backward), per the transport's formula
  double flops = 0;                 // attention FLOPs actually computed (4*D per visible (q,k) pair and head, fwd)
  int64_t visible_pairs = 0;        // (q, k) pairs visible under the mask for this rank's queries, summed over batch (per head)
  int64_t calls = 0;
  void reset() { *this = AttentionStats{}; }
};

struct AttentionContext {
  const comm::Communicator* comm = nullptr;  // the CP group (size W); never null
  MaskSpec mask;
  TokenMeta local;
  TokenMeta all;
  double scale = 0;                          // softmax scale, usually 1/sqrt(D); 0 means 1/sqrt(D)
  AttentionStats* stats = nullptr;           // optional; forward AND backward add to it, so it must
                                             // outlive the backward of every attend() call given it
  std::string nvtx_prefix;                   // "cp:<sharder>" for NVTX ranges
};

class Transport {
 public:
  virtual ~Transport() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Empty if supported; otherwise the reason this transport cannot evaluate the mask / dtype / device.
  [[nodiscard]] virtual std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                                       int64_t cp) const = 0;
  [[nodiscard]] virtual at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const AttentionContext& ctx) const = 0;
  // Bytes this rank sends for one forward + backward of one attention call (the transport's formula).
  [[nodiscard]] virtual int64_t bytes_per_call(int64_t cp, int64_t batch, int64_t kv_heads, int64_t local_tokens,
                                               int64_t head_dim, int64_t element_size) const = 0;
};

// Lifetime: attend() builds an autograd node that keeps its own copies of the Communicator (a reference
// on the c10d backend), the mask and the metadata; only `stats` is borrowed. Backward is collective:
// every rank must run the backward of the same attend() calls in the same order.
//
// Transports (one file each in kernels/; both compute scores, softmax, partial outputs, log-sum-exp
// and dK/dV accumulation in float32 for 16-bit inputs, float64 for float64):
//   allgather  kernels/transports/allgather.cpp  one all-gather of K/V (overlapping the local block), blocks merged
//                                     online; backward reduce-scatters dK/dV.
//   ring       kernels/transports/ring.cpp       K/V blocks travel around the ring (double-buffered send/recv posted
//                                     before each block's maths); backward sends K/V round again and
//                                     dK/dV travel with their block back to its owner.
// Both skip key blocks whose mask is empty and run all-visible blocks without a mask tensor.
// bytes_per_call, with kv = 2*B*Hkv*S*D*element_size and dkv the same in the accumulation dtype
// (element size max(4, element_size)):  allgather (W-1)*(kv + dkv);  ring (W-1)*(2*kv + dkv).
//
// Registry: "allgather", "ring". Unknown names throw UsageError listing the known ones.
[[nodiscard]] std::shared_ptr<const Transport> make_transport(const std::string& name);
[[nodiscard]] std::vector<std::string> known_transports();

}  // namespace cpbench
