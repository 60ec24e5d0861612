#include "kernels/mixers/section_clock.hpp"

#include <torch/csrc/autograd/custom_function.h>

namespace cpbench {
namespace {

// Identity whose forward and backward each take one mark: `forward_opens` says which of the two opens
// a span (enter: forward opens, backward closes; leave: the reverse, since backward runs in reverse).
class ClockMark : public torch::autograd::Function<ClockMark> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& t, SectionClock* clock,
                            bool forward_opens) {
    clock->mark(forward_opens);
    ctx->saved_data["clock"] = reinterpret_cast<int64_t>(clock);
    ctx->saved_data["opens"] = forward_opens;
    return t.view_as(t);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* clock = reinterpret_cast<SectionClock*>(ctx->saved_data["clock"].toInt());
    clock->mark(!ctx->saved_data["opens"].toBool());
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor SectionClock::enter(const at::Tensor& x) { return ClockMark::apply(x, this, true); }
at::Tensor SectionClock::leave(const at::Tensor& y) { return ClockMark::apply(y, this, false); }

void SectionClock::mark(bool open) {
  const comm::DeviceTime now = comm::DeviceTime::now(device_);
  if (open) {
    open_ = now;
  } else if (open_.valid()) {
    spans_.emplace_back(open_, now);
    open_ = comm::DeviceTime{};
  }
}

double SectionClock::seconds() const {
  double s = 0;
  for (const auto& [a, b] : spans_) s += comm::DeviceTime::between(a, b);
  return s;
}

}  // namespace cpbench
