// gdn_state_dropped: a control for Gated DeltaNet state-passing CP. Shards like load_balanced and
// attends through the CP transport, but on the last CP rank the GDN layers ignore the state that
// arrives at their chunks: each chunk runs from zero as if it started the sequence (the pairs are still
// exchanged, so every other rank is exact). The check must catch it in the outputs and the gradients.
#include "kernels/controls/control.hpp"

namespace cpbench {
namespace {

class GdnStateDropped final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "gdn_state_dropped"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced, state-passing Gated DeltaNet layers on the last rank ignore their incoming state";
  }
  [[nodiscard]] bool gdn_drops_incoming_state() const override { return true; }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override {
    if (!where.has_gdn)
      return "the gdn_state_dropped negative control needs a model with Gated DeltaNet layers (model.mixers with G)";
    if (where.cp == 1) return "the gdn_state_dropped negative control cannot differ from the reference at cp=1";
    if (!where.gdn_state_passing)
      return "the gdn_state_dropped negative control breaks state-passing GDN CP (gdn_cp: state_passing)";
    return "";
  }
};

}  // namespace

std::unique_ptr<Control> make_gdn_state_dropped_control() { return std::make_unique<GdnStateDropped>(); }

}  // namespace cpbench
