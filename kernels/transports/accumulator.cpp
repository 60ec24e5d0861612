#include "kernels/transports/accumulator.hpp"

#include "kernels/attention/lse_merge.hpp"
#include "kernels/transports/transport_common.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {
thread_local ScopedLseTap* active_tap = nullptr;
}  // namespace

void check_accumulator(const at::Tensor& state, at::ScalarType input, const char* what, const TransportState& st) {
  if (!state.defined()) return;  // nothing accumulated yet (e.g. every block of this rank was empty)
  const at::ScalarType want = compute_dtype(input);
  CP_CHECK(state.scalar_type() == want, what, " is held in ", state.scalar_type(), " ", shape_str(state.sizes()),
           " for ", input, " inputs; a state carried across blocks or ranks must be ", want,
           " (rounded once at the end, never per block or hop) (rank ", st.comm.rank(), "/", st.comm.size(), ")");
}

ScopedLseTap::ScopedLseTap() {
  CP_CHECK(active_tap == nullptr, "ScopedLseTap: taps do not nest");
  active_tap = this;
}

ScopedLseTap::~ScopedLseTap() { active_tap = nullptr; }

void tap_forward_lse(const at::Tensor& lse) {
  if (active_tap) active_tap->lse_.push_back(lse.detach().clone());
}

}  // namespace cpbench::kernels
