// perturbed: a negative control for the reference check. Shards like load_balanced and attends through
// the CP transport, but the last rank's attention output is changed by a small relative amount on a
// few tokens (1e-4 in float32 / float64, several ulps in bfloat16; the runner applies it per its
// registry entry, AttentionRouting::perturbed). A check that lets it pass is too loose; scenarios run
// it with `expect: mismatch`.
#include "sharders/layout.hpp"

namespace cpbench {
std::unique_ptr<Layout> make_perturbed_layout() {
  return make_head_tail_layout("perturbed",
                               "negative control: load_balanced, one rank's attention output off by 1e-4 on a few tokens");
}
}  // namespace cpbench
