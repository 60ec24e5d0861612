// The controls the mixers declare (Mixer::controls): each shards like load_balanced and attends through
// the CP transport, and plants its fault in its mixer's layers through the mixer's own step context
// (CpStepInputs::fault), on every rank or on the last one only. The check must catch it in the outputs
// and the gradients.
#include "kernels/controls/control.hpp"
#include "kernels/mixers/mixer.hpp"

namespace cpbench {
namespace {

class MixerFault final : public Control {
 public:
  MixerFault(const Mixer& mixer, MixerControl spec) : mixer_(mixer), spec_(std::move(spec)) {}
  [[nodiscard]] std::string name() const override { return spec_.name; }
  [[nodiscard]] std::string description() const override { return spec_.description; }
  [[nodiscard]] std::string mixer_fault(const std::string& mixer, const ControlSite& site) const override {
    if (mixer != mixer_.name() || (spec_.last_rank_only && site.cp_rank != site.cp - 1)) return "";
    return spec_.fault;
  }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override {
    const auto it = where.mixer_strategies.find(mixer_.name());
    if (it == where.mixer_strategies.end())
      return "the " + spec_.name + " negative control needs a model with " + mixer_.description() +
             " layers (model.mixers with " + std::string(1, mixer_.letter()) + ")";
    if (where.cp == 1) return "the " + spec_.name + " negative control cannot differ from the reference at cp=1";
    if (it->second != spec_.strategy)
      return "the " + spec_.name + " negative control breaks " + spec_.strategy + " " + mixer_.label() + " CP (" +
             mixer_.strategy_axis() + ": " + spec_.strategy + ")";
    return "";
  }

 private:
  const Mixer& mixer_;
  MixerControl spec_;
};

}  // namespace

std::vector<std::unique_ptr<Control>> make_mixer_controls() {
  std::vector<std::unique_ptr<Control>> out;
  for (const auto& m : mixers())
    for (auto spec : m->controls()) out.push_back(std::make_unique<MixerFault>(*m, std::move(spec)));
  return out;
}

}  // namespace cpbench
