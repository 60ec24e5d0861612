#pragma once
// Points in time on a device, for timing work that runs asynchronously to the host.
//
// CPU: the steady clock when taken. CUDA: an event recorded on the device's current stream when taken
// (timing enabled, no host synchronization); its time is known once the stream has passed it, so
// between() on a CUDA pair waits for the later one. Copies share the event. CUDA headers stay in the
// .cpp: nothing that includes this header needs the CUDA runtime.
//
// Why: on a GPU the host clock around a kernel launch measures the launch, and a communication wait
// (ProcessGroupNCCL's Work::wait) blocks the compute stream, not the host. Device time comes from
// events on the compute stream: a span between two of them is what the stream spent, computing or
// waiting for a transfer.
#include <ATen/ATen.h>

#include <chrono>
#include <memory>

namespace cpbench::comm {

class DeviceTime {
 public:
  DeviceTime() = default;
  // Now on `device` (CPU: the host clock; CUDA: an event on its current stream).
  [[nodiscard]] static DeviceTime now(const at::Device& device);
  // Seconds from `a` to `b`, both taken on the same device (b after a; CUDA: waits until b has
  // completed). Throws when they come from different kinds of device or either was never taken.
  [[nodiscard]] static double between(const DeviceTime& a, const DeviceTime& b);
  [[nodiscard]] bool valid() const { return taken_; }
  [[nodiscard]] bool on_cuda() const { return event_ != nullptr; }

 private:
  bool taken_ = false;
  std::chrono::steady_clock::time_point host_{};
  std::shared_ptr<void> event_;  // at::cuda::CUDAEvent on CUDA
};

}  // namespace cpbench::comm
