#pragma once
// The cost formulas of the head-parallel transports, a2a (Ulysses, the mesh W x 1) and hybrid (Ulysses x
// ring, U x W/U) (internal to kernels/transports/; transport.hpp "Cost formulas" lists them): their
// all-to-alls plus, over R = W/U ring positions, the ring's formulas (kv_passing_costs.hpp) with the
// replicated kv heads (head_parallel.hpp, kv_replication).
#include <cstdint>

#include "kernels/transports/transport.hpp"

namespace cpbench::kernels {

// Bytes one rank sends in the forward's two all-to-alls (q, k, v in; the output back); the backward
// sends the same again (the output's gradient in; dq, dk, dv back): (U-1) * B*S*D*e * 2*(H + Hk) / U.
[[nodiscard]] int64_t head_parallel_a2a_bytes(const CallShape& c, int64_t ulysses);
// The bytes formulas of the U x (W/U) mesh: the all-to-alls above plus the ring's over R positions with
// a K/V block of 2*B*Hk*S*D*e (Hk = the replicated kv heads), dK/dV in the accumulation dtype.
[[nodiscard]] int64_t head_parallel_bytes(const CallShape& c, int64_t ulysses);
[[nodiscard]] int64_t head_parallel_forward_bytes(const CallShape& c, int64_t ulysses);
// The time formula (transport.hpp, "Cost formulas").
[[nodiscard]] CallTime head_parallel_time(const CallCostInputs& in, int64_t ulysses);
// The activation memory formula (transport.hpp, "Cost formulas").
[[nodiscard]] int64_t head_parallel_peak_activation_bytes(const ActivationShape& a, int64_t ulysses);

}  // namespace cpbench::kernels
