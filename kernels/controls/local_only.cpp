// local_only: the broken variant the compile-safe SDPA wrap protects against. It shards exactly like
// load_balanced, but attention sees only the local keys: what happens when a compiled graph captures
// the plain SDPA call and the CP dispatch never fires. On MLA's latent wire it up-projects the local
// latent itself (mla_expand), so it fails by mismatch, not by a shape check.
#include "kernels/attention/mla.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/controls/control.hpp"

namespace cpbench {
namespace {

class LocalOnlyTransport final : public TransportDecorator {
 public:
  using TransportDecorator::TransportDecorator;
  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    if (!ctx.kv_up.defined()) return local_attention(q, k, v, ctx.local, ctx.local, ctx.mask, ctx.scale, ctx.sinks);
    // MLA's latent wire: k is the local latent [B, 1, S, r + dr] and v undefined; up-project it here as
    // the layer would (q's head dim is dn + dr).
    const int64_t dr = k.size(3) - ctx.kv_up.size(1);
    const auto [kx, vx] = kernels::mla_expand(k.select(1, 0), ctx.kv_up, q.size(1), q.size(3) - dr);
    return local_attention(q, kx, vx, ctx.local, ctx.local, ctx.mask, ctx.scale, ctx.sinks);
  }
  // Nothing is exchanged, so nothing is planned against the other ranks' keys.
  [[nodiscard]] std::shared_ptr<const kernels::PlanCache> make_plans(const MaskSpec&, const TokenMeta&,
                                                                    const TokenMeta&, const at::Tensor&, int, int,
                                                                    const at::Device&) const override {
    return nullptr;
  }
};

class LocalOnly final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "local_only"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced layout, but attention sees only local keys (wrong on purpose)";
  }
  [[nodiscard]] std::shared_ptr<const Transport> wrap(std::shared_ptr<const Transport> inner,
                                                      const ControlSite&) const override {
    return std::make_shared<LocalOnlyTransport>(std::move(inner));
  }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override {
    return where.cp == 1 ? "a local-only negative control cannot differ from the reference at cp=1" : "";
  }
};

}  // namespace

std::unique_ptr<Control> make_local_only_control() { return std::make_unique<LocalOnly>(); }

}  // namespace cpbench
