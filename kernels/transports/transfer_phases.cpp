#include "kernels/transports/transfer_phases.hpp"

#include <utility>

namespace cpbench::kernels {

Wire::Wire(const comm::Communicator& comm, const at::Device& compute_device)
    : device(compute_device), staged(comm.size() > 1 && comm.is_gloo() && !compute_device.is_cpu()) {}

at::Tensor Wire::to_wire(const at::Tensor& t) const { return staged ? t.to(at::kCPU).contiguous() : t.contiguous(); }

at::Tensor Wire::from_wire(const at::Tensor& t) const { return staged ? t.to(device) : t; }

at::TensorOptions Wire::options(at::ScalarType dtype) const {
  return at::TensorOptions().dtype(dtype).device(staged ? at::Device(at::kCPU) : device);
}

Phase::Phase(const TransportState& st, Kind kind, std::string label)
    : stats_(st.stats),
      kind_(kind),
      label_(std::move(label)),
      range_{st.nvtx_prefix, kind == Kind::comm ? "attn_comm" : "attn_compute"},
      start_(std::chrono::steady_clock::now()) {
  if (stats_ && st.device.is_cuda()) {
    device_ = st.device;
    start_dev_ = comm::DeviceTime::now(st.device);
  }
}

Phase::~Phase() {
  if (!stats_) return;
  if (start_dev_.valid()) {  // CUDA: what the compute stream spent, resolved after the step
    stats_->device_spans.push_back({kind_ == Kind::comm ? AttentionSpan::Kind::wait : AttentionSpan::Kind::compute,
                                    label_, start_dev_, comm::DeviceTime::now(device_)});
    return;
  }
  const auto end = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(end - start_).count();
  (kind_ == Kind::comm ? stats_->comm_seconds : stats_->compute_seconds) += s;
  if (stats_->record_spans)
    stats_->spans.push_back(
        {label_, kind_ == Kind::comm ? AttentionSpan::Kind::wait : AttentionSpan::Kind::compute, start_, end});
}

std::string step_label(const char* transport, bool backward, int step) {
  return std::string(transport) + (backward ? "_bwd:" : "_fwd:") + std::to_string(step);
}

InFlight::InFlight(const TransportState& st) {
  if (st.stats && st.device.is_cuda()) posted_dev = comm::DeviceTime::now(st.device);
}

void InFlight::done(const TransportState& st, const std::string& label, bool grad) const {
  if (!st.stats) return;
  if (posted_dev.valid()) {
    st.stats->device_spans.push_back({grad ? AttentionSpan::Kind::transfer_grad : AttentionSpan::Kind::transfer, label,
                                      posted_dev, comm::DeviceTime::now(st.device)});
    return;
  }
  const auto end = std::chrono::steady_clock::now();
  st.stats->transfer_seconds += std::chrono::duration<double>(end - posted).count();
  if (st.stats->record_spans)
    st.stats->spans.push_back(
        {label, grad ? AttentionSpan::Kind::transfer_grad : AttentionSpan::Kind::transfer, posted, end});
}

}  // namespace cpbench::kernels

namespace cpbench {

void resolve_device_times(AttentionStats& stats, const comm::DeviceTime& anchor,
                          std::chrono::steady_clock::time_point anchor_host) {
  const auto at_host = [&](const comm::DeviceTime& t) {
    return anchor_host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(comm::DeviceTime::between(anchor, t)));
  };
  for (const auto& d : stats.device_spans) {
    const double s = comm::DeviceTime::between(d.begin, d.end);
    switch (d.kind) {
      case AttentionSpan::Kind::compute:
        stats.compute_seconds += s;
        break;
      case AttentionSpan::Kind::wait:
        stats.comm_seconds += s;
        break;
      case AttentionSpan::Kind::transfer:
      case AttentionSpan::Kind::transfer_grad:
        stats.transfer_seconds += s;
        break;
    }
    if (stats.record_spans && anchor.valid()) stats.spans.push_back({d.name, d.kind, at_host(d.begin), at_host(d.end)});
  }
  stats.device_spans.clear();
}

}  // namespace cpbench
