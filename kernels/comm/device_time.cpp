#include "kernels/comm/device_time.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include "sharders/core/check.hpp"

namespace cpbench::comm {

DeviceTime DeviceTime::now(const at::Device& device) {
  DeviceTime t;
  t.taken_ = true;
  if (device.is_cuda()) {
    auto event = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);  // timing enabled
    event->record(c10::cuda::getCurrentCUDAStream(device.index()));
    t.event_ = std::move(event);
  } else {
    t.host_ = std::chrono::steady_clock::now();
  }
  return t;
}

double DeviceTime::between(const DeviceTime& a, const DeviceTime& b) {
  CP_CHECK(a.taken_ && b.taken_, "DeviceTime::between: a time that was never taken");
  CP_CHECK(a.on_cuda() == b.on_cuda(), "DeviceTime::between: one time on CUDA, the other on the host");
  if (!a.on_cuda()) return std::chrono::duration<double>(b.host_ - a.host_).count();
  auto& ea = *static_cast<at::cuda::CUDAEvent*>(a.event_.get());
  auto& eb = *static_cast<at::cuda::CUDAEvent*>(b.event_.get());
  eb.synchronize();
  return static_cast<double>(ea.elapsed_time(eb)) / 1e3;  // ms
}

}  // namespace cpbench::comm
