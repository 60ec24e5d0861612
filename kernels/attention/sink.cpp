#include "kernels/attention/sink.hpp"

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

void apply_sink(at::Tensor& out, at::Tensor& lse, const at::Tensor& sinks) {
  const at::Tensor s = sinks.to(lse.scalar_type()).view({1, -1, 1});
  const at::Tensor merged = at::logaddexp(lse, s);
  out = out * (lse - merged).exp().unsqueeze(-1);
  lse = merged;
}

at::Tensor sink_grad(const at::Tensor& lse_with_sink, const at::Tensor& dsum, const at::Tensor& sinks) {
  const at::Tensor p_sink = (sinks.to(lse_with_sink.scalar_type()).view({1, -1, 1}) - lse_with_sink).exp();
  return (p_sink * dsum).sum(at::IntArrayRef{0, 2}).neg().to(sinks.scalar_type());
}

void check_sinks(const char* who, const at::Tensor& sinks, int64_t heads, const at::Device& device) {
  if (!sinks.defined()) return;
  CP_CHECK(sinks.dim() == 1 && sinks.size(0) == heads && at::isFloatingType(sinks.scalar_type()), who,
           ": sinks must be a floating [", heads, "] tensor (one logit per query head), got ",
           shape_str(sinks.sizes()), " ", sinks.scalar_type());
  CP_CHECK(sinks.device() == device, who, ": sinks on ", sinks.device().str(), ", q on ", device.str());
}

}  // namespace cpbench::kernels
