// ssm_rank_order: a negative control for Mamba hidden-parallel CP. Shards like load_balanced and
// attends through the CP transport, but the SSM layers scan the all-to-all's rank-order
// concatenation as if it were the sequence: the layout's chunk order is never undone before the
// scan nor redone after (the runner applies it per its registry entry, AttentionRouting::
// ssm_rank_order). The reference check must catch it at W >= 2 on a model with Mamba layers;
// scenarios run it with `expect: mismatch`.
#include "sharders/layout.hpp"

namespace cpbench {
std::unique_ptr<Layout> make_ssm_rank_order_layout() {
  return make_head_tail_layout("ssm_rank_order",
                               "negative control: load_balanced, SSM layers scan in rank order (chunk order not undone)");
}
}  // namespace cpbench
