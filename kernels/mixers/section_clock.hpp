#pragma once
// Times one differentiable section of a model (e.g. the recurrent part of every layer of a mixer): its forward
// and, through autograd, its backward, on the device the section runs on (CPU: host clock; CUDA: events
// on the compute stream, no host synchronization). Wrap the section's input with clock.enter() and its
// output with clock.leave(); after the step's backward (and, on CUDA, a synchronize), seconds() is the
// section's total time, forward + backward, summed over every wrapped call.
#include <ATen/ATen.h>

#include <vector>

#include "kernels/comm/device_time.hpp"

namespace cpbench {

class SectionClock {
 public:
  explicit SectionClock(at::Device device) : device_(device) {}
  // Identity on x. Forward: opens a span. Backward: closes the span leave()'s backward opened.
  [[nodiscard]] at::Tensor enter(const at::Tensor& x);
  // Identity on y. Forward: closes the span enter() opened. Backward: opens a span.
  [[nodiscard]] at::Tensor leave(const at::Tensor& y);
  // Seconds of every closed span (CUDA: waits for the last event).
  [[nodiscard]] double seconds() const;
  // Implementation detail of the autograd marks.
  void mark(bool open);

 private:
  at::Device device_;
  comm::DeviceTime open_;
  std::vector<std::pair<comm::DeviceTime, comm::DeviceTime>> spans_;
};

}  // namespace cpbench
