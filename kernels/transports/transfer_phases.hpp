#pragma once
// How a transport's steps are staged and timed (internal to kernels/transports/): host staging of
// what travels over Gloo, the comm / compute phases and transfers in flight added to AttentionStats
// (with NVTX ranges and timeline spans), and the NVTX range of one step.
#include <ATen/ATen.h>

#include <chrono>
#include <string>

#include "kernels/comm/communicator.hpp"
#include "kernels/comm/device_time.hpp"
#include "kernels/transports/transport_common.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench::kernels {

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

}  // namespace cpbench::kernels
