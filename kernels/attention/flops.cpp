#include "kernels/attention/flops.hpp"

namespace cpbench {

double attention_flops(double pairs, int64_t q_heads, int64_t head_dim, AttentionPass pass) {
  const double forward = 4.0 * static_cast<double>(q_heads) * static_cast<double>(head_dim) * pairs;
  switch (pass) {
    case AttentionPass::forward:
      return forward;
    case AttentionPass::backward:
      return kBackwardFactor * forward;
    case AttentionPass::train:
      return kStepFactor * forward;
  }
  return forward;
}

}  // namespace cpbench
