#include <functional>
#include <map>

#include "kernels/transports/transport_common.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
const std::map<std::string, std::function<std::shared_ptr<const Transport>()>>& factories() {
  static const std::map<std::string, std::function<std::shared_ptr<const Transport>()>> f{
      {"allgather", kernels::make_allgather_transport},
      {"ring", kernels::make_ring_transport},
  };
  return f;
}
}  // namespace

std::shared_ptr<const Transport> make_transport(const std::string& name) {
  const auto& f = factories();
  const auto it = f.find(name);
  if (it == f.end()) {
    std::string known;
    for (const auto& [n, _] : f) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("unknown attention transport '" + name + "' (known: " + known + ")");
  }
  return it->second();
}

std::vector<std::string> known_transports() {
  std::vector<std::string> names;
  for (const auto& [n, _] : factories()) names.push_back(n);
  return names;
}

}  // namespace cpbench
