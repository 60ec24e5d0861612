#pragma once
// The one registry of layouts (sharders), by name. Aliases resolve to their canonical layout.
#include <memory>
#include <string>
#include <vector>

#include "sharders/layout.hpp"

namespace cpbench {

// How a sharder's attention reaches the other ranks' keys (part of its registry entry).
enum class AttentionRouting {
  transport,   // the model's attention calls the CP transport directly
  sdpa_hook,   // the CP transport is installed at the model's SDPA hook point for each forward
};

// Throws cpbench::UsageError listing the known names when `name` is unknown.
[[nodiscard]] std::shared_ptr<const Layout> make_layout(const std::string& name);
// The routing of a sharder (name or alias); UsageError listing the known names when unknown.
[[nodiscard]] AttentionRouting attention_routing(const std::string& name);
// Canonical names, in registration order.
[[nodiscard]] std::vector<std::string> known_layouts();
// "contiguous, load_balanced (alias round_robin), ..."
[[nodiscard]] std::string known_layouts_text();

}  // namespace cpbench
