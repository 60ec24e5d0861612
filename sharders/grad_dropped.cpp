// grad_dropped: a negative control that breaks a gradient only. Shards like load_balanced and attends
// through the CP transport; on the last rank the gradient of a few tokens' keys and values never
// reaches their owner (as if one block's dK/dV were not sent home). Loss and logits stay exact; the
// parameter gradients of the key/value projections must mismatch. Routed by its registry entry
// (AttentionRouting::grad_dropped); scenarios run it with `expect: mismatch`.
#include "sharders/layout.hpp"

namespace cpbench {
std::unique_ptr<Layout> make_grad_dropped_layout() {
  return make_head_tail_layout("grad_dropped",
                               "negative control: load_balanced, a few tokens' dK/dV dropped on one rank (gradient only)");
}
}  // namespace cpbench
