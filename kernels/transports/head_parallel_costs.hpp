#pragma once
// The cost formulas of the head-parallel transports, a2a (Ulysses, the mesh W x 1) and hybrid (Ulysses x
// ring, U x W/U) (internal to kernels/transports/; transport.hpp "Cost formulas" lists them): their
// all-to-alls plus, over R = W/U ring positions, the ring's formulas (kv_passing_costs.hpp) with the
// replicated kv heads (head_parallel.hpp, kv_replication).
#include <cstdint>

#include "kernels/transports/transport.hpp"

namespace cpbench::kernels {

// Bytes one rank sends inside its Ulysses group in one pass (forward, or backward): the head all-to-alls
// (q, k, v in and the output back; the backward: the output's gradient in, dq, dk, dv back),
// (U-1) * B*S*e * (H*(D + Dv) + Hk*(D + Dv)) / U. MLA (CallShape::v_head_dim, kv_token_elements):
// expanded, K and V of Dk and Dv per head; latent, q and the output only, plus the latent all-gathered
// in the group, (U-1) * B*S*(r + dr) * e, its gradient reduce-scattered back in the accumulation dtype.
[[nodiscard]] int64_t head_parallel_group_bytes(const CallShape& c, int64_t ulysses, bool forward);
// The call the ring across the R = W/U groups sees (one source for its formula and the transport's
// per-call check): R positions, H/U query heads, U*S tokens, Hk/U kv heads (latent: the whole latent).
[[nodiscard]] CallShape head_parallel_ring_call(const CallShape& c, int64_t ulysses);
// The bytes formulas of the U x (W/U) mesh: the group's exchanges above (both passes) plus the ring's
// (kv_passing_costs.hpp ring_bytes) over head_parallel_ring_call, dK/dV in the accumulation dtype.
[[nodiscard]] int64_t head_parallel_bytes(const CallShape& c, int64_t ulysses);
[[nodiscard]] int64_t head_parallel_forward_bytes(const CallShape& c, int64_t ulysses);
// The time formula (transport.hpp, "Cost formulas").
[[nodiscard]] CallTime head_parallel_time(const CallCostInputs& in, int64_t ulysses);
// The activation memory formula (transport.hpp, "Cost formulas").
[[nodiscard]] int64_t head_parallel_peak_activation_bytes(const ActivationShape& a, int64_t ulysses);

}  // namespace cpbench::kernels
