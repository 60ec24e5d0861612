#include "harness/planner/kernel_model.hpp"

#include "kernels/transports/transport.hpp"

namespace cpbench::plan {

KernelModel neutral_kernel_model() {
  KernelModel k;
  k.source = "neutral: time follows visible pairs at the cluster's FLOP/s";
  return k;
}

namespace {
// FLOP-equivalent pairs of a block: what it costs at the peak rate, row overhead included.
double weighted_pairs(const KernelModel& k, const mask_area::BlockArea& b) {
  using Shape = mask_area::BlockArea::Shape;
  const double kind = b.shape() == Shape::dense ? 1.0 : k.causal_penalty;
  return kind * static_cast<double>(b.pairs) + k.row_overhead_keys * static_cast<double>(b.rows);
}
}  // namespace

double block_forward_s(const KernelModel& k, double flops, const HeadShape& h, const mask_area::BlockArea& b) {
  if (b.pairs == 0) return 0;
  return k.launch_s + attention_flops(weighted_pairs(k, b), h.heads, h.head_dim, AttentionPass::forward) / flops;
}

RankKernelTime rank_kernel_time(const KernelModel& k, double flops, const HeadShape& h,
                                const std::vector<mask_area::BlockArea>& blocks, int64_t r) {
  RankKernelTime t;
  const double unit = attention_flops(1.0, h.heads, h.head_dim, AttentionPass::forward) / flops;
  const double out_elems = static_cast<double>(h.heads * h.head_dim);
  const double kv_elems = static_cast<double>(h.kv_heads * h.head_dim);
  for (size_t j = 0; j < blocks.size(); ++j) {
    const auto& b = blocks[j];
    if (b.pairs == 0) continue;
    ++t.calls;
    const double work = unit * weighted_pairs(k, b);
    t.fwd += k.launch_s + work;
    t.bwd += k.launch_s + kBackwardFactor * work;
    if (static_cast<int64_t>(j) == r) t.local_fwd = k.launch_s + work;
    if (k.hbm_bandwidth > 0) {
      const double rows = static_cast<double>(b.rows), keys = static_cast<double>(b.keys);
      t.merge_fwd += rows * out_elems * k.merge_bytes / k.hbm_bandwidth;
      t.merge_bwd += (rows * out_elems * k.dq_bytes + 2 * keys * kv_elems * k.dkv_bytes) / k.hbm_bandwidth;
    }
  }
  return t;
}

}  // namespace cpbench::plan
