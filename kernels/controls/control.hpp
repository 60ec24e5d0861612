#pragma once
// Negative controls: cases that are wrong on purpose, so the reference check is seen to fail when it
// should (scenarios run them with `expect: mismatch`). A control is named on the scenario's `sharder`
// axis, shards with an ordinary layout, and plants its fault by decorating what the case runs with:
// the CP transport (wrap) or a mixer's layers (mixer_fault: a fault the mixer's own step context plants,
// e.g. a recurrent mixer's layers scanning in rank order). The runner asks the control and never switches over
// control names.
//
// Adding a control: one file here defining `std::unique_ptr<Control> make_<name>_control()`, and one
// line in registry.cpp; a mixer's controls are declared by the mixer (Mixer::controls,
// kernels/mixers/mixer.hpp) and registered from the mixer registry (mixer_fault.cpp).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "kernels/mixers/mixer_configs.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench {

// Where the decorated transport runs: this rank of a CP group of `cp` ranks, the case's dtype.
struct ControlSite {
  int64_t cp_rank = 0;
  int64_t cp = 1;
  at::ScalarType dtype = at::kDouble;
};

// The case a control is asked to show its fault in.
struct ControlCase {
  int64_t cp = 1;
  // The strategy each mixer with one runs, by mixer name (only the mixers the model has).
  std::map<std::string, std::string> mixer_strategies;
  const MixerConfigs* model = nullptr;  // the case's model (its mixers' keys); null: unknown
  int64_t key_blocks = 1;  // the key blocks one attention call merges per query: W / head_parallel_degree
};

class Control {
 public:
  virtual ~Control() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::string description() const = 0;
  // The registered layout the control shards with.
  [[nodiscard]] virtual std::string layout() const { return "load_balanced"; }
  // The transport the case's attention calls: `inner` itself, or `inner` with the fault planted.
  [[nodiscard]] virtual std::shared_ptr<const Transport> wrap(std::shared_ptr<const Transport> inner,
                                                              const ControlSite& /*site*/) const {
    return inner;
  }
  // The fault planted in the layers of the mixer named `mixer` on `site`'s rank, as that mixer's step
  // context reads it (CpStepInputs::fault); "" = none.
  [[nodiscard]] virtual std::string mixer_fault(const std::string& /*mixer*/, const ControlSite& /*site*/) const {
    return "";
  }
  // Why the fault cannot show in `where` ("" when it can): such a case is skipped rather than failed.
  [[nodiscard]] virtual std::string cannot_show(const ControlCase& /*where*/) const { return ""; }
};

// A transport that forwards everything to `inner`; controls override what they break.
class TransportDecorator : public Transport {
 public:
  explicit TransportDecorator(std::shared_ptr<const Transport> inner) : inner_(std::move(inner)) {}
  [[nodiscard]] std::string name() const override { return inner_->name(); }
  [[nodiscard]] std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                               int64_t cp) const override {
    return inner_->unsupported_reason(mask, options, cp);
  }
  [[nodiscard]] std::string unsupported_heads(int64_t cp, int64_t q_heads, int64_t kv_heads) const override {
    return inner_->unsupported_heads(cp, q_heads, kv_heads);
  }
  [[nodiscard]] int64_t head_parallel_degree(int64_t cp) const override { return inner_->head_parallel_degree(cp); }
  [[nodiscard]] std::string unsupported_layout(const Layout& layout) const override {
    return inner_->unsupported_layout(layout);
  }
  [[nodiscard]] std::string unsupported_mla(MlaWire wire) const override { return inner_->unsupported_mla(wire); }
  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    return inner_->attend(q, k, v, ctx);
  }
  [[nodiscard]] std::shared_ptr<const kernels::PlanCache> make_plans(const MaskSpec& mask, const TokenMeta& local,
                                                                    const TokenMeta& all, const at::Tensor& global_index,
                                                                    int rank, int world,
                                                                    const at::Device& device) const override {
    return inner_->make_plans(mask, local, all, global_index, rank, world, device);
  }
  [[nodiscard]] int64_t bytes_per_call(const CallShape& s) const override { return inner_->bytes_per_call(s); }
  [[nodiscard]] int64_t forward_bytes_per_call(const CallShape& s) const override {
    return inner_->forward_bytes_per_call(s);
  }
  [[nodiscard]] CallTime time_per_call(const CallCostInputs& in) const override { return inner_->time_per_call(in); }
  [[nodiscard]] int64_t peak_activation_bytes(const ActivationShape& s) const override {
    return inner_->peak_activation_bytes(s);
  }

 protected:
  std::shared_ptr<const Transport> inner_;
};

// The control registered under `name`, or nullptr when `name` is not a control.
[[nodiscard]] const Control* find_control(const std::string& name);
// Registered control names, in registration order.
[[nodiscard]] std::vector<std::string> known_controls();

// The attention output faults act on the first kControlTokens local tokens of the last CP rank.
inline constexpr int64_t kControlTokens = 4;

}  // namespace cpbench
