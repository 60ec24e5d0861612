#pragma once
// The cost formulas of the kv-passing transports, allgather and ring (internal to kernels/transports/;
// transport.hpp "Cost formulas" lists them): bytes one rank sends, the time formula of one call, the
// activation memory at a rank's peak. Their Transport overrides return these; the head-parallel
// transports (head_parallel_costs.hpp) build on the K/V block size and the ring's exposure.
#include <cstdint>

#include "kernels/transports/transport.hpp"

namespace cpbench::kernels {

// Bytes of one rank's key/value block: 2 * B * Hkv * S * D * element_size.
[[nodiscard]] int64_t kv_block_bytes(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                                     int64_t element_size);
// Element size in which dK/dV accumulate and travel: float32 for 16-bit inputs, else the input's.
[[nodiscard]] int64_t grad_element_size(int64_t element_size);
// One rank's K/V block (kv_block_bytes) and its dK/dV block in the accumulation dtype.
struct KvBlocks {
  int64_t kv = 0, dkv = 0;
};
[[nodiscard]] KvBlocks kv_blocks(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                                 int64_t element_size);
// A call's K/V block and its gradient block: B*S*kv_token_elements values when the shape gives them
// (MLA: the expanded or the latent wire; the latent's gradient travels as its own d latent), else the
// kv_blocks above.
[[nodiscard]] KvBlocks kv_blocks(const CallShape& c);

// Forward bytes of both: W-1 K/V blocks in the input dtype.
[[nodiscard]] int64_t kv_passing_forward_bytes(const CallShape& c);

// Ring-algorithm bytes of the collectives: the K/V all-gather sends (W-1) blocks in the input dtype;
// the dK/dV reduce-scatter sends (W-1) blocks in the accumulation dtype (float32 for 16-bit inputs).
[[nodiscard]] int64_t allgather_bytes(const CallShape& c);
// The K/V all-gather (ring algorithm, W-1 hops) overlaps only the local block, which it slows by
// `contention` x its transfer; the dK/dV reduce-scatter runs after every block's gradients, fully
// exposed.
[[nodiscard]] CallTime allgather_time(const CallCostInputs& in);
// Every layer keeps its gathered K/V (the other W-1 ranks' blocks) for its backward; at the peak the
// backward also fills the [W] dK/dV buffer the reduce-scatter sends from.
[[nodiscard]] int64_t allgather_peak_activation_bytes(const ActivationShape& a);

// Forward: W-1 K/V blocks. Backward: W-1 K/V blocks again plus W-1 dK/dV blocks in the
// accumulation dtype (float32 for 16-bit inputs).
[[nodiscard]] int64_t ring_bytes(const CallShape& c);
// Each of the W-1 hops carries one block while the rank computes on the one it holds; the slowest
// rank's work (per pass) is assumed spread evenly over its W steps, so a hop is exposed by what it
// takes beyond one step's compute, and a hidden hop still slows that step by `contention` x its
// transfer (the copy shares HBM and SMs with the kernels).
[[nodiscard]] CallTime ring_time(const CallCostInputs& in);
// Nothing is kept across layers (the backward sends K/V round again); in flight at the peak: the
// two alternating K/V receive buffers and the two dK/dV partial sums (the one received, the one sent).
[[nodiscard]] int64_t ring_peak_activation_bytes(const ActivationShape& a);

// ring_window, the sliding layers' ring (its halo: CallShape::halo_sent / halo_received / halo_steps, from
// window_halo.hpp). Forward: the K/V of the halo it sends; backward: the dK/dV of the halo it received,
// sent home in the accumulation dtype. Set by the window, not by S.
[[nodiscard]] int64_t windowed_ring_bytes(const CallShape& c);
[[nodiscard]] int64_t windowed_ring_forward_bytes(const CallShape& c);
// Every step's exchange is posted before the local block, which it overlaps (slowed by `contention`);
// the halo blocks wait for it. The backward's dK/dV exchanges likewise overlap its local block.
// in.call.halo_steps is the latency count (0: the W - 1 of a ring).
[[nodiscard]] CallTime windowed_ring_time(const CallCostInputs& in);
// Each layer keeps the halo it received for its backward; at the peak the backward also holds one
// block the halo is scattered into, its dK/dV, and the dK/dV halos sent and received.
[[nodiscard]] int64_t windowed_ring_peak_activation_bytes(const ActivationShape& a);

// The ring's exposure over `positions` ring positions (R - 1 hops) that send fwd_bytes / bwd_bytes
// in all while the slowest position computes f / b seconds per pass, spread evenly over its R steps
// (in: latency, bandwidth, contention). Seconds; all 0 for one position.
struct RingExposure {
  double forward = 0, backward = 0, transfer = 0;
};
[[nodiscard]] RingExposure ring_exposure(const CallCostInputs& in, int64_t positions, double fwd_bytes,
                                         double bwd_bytes, double f, double b);

}  // namespace cpbench::kernels
