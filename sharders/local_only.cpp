// local_only: the broken variant the compile-safe SDPA wrap protects against, shipped as a negative
// control. It shards exactly like load_balanced but attention sees only the local keys (its registry
// entry: AttentionRouting::local_only) — what happens when a compiled graph captures the plain SDPA
// call and the CP dispatch never fires. The reference check must catch it; scenarios run it with
// `expect: mismatch`.
#include "sharders/layout.hpp"

namespace cpbench {
std::unique_ptr<Layout> make_local_only_layout() {
  return make_head_tail_layout(
      "local_only", "negative control: load_balanced layout, but attention sees only local keys (wrong on purpose)");
}
}  // namespace cpbench
