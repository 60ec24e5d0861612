// sdpa_wrap: the compile-safe SDPA wrap. Its layout is load_balanced's; what differs is how attention
// is reached (its registry entry: AttentionRouting::sdpa_hook): the CP transport is installed at the
// model's SDPA hook point for each forward and the original restored afterwards (also on exceptions),
// so the collective is explicit at the call site.
#include "sharders/layout.hpp"

namespace cpbench {
std::unique_ptr<Layout> make_sdpa_wrap_layout() {
  return make_head_tail_layout("sdpa_wrap", "load_balanced layout; CP transport installed at the SDPA hook point per forward");
}
}  // namespace cpbench
