// ssm_state_dropped: a control for Mamba state-passing CP. Shards like load_balanced and attends through
// the CP transport, but on the last CP rank the SSM layers ignore the state that arrives at their
// chunks: each chunk is scanned from zero as if it started the sequence (the summaries are still
// exchanged, so every other rank is exact). The check must catch it in the outputs and the gradients.
#include "kernels/controls/control.hpp"

namespace cpbench {
namespace {

class SsmStateDropped final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "ssm_state_dropped"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced, state-passing SSM layers on the last rank ignore their incoming state";
  }
  [[nodiscard]] bool ssm_drops_incoming_state() const override { return true; }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override {
    if (!where.has_ssm) return "the ssm_state_dropped negative control needs a model with Mamba layers (model.mixers)";
    if (where.cp == 1) return "the ssm_state_dropped negative control cannot differ from the reference at cp=1";
    if (!where.ssm_state_passing)
      return "the ssm_state_dropped negative control breaks state-passing SSM CP (ssm_cp: state_passing)";
    return "";
  }
};

}  // namespace

std::unique_ptr<Control> make_ssm_state_dropped_control() { return std::make_unique<SsmStateDropped>(); }

}  // namespace cpbench
