#include "sharders/registry.hpp"

#include <functional>
#include <map>

#include "sharders/core/check.hpp"

namespace cpbench {

// One line per layout; each lives in its own file.
std::unique_ptr<Layout> make_contiguous_layout();
std::unique_ptr<Layout> make_load_balanced_layout();
std::unique_ptr<Layout> make_striped_layout();
std::unique_ptr<Layout> make_thd_layout();
std::unique_ptr<Layout> make_sdpa_wrap_layout();
std::unique_ptr<Layout> make_workload_balanced_layout();

namespace {
struct Entry {
  std::string name;
  std::vector<std::string> aliases;
  std::function<std::unique_ptr<Layout>()> make;
  AttentionRouting routing = AttentionRouting::transport;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      {"contiguous", {}, make_contiguous_layout},
      {"load_balanced", {"round_robin", "head_tail", "zigzag"}, make_load_balanced_layout},
      {"striped", {}, make_striped_layout},
      {"thd", {}, make_thd_layout},
      {"sdpa_wrap", {}, make_sdpa_wrap_layout, AttentionRouting::sdpa_hook},
      {"workload_balanced", {}, make_workload_balanced_layout},
  };
  return all;
}

const Entry& entry(const std::string& name) {
  for (const auto& e : entries()) {
    if (e.name == name) return e;
    for (const auto& a : e.aliases)
      if (a == name) return e;
  }
  throw UsageError(detail::concat("unknown sharder '", name, "'; known sharders: ", known_layouts_text()));
}
}  // namespace

std::shared_ptr<const Layout> make_layout(const std::string& name) { return entry(name).make(); }

AttentionRouting attention_routing(const std::string& name) { return entry(name).routing; }

std::vector<std::string> known_layouts() {
  std::vector<std::string> names;
  for (const auto& e : entries()) names.push_back(e.name);
  return names;
}

std::string known_layouts_text() {
  std::string s;
  for (const auto& e : entries()) {
    if (!s.empty()) s += ", ";
    s += e.name;
    if (!e.aliases.empty()) {
      s += " (alias";
      s += e.aliases.size() > 1 ? "es " : " ";
      for (size_t i = 0; i < e.aliases.size(); ++i) s += (i ? ", " : "") + e.aliases[i];
      s += ")";
    }
  }
  return s;
}

}  // namespace cpbench
