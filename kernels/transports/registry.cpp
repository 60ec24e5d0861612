#include <functional>
#include <vector>

#include "kernels/transports/transport_common.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
struct Entry {
  std::string name;
  std::function<std::shared_ptr<const Transport>(const TransportOptions&)> make;
  bool negative_control = false;  // wrong on purpose: scenarios run it with `expect: mismatch`
  bool takes_ulysses = false;     // configured by TransportOptions::ulysses
  bool window_only = false;       // runs sliding_window masks only (window_transports(), not known_transports())
};

// One line per transport; each lives in its own file.
const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      {"allgather", [](const TransportOptions&) { return kernels::make_allgather_transport(); }},
      {"ring", [](const TransportOptions&) { return kernels::make_ring_transport(); }},
      {"ring_window", [](const TransportOptions&) { return kernels::make_windowed_ring_transport(); }, false, false,
       true},
      {"a2a", [](const TransportOptions&) { return kernels::make_a2a_transport(false); }},
      {"hybrid", kernels::make_hybrid_transport, false, true},
      {"a2a_rank_order", [](const TransportOptions&) { return kernels::make_a2a_rank_order_transport(); }, true},
  };
  return all;
}

const Entry& entry(const std::string& name) {
  for (const auto& e : entries())
    if (e.name == name) return e;
  std::string known, window;
  for (const auto& e : entries()) (e.window_only ? window : known) += ((e.window_only ? window : known).empty() ? "" : ", ") + e.name;
  throw UsageError("unknown attention transport '" + name + "' (known: " + known + "); for sliding-window layers: " +
                   window);
}
}  // namespace

std::shared_ptr<const Transport> make_transport(const std::string& name, const TransportOptions& options) {
  const Entry& e = entry(name);
  CP_CHECK_USAGE(e.takes_ulysses || options.ulysses == 0, "transport ", name,
                 " takes no ulysses degree (only hybrid does), got ulysses ", options.ulysses);
  return e.make(options);
}

std::vector<std::string> known_transports() {
  std::vector<std::string> names;
  for (const auto& e : entries())
    if (!e.window_only) names.push_back(e.name);
  return names;
}

std::vector<std::string> window_transports() {
  std::vector<std::string> names;
  for (const auto& e : entries())
    if (e.window_only) names.push_back(e.name);
  return names;
}

bool is_negative_control_transport(const std::string& name) { return entry(name).negative_control; }

std::vector<std::string> planned_transports() {
  std::vector<std::string> names;
  for (const auto& e : entries())
    if (!e.negative_control && !e.window_only) names.push_back(e.name);
  return names;
}

bool takes_ulysses(const std::string& name) { return entry(name).takes_ulysses; }

}  // namespace cpbench
