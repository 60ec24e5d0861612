// grad_dropped: a control that breaks a gradient only. Shards like load_balanced and attends through
// the CP transport; on the last rank the gradient of its first kControlTokens tokens' keys and values
// never reaches their owner (as if one block's dK/dV were not sent home). Loss and logits stay exact;
// the key/value projections' parameter gradients must mismatch.
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/controls/control.hpp"

namespace cpbench {
namespace {

// Identity forward; the backward zeroes the gradient of the first kControlTokens local tokens.
class DropTokenGrad : public torch::autograd::Function<DropTokenGrad> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& t) { return t.view_as(t); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    at::Tensor g = grads[0].clone();
    g.narrow(2, 0, std::min<int64_t>(kControlTokens, g.size(2))).zero_();
    return {g};
  }
};

class GradDroppedTransport final : public TransportDecorator {
 public:
  using TransportDecorator::TransportDecorator;
  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    // MLA's latent wire: k is the latent, v undefined (its gradient is the latent's).
    return inner_->attend(q, DropTokenGrad::apply(k), v.defined() ? DropTokenGrad::apply(v) : v, ctx);
  }
};

class GradDropped final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "grad_dropped"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced, a few tokens' dK/dV dropped on one rank (gradient only)";
  }
  [[nodiscard]] std::shared_ptr<const Transport> wrap(std::shared_ptr<const Transport> inner,
                                                      const ControlSite& site) const override {
    if (site.cp_rank != site.cp - 1) return inner;
    return std::make_shared<GradDroppedTransport>(std::move(inner));
  }
};

}  // namespace

std::unique_ptr<Control> make_grad_dropped_control() { return std::make_unique<GradDropped>(); }

}  // namespace cpbench
