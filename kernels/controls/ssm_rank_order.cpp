// ssm_rank_order: a control for Mamba hidden-parallel CP. Shards like load_balanced and attends through
// the CP transport, but the SSM layers scan the all-to-all's rank-order concatenation as if it were
// the sequence (the layout's chunk order is never undone before the scan nor redone after).
#include "kernels/controls/control.hpp"

namespace cpbench {
namespace {

class SsmRankOrder final : public Control {
 public:
  [[nodiscard]] std::string name() const override { return "ssm_rank_order"; }
  [[nodiscard]] std::string description() const override {
    return "load_balanced, SSM layers scan in rank order (chunk order not undone)";
  }
  [[nodiscard]] bool ssm_scans_rank_order() const override { return true; }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override {
    if (!where.has_ssm) return "the ssm_rank_order negative control needs a model with Mamba layers (model.mixers)";
    if (where.cp == 1) return "the ssm_rank_order negative control cannot differ from the reference at cp=1";
    if (where.ssm_state_passing)
      return "the ssm_rank_order negative control breaks hidden-parallel SSM CP (ssm_cp: hidden_parallel)";
    return "";
  }
};

}  // namespace

std::unique_ptr<Control> make_ssm_rank_order_control() { return std::make_unique<SsmRankOrder>(); }

}  // namespace cpbench
