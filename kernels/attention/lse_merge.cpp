#include "kernels/attention/lse_merge.hpp"

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

at::ScalarType compute_dtype(at::ScalarType input) { return input == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor finite_or_zero(const at::Tensor& x) { return at::nan_to_num(x, 0.0, 0.0, 0.0); }

namespace {
bool is_accumulation_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kDouble; }
}  // namespace

void merge_block(at::Tensor& out, at::Tensor& lse, const BlockOutput& block) {
  // The running pair is the merge's accumulator: held in 16 bits it would be rounded once per block,
  // an error growing with the number of blocks (W) that bf16's own noise hides at small W.
  CP_CHECK(is_accumulation_dtype(block.out.scalar_type()) && block.lse.scalar_type() == block.out.scalar_type(),
           "merge_block: a block's partial output / log-sum-exp are ", block.out.scalar_type(), " / ",
           block.lse.scalar_type(), "; block kernels return the compute dtype (float32 or float64)");
  CP_CHECK(!out.defined() || (out.scalar_type() == block.out.scalar_type() && lse.scalar_type() == block.out.scalar_type()),
           "merge_block: the running output / log-sum-exp are held in ", out.scalar_type(), " / ", lse.scalar_type(),
           ", the block's in ", block.out.scalar_type(), ": the merge accumulates in the compute dtype, never rounded "
           "to the input dtype between blocks");
  if (!out.defined()) {
    out = block.out;
    lse = block.lse;
    return;
  }
  // new_lse = m + log(e^(a-m) + e^(b-m)) with m = max(a, b) made finite: both weights are <= 1 and
  // one is 1 unless both sides are -inf, where the weights are 0, the sum is 0 and the output stays 0.
  // The sum is 0 or in [1, 2], so clamping it to 1 only replaces the 0.
  at::Tensor m = finite_or_zero(at::maximum(lse, block.lse));
  at::Tensor wa = (lse - m).exp_();
  at::Tensor wb = (block.lse - m).exp_();
  at::Tensor sum = wa + wb;
  out = (out * wa.unsqueeze(-1)).add_(block.out * wb.unsqueeze(-1)).div_(sum.clamp_min(1).unsqueeze(-1));
  lse = sum.log_().add_(m);
}

}  // namespace cpbench::kernels
