// a2a_rank_order: a negative control for the reference check. The a2a transport with the bug its
// design guards against: the gathered sequence is taken to be in global order, so the mask sees each
// token's arrival index (rank order) as its position. Identical to a2a where rank order is the global
// order (contiguous layout, or W = 1); wrong for load_balanced, striped, thd and workload_balanced,
// which scenarios run it with (`expect: mismatch`). Registered as a negative control: the planner
// skips it.
#include "kernels/transports/transport_common.hpp"

namespace cpbench::kernels {
std::shared_ptr<const Transport> make_a2a_rank_order_transport() { return make_a2a_transport(true); }
}  // namespace cpbench::kernels
