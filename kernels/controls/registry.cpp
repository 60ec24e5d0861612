#include <functional>

#include "kernels/controls/control.hpp"

namespace cpbench {

// One line per control; each lives in its own file.
std::unique_ptr<Control> make_local_only_control();
std::unique_ptr<Control> make_perturbed_control();
std::unique_ptr<Control> make_grad_dropped_control();
std::unique_ptr<Control> make_ssm_rank_order_control();
std::unique_ptr<Control> make_ssm_state_dropped_control();
std::unique_ptr<Control> make_gdn_state_dropped_control();

namespace {
const std::vector<std::unique_ptr<Control>>& controls() {
  static const std::vector<std::unique_ptr<Control>> all = [] {
    std::vector<std::unique_ptr<Control>> v;
    for (const auto& make : {make_local_only_control, make_perturbed_control, make_grad_dropped_control,
                             make_ssm_rank_order_control, make_ssm_state_dropped_control,
                             make_gdn_state_dropped_control})
      v.push_back(make());
    return v;
  }();
  return all;
}
}  // namespace

const Control* find_control(const std::string& name) {
  for (const auto& c : controls())
    if (c->name() == name) return c.get();
  return nullptr;
}

std::vector<std::string> known_controls() {
  std::vector<std::string> names;
  for (const auto& c : controls()) names.push_back(c->name());
  return names;
}

}  // namespace cpbench
