#pragma once
// The one registry of layouts (sharders), by name. Aliases resolve to their canonical layout.
#include <memory>
#include <string>
#include <vector>

#include "sharders/layout.hpp"

namespace cpbench {

// Throws cpbench::UsageError listing the known names when `name` is unknown.
[[nodiscard]] std::shared_ptr<const Layout> make_layout(const std::string& name);
// Canonical names, in registration order.
[[nodiscard]] std::vector<std::string> known_layouts();
// "contiguous, load_balanced (alias round_robin), ..."
[[nodiscard]] std::string known_layouts_text();

}  // namespace cpbench
