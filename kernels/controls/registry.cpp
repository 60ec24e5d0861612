#include <functional>

#include "kernels/controls/control.hpp"

namespace cpbench {

// One line per control; each lives in its own file.
std::unique_ptr<Control> make_local_only_control();
std::unique_ptr<Control> make_perturbed_control();
std::unique_ptr<Control> make_grad_dropped_control();
std::unique_ptr<Control> make_sink_per_step_control();         // sink_faults.cpp
std::unique_ptr<Control> make_sink_grad_unreduced_control();   // sink_faults.cpp
std::unique_ptr<Control> make_dsa_buffer_order_control();       // dsa_faults.cpp
std::unique_ptr<Control> make_dsa_kl_per_rank_control();        // dsa_faults.cpp
std::unique_ptr<Control> make_dsa_no_detach_control();          // dsa_faults.cpp
std::unique_ptr<Control> make_dsa_shared_recompute_control();   // dsa_faults.cpp
// Every registered mixer's own controls (Mixer::controls), after these.
std::vector<std::unique_ptr<Control>> make_mixer_controls();

namespace {
const std::vector<std::unique_ptr<Control>>& controls() {
  static const std::vector<std::unique_ptr<Control>> all = [] {
    std::vector<std::unique_ptr<Control>> v;
    for (const auto& make : {make_local_only_control, make_perturbed_control, make_grad_dropped_control,
                            make_sink_per_step_control, make_sink_grad_unreduced_control, make_dsa_buffer_order_control,
                            make_dsa_kl_per_rank_control, make_dsa_no_detach_control, make_dsa_shared_recompute_control})
      v.push_back(make());
    for (auto& c : make_mixer_controls()) v.push_back(std::move(c));
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
