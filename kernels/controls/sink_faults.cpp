// The learned-sink negative controls (model.attention.sinks; kernels/attention/sink.hpp). Both shard like
// load_balanced and attend through the case's transport:
//   sink_per_step        the sink joins the softmax after every merged key block, not once after the
//                        merge (the per-step placement that counts it once per block: TE's ring issue).
//                        Shows where a call merges more than one key block (W / head-parallel degree > 1).
//   sink_grad_unreduced  the sink's gradient as one rank holds it before the CP reduction: every rank but
//                        the last drops its partial, so the harness's reduction over the CP ranks
//                        (train_step.cpp) hands every rank the last rank's partial alone. Gradient only:
//                        loss and logits stay exact.
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/controls/control.hpp"

namespace cpbench {
namespace {

std::string needs_sinks(const std::string& control, const ControlCase& where) {
  if (where.model && where.model->attention.sinks == 0)
    return "the " + control + " negative control needs model.attention.sinks: true";
  if (where.cp == 1) return "the " + control + " negative control cannot differ from the reference at cp=1";
  return "";
}

class SinkPerStepTransport final : public TransportDecorator {
 public:
  using TransportDecorator::TransportDecorator;
  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    AttentionContext faulty = ctx;
    faulty.sink_every_step = true;
    return inner_->attend(q, k, v, faulty);
  }
};

class SinkPerStep final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "sink_per_step"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced, the learned sink added after every merged key block instead of once (wrong on purpose)";
  }
  [[nodiscard]] std::shared_ptr<const Transport> wrap(std::shared_ptr<const Transport> inner,
                                                      const ControlSite&) const override {
    return std::make_shared<SinkPerStepTransport>(std::move(inner));
  }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override {
    if (std::string why = needs_sinks(name(), where); !why.empty()) return why;
    if (where.key_blocks < 2)
      return "the sink_per_step negative control needs a call that merges several key blocks (a2a merges one)";
    return "";
  }
};

// Identity forward; the backward drops the gradient.
class DropGrad : public torch::autograd::Function<DropGrad> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& t) { return t.view_as(t); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {at::zeros_like(grads[0])};
  }
};

class SinkGradUnreducedTransport final : public TransportDecorator {
 public:
  using TransportDecorator::TransportDecorator;
  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    if (!ctx.sinks.defined()) return inner_->attend(q, k, v, ctx);
    AttentionContext faulty = ctx;
    faulty.sinks = DropGrad::apply(ctx.sinks);
    return inner_->attend(q, k, v, faulty);
  }
};

class SinkGradUnreduced final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "sink_grad_unreduced"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced, the learned sink's gradient one rank's partial, never summed over the CP ranks "
           "(gradient only)";
  }
  [[nodiscard]] std::shared_ptr<const Transport> wrap(std::shared_ptr<const Transport> inner,
                                                      const ControlSite& site) const override {
    if (site.cp_rank == site.cp - 1) return inner;
    return std::make_shared<SinkGradUnreducedTransport>(std::move(inner));
  }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override { return needs_sinks(name(), where); }
};

}  // namespace

std::unique_ptr<Control> make_sink_per_step_control() { return std::make_unique<SinkPerStep>(); }
std::unique_ptr<Control> make_sink_grad_unreduced_control() { return std::make_unique<SinkGradUnreduced>(); }

}  // namespace cpbench
