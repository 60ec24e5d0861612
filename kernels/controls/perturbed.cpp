// perturbed: shards like load_balanced and attends through the CP transport, but the last rank's
// attention output is scaled by (1 + eps) on its first kControlTokens local tokens. A check that lets
// it pass is too loose.
#include "kernels/controls/control.hpp"

namespace cpbench {
namespace {

// 1e-4 is far below what a sloppy check would notice in float32 / float64. In bfloat16 the rule's
// bound is three times the single-rank error, whose max over a 2048-token row is already a few percent
// of an attention output: 5e-2 on four tokens went unnoticed there (measured, docs/correctness.md), so
// the 16-bit control moves them by 25%.
double perturbation(at::ScalarType dtype) {
  return dtype == at::kBFloat16 || dtype == at::kHalf ? 0.25 : 1e-4;
}

class PerturbedTransport final : public TransportDecorator {
 public:
  PerturbedTransport(std::shared_ptr<const Transport> inner, double eps)
      : TransportDecorator(std::move(inner)), eps_(eps) {}
  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    const at::Tensor out = inner_->attend(q, k, v, ctx);  // [B, H, S_local, D]
    const int64_t n = std::min<int64_t>(kControlTokens, out.size(2));
    at::Tensor factor = at::ones({1, 1, out.size(2), 1}, out.options());
    factor.narrow(2, 0, n).fill_(1.0 + eps_);
    return out * factor;
  }

 private:
  double eps_;
};

class Perturbed final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "perturbed"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced, one rank's attention output off by 1e-4 (bf16: 25%) on a few tokens";
  }
  [[nodiscard]] std::shared_ptr<const Transport> wrap(std::shared_ptr<const Transport> inner,
                                                      const ControlSite& site) const override {
    if (site.cp_rank != site.cp - 1) return inner;
    return std::make_shared<PerturbedTransport>(std::move(inner), perturbation(site.dtype));
  }
};

}  // namespace

std::unique_ptr<Control> make_perturbed_control() { return std::make_unique<Perturbed>(); }

}  // namespace cpbench
