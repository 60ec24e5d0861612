#include "harness/runner/reference_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sharders/core/check.hpp"

namespace cpbench {

ElementwiseBound elementwise_bound(at::ScalarType dtype) {
  // Measured noise of reordering the same sums (docs/correctness.md, "Bounds"): over the correctness
  // sweeps, the worst |cp - ref| / (|ref| + 1e-3 max|ref|) was ~4e-13 in float64 and ~6e-5 in float32;
  // the bounds leave a margin of ~100x (float64) and ~5x (float32) above it, and stay far below the
  // 1e-4 relative error the `perturbed` control injects.
  if (dtype == at::kDouble) return {1e-10, 1e-12};
  return {3e-5, 3e-6};  // float32
}

bool judged_by_precision(at::ScalarType dtype, bool recurrent_layers) {
  return dtype == at::kBFloat16 || dtype == at::kHalf || (dtype == at::kFloat && recurrent_layers);
}

namespace {

// "(b=.., s=.., v=..)" of a flat index, plus the owning rank when known.
std::string locate(int64_t flat, at::IntArrayRef shape, const ElementNames& names) {
  std::vector<int64_t> idx(shape.size());
  int64_t rest = flat;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = rest % shape[static_cast<size_t>(d)];
    rest /= shape[static_cast<size_t>(d)];
  }
  std::string s = "(";
  for (size_t d = 0; d < idx.size(); ++d) {
    if (d) s += ", ";
    s += (d < names.axes.size() ? names.axes[d] : "i" + std::to_string(d)) + "=" + std::to_string(idx[d]);
  }
  s += ")";
  if (names.owner && shape.size() >= 2) {
    const int64_t o = (*names.owner)[idx[0]][idx[1]].item<int64_t>();
    s += o >= 0 ? " owned by rank " + std::to_string(o) : " (dropped by the shard)";
  }
  return s;
}

std::string values(double cp, double ref, double bound) {
  char buf[160];
  std::snprintf(buf, sizeof buf, ": cp=%.10g ref=%.10g bound=%.3g", cp, ref, bound);
  return buf;
}

// Shapes must agree; NaN counts as an infinite error.
bool prepare(const std::string& name, const at::Tensor& cp_in, const at::Tensor& ref_in, at::Tensor& cp, at::Tensor& ref,
             TensorError& e) {
  e.tensor = name;
  cp = cp_in.detach().to(at::kCPU, at::kDouble).contiguous();
  ref = ref_in.detach().to(at::kCPU, at::kDouble).contiguous();
  e.elements = ref.numel();
  if (!cp.sizes().equals(ref.sizes())) {
    e.ok = false;
    e.mismatches = e.elements;
    e.max_abs = e.max_rel = e.score = INFINITY;
    e.worst = "shape " + shape_str(cp.sizes()) + " differs from the reference's " + shape_str(ref.sizes());
    return false;
  }
  return true;
}

at::Tensor abs_error(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor d = (a - b).abs();
  return at::where(at::isnan(d), at::full_like(d, INFINITY), d);
}

double quantile_of(const at::Tensor& t, double q) {
  if (t.numel() == 0) return 0;
  return at::quantile(t.flatten().to(at::kDouble), q, /*dim=*/std::nullopt, /*keepdim=*/false, "higher").item<double>();
}

}  // namespace

TensorError compare_elementwise(const std::string& name, const at::Tensor& cp_in, const at::Tensor& ref_in,
                                const ElementwiseBound& b, const ElementNames& names) {
  TensorError e;
  e.criterion = "elementwise";
  e.rtol = b.rtol;
  at::Tensor cp, ref;
  if (!prepare(name, cp_in, ref_in, cp, ref, e)) return e;
  if (e.elements == 0) return e;
  const at::Tensor diff = abs_error(cp, ref);
  double scale = ref.abs().max().item<double>();
  if (scale == 0) scale = names.zero_scale;
  e.atol = std::max(b.atol_scale * scale, 1e-300);
  const at::Tensor bound = e.atol + b.rtol * ref.abs();
  const at::Tensor ratio = diff / bound;
  e.mismatches = (diff > bound).sum().item<int64_t>();
  const int64_t worst = ratio.flatten().argmax().item<int64_t>();
  e.score = ratio.flatten()[worst].item<double>();
  e.max_abs = diff.max().item<double>();
  e.max_rel = e.max_abs / std::max(scale, 1e-300);
  e.ok = e.mismatches == 0;
  e.worst = locate(worst, cp.sizes(), names) +
            values(cp.flatten()[worst].item<double>(), ref.flatten()[worst].item<double>(),
                   bound.flatten()[worst].item<double>());
  return e;
}

at::Tensor half_ulp(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  CP_CHECK(t == at::kBFloat16 || t == at::kHalf, "half_ulp: ", t, " is not a 16-bit floating dtype");
  const double mantissa_bits = t == at::kBFloat16 ? 7 : 10;  // stored bits after the leading one
  const at::Tensor mag = x.detach().to(at::kDouble).abs();
  // log2(0) = -inf gives 2^-inf = 0: an exact zero was not rounded.
  return at::pow(2.0, at::floor(at::log2(mag)) - (mantissa_bits + 1));
}

TensorError compare_precision(const std::string& name, const at::Tensor& cp_in, const at::Tensor& single_in,
                              const at::Tensor& ref64_in, const PrecisionRule& rule, const ElementNames& names,
                              const at::Tensor& cp_rounding) {
  TensorError e;
  e.criterion = "precision";
  e.k = rule.k;
  e.quantile = rule.quantile;
  at::Tensor cp, ref, single, unused;
  if (!prepare(name, cp_in, ref64_in, cp, ref, e)) return e;
  {
    TensorError shape_check;
    if (!prepare(name, single_in, ref64_in, single, unused, shape_check))
      throw Error(detail::concat("reference check: the single-rank ", name, " ", shape_check.worst));
  }
  if (e.elements == 0) return e;
  const at::Tensor e_cp = abs_error(cp, ref), e_1 = abs_error(single, ref);
  double scale = ref.abs().max().item<double>();
  if (scale == 0) scale = names.zero_scale;
  e.floor = rule.floor_scale * scale;
  e.single_rank_max = e_1.max().item<double>();
  e.single_rank_q = quantile_of(e_1, rule.quantile);
  e.max_abs = e_cp.max().item<double>();
  e.max_rel = e.max_abs / std::max(scale, 1e-300);
  e.cp_q = quantile_of(e_cp, rule.quantile);
  double rounding_max = 0, rounding_q = 0;
  if (cp_rounding.defined() && cp_rounding.numel() > 0) {
    CP_CHECK(cp_rounding.numel() == e.elements, "reference check: the CP rounding allowance of ", name, " has ",
             cp_rounding.numel(), " elements, the tensor ", e.elements);
    const at::Tensor r = cp_rounding.detach().to(at::kCPU, at::kDouble);
    rounding_max = r.max().item<double>();
    rounding_q = quantile_of(r, rule.quantile);
  }
  const double bound_max = rule.k * e.single_rank_max + rounding_max + e.floor;
  const double bound_q = rule.k * e.single_rank_q + rounding_q + e.floor;
  const double tiny = 1e-300;
  e.score = std::max(e.max_abs / std::max(bound_max, tiny), e.cp_q / std::max(bound_q, tiny));
  e.mismatches = (e_cp > bound_max).sum().item<int64_t>();
  e.ok = e.max_abs <= bound_max && e.cp_q <= bound_q;
  const int64_t worst = e_cp.flatten().argmax().item<int64_t>();
  e.worst = locate(worst, cp.sizes(), names) +
            values(cp.flatten()[worst].item<double>(), ref.flatten()[worst].item<double>(), bound_max) +
            " (q" + std::to_string(static_cast<int>(rule.quantile * 100)) + ": cp " + std::to_string(e.cp_q) +
            " vs bound " + std::to_string(bound_q) + ")" +
            (rounding_max > 0 ? " (CP rounding allowance max " + std::to_string(rounding_max) + ", q" +
                                    std::to_string(static_cast<int>(rule.quantile * 100)) + " " +
                                    std::to_string(rounding_q) + ")"
                              : "");
  return e;
}

TensorError compare_precision_mean(const std::string& name, const at::Tensor& cp_in, const at::Tensor& ref64_in,
                                   const at::Tensor& single_terms, const at::Tensor& ref64_terms, const at::Tensor& count,
                                   const PrecisionRule& rule) {
  TensorError e;
  e.criterion = "precision";
  e.k = rule.k;
  e.quantile = rule.quantile;
  at::Tensor cp, ref;
  if (!prepare(name, cp_in, ref64_in, cp, ref, e)) return e;
  CP_CHECK(e.elements == 1, "reference check: ", name, " is a mean over tokens, a scalar; got ", e.elements, " elements");
  CP_CHECK(single_terms.sizes().equals(ref64_terms.sizes()), "reference check: the per-token terms of ", name, " ",
           shape_str(single_terms.sizes()), " and ", shape_str(ref64_terms.sizes()), " differ in shape");
  const double n = count.detach().to(at::kCPU, at::kDouble).item<double>();
  const at::Tensor d = abs_error(single_terms.detach().to(at::kCPU, at::kDouble), ref64_terms.detach().to(at::kCPU, at::kDouble));
  const double signed_single = std::abs(
      (single_terms.detach().to(at::kCPU, at::kDouble).sum() - ref64_terms.detach().to(at::kCPU, at::kDouble).sum())
          .item<double>() / std::max(n, 1.0));
  const double r = ref.item<double>();
  e.floor = rule.floor_scale * std::abs(r);
  e.single_rank_max = e.single_rank_q = d.sum().item<double>() / std::max(n, 1.0);
  e.max_abs = e.cp_q = abs_error(cp, ref).item<double>();
  e.max_rel = e.max_abs / std::max(std::abs(r), 1e-300);
  const double bound = rule.k * e.single_rank_max + e.floor;
  e.score = e.max_abs / std::max(bound, 1e-300);
  e.ok = e.max_abs <= bound;
  e.mismatches = e.ok ? 0 : 1;
  char buf[200];
  std::snprintf(buf, sizeof buf, " (scale: mean |per-token error| of the single rank %.3g; its signed mean %.3g)",
                e.single_rank_max, signed_single);
  e.worst = values(cp.item<double>(), r, bound) + buf;
  return e;
}

}  // namespace cpbench
