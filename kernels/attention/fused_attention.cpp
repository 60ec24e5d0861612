#include "kernels/attention/fused_attention.hpp"

#include <ATen/ops/_scaled_dot_product_efficient_attention.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_backward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_backward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "kernels/attention/flash_args.hpp"
#include "kernels/attention/flash_calls.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {

bool is_16bit(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

// t [..., D] with D zero-padded to `d` columns (contiguous, as the kernels' aligned rows need).
at::Tensor pad_head_dim(const at::Tensor& t, int64_t d) { return at::constant_pad_nd(t, {0, d - t.size(-1)}, 0); }

// The non-empty cells of a masked plan, when they are one rectangle of full cells: the block then runs
// unmasked on rows [r0, r1) x cols [c0, c1) (a head-tail block off the diagonal sees exactly half).
struct Rect {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
};
std::optional<Rect> full_rectangle(const TileMap& m) {
  int64_t i0 = m.n_q, i1 = -1, j0 = m.n_k, j1 = -1;
  for (int64_t i = 0; i < m.n_q; ++i)
    for (int64_t j = 0; j < m.n_k; ++j)
      if (m.kind[static_cast<size_t>(i * m.n_k + j)] != BlockKind::empty) {
        i0 = std::min(i0, i);
        i1 = std::max(i1, i);
        j0 = std::min(j0, j);
        j1 = std::max(j1, j);
      }
  if (i1 < 0) return std::nullopt;
  for (int64_t i = i0; i <= i1; ++i)
    for (int64_t j = j0; j <= j1; ++j)
      if (m.kind[static_cast<size_t>(i * m.n_k + j)] != BlockKind::full) return std::nullopt;
  return Rect{i0 * kBlockTile, std::min(m.rows, (i1 + 1) * kBlockTile), j0 * kBlockTile,
              std::min(m.cols, (j1 + 1) * kBlockTile)};
}

// What one fused call evaluates: the whole (possibly trimmed) block, causal or not, with an optional
// bool mask [B, Sq, Sk].
struct Call {
  bool causal = false;
  at::Tensor mask;        // undefined: no mask
  at::Tensor empty_rows;  // bool [B, Sq], rows the mask leaves without a key (undefined: computed here)
  const MaskBand* band = nullptr;  // the plan's band the mask comes from: its bias is cached there
};

// Additive mask in the kernel dtype, one for all heads: [B, 1, Sq, Sk] (CPU), or on CUDA the same
// with its key dim padded to a multiple of 16 and sliced back (the memory-efficient kernel's
// alignment rule), expanded over the H heads without a copy (stride 0).
at::Tensor additive_mask(const at::Tensor& mask, const at::Tensor& q, bool cuda) {
  const int64_t b = mask.size(0), sq = mask.size(1), sk = mask.size(2);
  if (!cuda) return at::zeros({b, 1, sq, sk}, q.options()).masked_fill_(mask.logical_not().unsqueeze(1), kNegInf);
  const int64_t padded = (sk + 15) / 16 * 16;
  at::Tensor bias = at::zeros({b, 1, sq, padded}, q.options()).narrow(3, 0, sk);
  return bias.masked_fill_(mask.logical_not().unsqueeze(1), kNegInf);
}

// The call's bias, [B, 1, Sq, Sk] (CPU) or expanded over the heads (CUDA): the band's cached one
// when it matches the kernel's dtype and device, else built (and cached on the band).
at::Tensor call_bias(const Call& call, const at::Tensor& q, bool cuda) {
  at::Tensor bias;
  if (call.band && call.band->bias.defined() && call.band->bias.scalar_type() == q.scalar_type() &&
      call.band->bias.device() == q.device()) {
    bias = call.band->bias;
  } else {
    bias = additive_mask(call.mask, q, cuda);
    if (call.band) call.band->bias = bias;
  }
  return cuda ? bias.expand({bias.size(0), q.size(1), bias.size(2), bias.size(3)}) : bias;
}

// The flash route evaluates no mask: a call that carries one must never reach it (it would run
// unmasked and be silently wrong). block_route sends masked calls elsewhere; this holds it.
void check_flash_unmasked(const Call& call, const char* where) {
  CP_CHECK(!call.mask.defined(), where, ": the flash route was given a mask ", shape_str(call.mask.sizes()),
           " it cannot evaluate (block_route sends masked bands to the memory-efficient kernel)");
}

// The memory-efficient kernel takes as many kv heads as query heads (GQA by expansion; dK/dV summed
// back). The flash kernel takes GQA natively and never expands.
at::Tensor expand_heads(const at::Tensor& t, int64_t hq) {
  return t.size(1) == hq ? t : t.repeat_interleave(hq / t.size(1), 1);
}
at::Tensor sum_heads(const at::Tensor& g, int64_t hkv) {
  if (g.size(1) == hkv) return g;
  return g.view({g.size(0), hkv, g.size(1) / hkv, g.size(2), g.size(3)}).sum(2);
}

BlockOutput fused_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Call& call,
                          double scale, KernelRoute route, bool kernel_dtype_out = false) {
  const auto cd = compute_dtype(q.scalar_type());
  at::Tensor out, lse;
  if (route == KernelRoute::cpu_flash) {
    std::optional<at::Tensor> bias;
    if (call.mask.defined()) bias = call_bias(call, q, false);
    std::tie(out, lse) = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, call.causal, bias, scale);
  } else if (route == KernelRoute::cuda_flash) {
    check_flash_unmasked(call, "fused_forward");
    auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, call.causal, false, scale);
    out = std::get<0>(r);
    lse = std::get<1>(r);
  } else {
    CP_CHECK(route == KernelRoute::cuda_efficient, "fused_forward: route ", to_string(route), " is not fused");
    const int64_t hq = q.size(1);
    std::optional<at::Tensor> bias;
    if (call.mask.defined()) bias = call_bias(call, q, true);
    auto r = at::_scaled_dot_product_efficient_attention(q, expand_heads(k, hq), expand_heads(v, hq), bias, true, 0.0,
                                                         call.causal, scale);
    out = std::get<0>(r);
    lse = std::get<1>(r).narrow(2, 0, q.size(2));  // padded to a multiple of 32 queries
  }
  if (!kernel_dtype_out) out = out.to(cd);
  lse = lse.to(cd);
  if (call.mask.defined()) {
    // The kernels give a row with no visible key lse 0 (CPU) or NaN (CUDA); the merge needs -inf, out 0.
    const at::Tensor none =
        (call.empty_rows.defined() ? call.empty_rows : call.mask.any(-1).logical_not()).unsqueeze(1);  // [B, 1, Sq]
    out = out.masked_fill(none.unsqueeze(-1), 0);
    lse = lse.masked_fill(none, kNegInf);
  }
  return {out, lse.contiguous()};
}

BlockGrads fused_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& out, const at::Tensor& lse, const Call& call, double scale,
                          KernelRoute route, bool kernel_dtype_out = false) {
  const auto cd = compute_dtype(q.scalar_type());
  const at::Tensor out_k = out.to(q.scalar_type());
  // A row with lse -inf sees nothing anywhere: every score is -inf and P = exp(-inf - 0) = 0.
  const at::Tensor lse_f = at::nan_to_num(lse, 0.0, 0.0, 0.0);
  at::Tensor dq, dk, dv;
  if (route == KernelRoute::cpu_flash) {
    std::optional<at::Tensor> bias;
    if (call.mask.defined()) bias = call_bias(call, q, false);
    std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout, q, k, v, out_k, lse_f.to(q.scalar_type()).contiguous(), 0.0, call.causal, bias, scale);
  } else {
    const int64_t hq = q.size(1), hkv = k.size(1);
    const at::Tensor none = at::empty({0}, q.options().dtype(at::kLong));
    if (route == KernelRoute::cuda_flash) {
      check_flash_unmasked(call, "fused_backward");
      // GQA native: dK / dV come back with the kv heads.
      std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
          dout, q, k, v, out_k, lse_f.to(at::kFloat).contiguous(), at::Tensor(), at::Tensor(), q.size(2), k.size(2),
          0.0, call.causal, none, none, scale);
    } else {
      const at::Tensor ke = expand_heads(k, hq), ve = expand_heads(v, hq);
      CP_CHECK(route == KernelRoute::cuda_efficient, "fused_backward: route ", to_string(route), " is not fused");
      at::Tensor bias;
      if (call.mask.defined()) bias = call_bias(call, q, true);
      const int64_t pad = (q.size(2) + 31) / 32 * 32 - q.size(2);
      const at::Tensor lse_p = at::constant_pad_nd(lse_f.to(at::kFloat), {0, pad}, 0).contiguous();
      auto r = at::_scaled_dot_product_efficient_attention_backward(dout, q, ke, ve, bias, out_k, lse_p, none, none,
                                                                    0.0, {true, true, true, false}, call.causal, scale);
      dq = std::get<0>(r);
      dk = std::get<1>(r);
      dv = std::get<2>(r);
    }
    // Expanded GQA heads sum in the compute dtype (an accumulation); flash's native GQA needs none.
    if (dk.size(1) != hkv) {
      dk = sum_heads(dk.to(cd), hkv);
      dv = sum_heads(dv.to(cd), hkv);
    }
  }
  if (kernel_dtype_out) return {dq, dk, dv};
  return {dq.to(cd), dk.to(cd), dv.to(cd)};
}

// The call of one band: unmasked when its cells are all full, else with the band's own mask window,
// the one the plan carries (attach_band_masks: built with the step's plans, on their device); a plan
// made without them (plan_block on a whole mask, in tests) builds the window here.
Call band_call(const BlockPlan& plan, const MaskBand& band, const at::Tensor& q) {
  if (!band.masked) return Call{};
  if (band.mask.defined()) return Call{false, band.mask, band.empty_rows, &band};
  return Call{false, plan_mask(plan, q.size(0), band.r0, band.r1 - band.r0, band.c0, band.c1 - band.c0, q.device()), {},
              nullptr};
}

// One band on `route`. The flash-window route runs a band with a window through it, a full band on
// plain flash and a masked band no window expresses on the memory-efficient kernel with its bias.
BlockOutput band_forward(const BlockPlan& plan, const MaskBand& band, const at::Tensor& qs, const at::Tensor& q,
                         const at::Tensor& k, const at::Tensor& v, double scale, KernelRoute route) {
  if (route == KernelRoute::cuda_flash_window) {
    if (band.masked && band.window) {
      const at::Tensor none =
          band.empty_rows.defined()
              ? band.empty_rows
              : plan_mask(plan, q.size(0), band.r0, band.r1 - band.r0, band.c0, band.c1 - band.c0, q.device())
                    .any(-1)
                    .logical_not();
      return flash_window_forward(q, k, v, *band.window, none, scale);
    }
    route = band.masked ? KernelRoute::cuda_efficient : KernelRoute::cuda_flash;
  }
  return fused_forward(q, k, v, band_call(plan, band, qs), scale, route);
}
BlockGrads band_backward(const BlockPlan& plan, const MaskBand& band, const at::Tensor& qs, const at::Tensor& dout,
                         const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, double scale, KernelRoute route) {
  if (route == KernelRoute::cuda_flash_window) {
    if (band.masked && band.window) return flash_window_backward(dout, q, k, v, out, lse, *band.window, scale);
    route = band.masked ? KernelRoute::cuda_efficient : KernelRoute::cuda_flash;
  }
  return fused_backward(dout, q, k, v, out, lse, band_call(plan, band, qs), scale, route);
}

}  // namespace

const char* to_string(KernelRoute route) {
  switch (route) {
    case KernelRoute::skipped: return "skipped";
    case KernelRoute::tiled: return "tiled";
    case KernelRoute::cpu_flash: return "cpu_flash";
    case KernelRoute::cuda_flash: return "cuda_flash";
    case KernelRoute::cuda_flash_window: return "cuda_flash_window";
    case KernelRoute::cuda_flash_varlen: return "cuda_flash_varlen";
    case KernelRoute::cuda_efficient: return "cuda_efficient";
  }
  return "?";
}

at::ScalarType kernel_dtype(at::ScalarType input, const at::Device& device, KernelPolicy policy) {
  if (policy == KernelPolicy::fused && device.is_cuda() && is_16bit(input)) return input;
  return compute_dtype(input);
}

int64_t fused_head_dim(KernelRoute route, at::ScalarType dtype, int64_t head_dim) {
  const bool cuda_fused = route == KernelRoute::cuda_flash || route == KernelRoute::cuda_flash_window ||
                          route == KernelRoute::cuda_flash_varlen || route == KernelRoute::cuda_efficient;
  // float32 needs no padding: the memory-efficient kernel has unaligned float32 kernels.
  return cuda_fused && is_16bit(dtype) ? (head_dim + 7) / 8 * 8 : head_dim;
}

KernelRoute block_route(const BlockPlan& plan, at::ScalarType dtype, const at::Device& device, int64_t head_dim,
                        KernelPolicy policy, int64_t q_heads, int64_t kv_heads) {
  if (plan.kind == BlockKind::empty) return KernelRoute::skipped;
  if (policy != KernelPolicy::fused) return KernelRoute::tiled;
  const bool unmasked = plan.kind == BlockKind::full || plan.causal ||
                        (plan.kind == BlockKind::masked && full_rectangle(plan.tiles).has_value());
  if (device.is_cpu()) return dtype == at::kDouble || dtype == at::kFloat ? KernelRoute::cpu_flash : KernelRoute::tiled;
  if (!device.is_cuda() || dtype == at::kDouble) return KernelRoute::tiled;
  const bool flash = is_16bit(dtype) && fused_head_dim(KernelRoute::cuda_flash, dtype, head_dim) <= 256;
  if (unmasked && flash) return KernelRoute::cuda_flash;
  if (flash && plan.kind == BlockKind::masked) {
    // Flash's own mask arguments (attach_flash_args): windows when they cover every masked band, else
    // the block's varlen segments, else windows for the bands that have one (the others: efficient).
    bool every = true, some = false;
    for (const MaskBand& band : plan.bands) {
      if (!band.masked) continue;
      if (band.window) some = true;
      else every = false;
    }
    if (some && every) return KernelRoute::cuda_flash_window;
    if (plan.varlen && varlen_call_runs(*plan.varlen, q_heads, kv_heads)) return KernelRoute::cuda_flash_varlen;
    if (some) return KernelRoute::cuda_flash_window;
  }
  return KernelRoute::cuda_efficient;
}

int64_t routed_pairs(const BlockPlan& plan, KernelRoute route, int64_t batch) {
  if (route == KernelRoute::skipped) return 0;
  if (route == KernelRoute::tiled || plan.kind == BlockKind::full || plan.causal) return plan.computed_pairs;
  if (route == KernelRoute::cuda_flash_varlen) {
    CP_CHECK(plan.varlen.has_value(), "routed_pairs: the varlen route for a plan without varlen segments");
    return plan.varlen->pairs;
  }
  int64_t area = 0;
  for (const MaskBand& band : plan.bands) {
    const bool windowed = route == KernelRoute::cuda_flash_window && band.masked && band.window;
    area += windowed ? (band.window->q1 - band.window->q0) * (band.window->k1 - band.window->k0)
                     : (band.r1 - band.r0) * (band.c1 - band.c0);
  }
  return batch * area;
}

BlockOutput routed_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const BlockPlan& plan,
                           double scale, KernelRoute route, BlockNumerics numerics) {
  if (route == KernelRoute::tiled) return block_forward(q, k, v, plan, scale, numerics.rounding);
  const int64_t dc =
      numerics.call_head_dim > 0 ? numerics.call_head_dim : fused_head_dim(route, q.scalar_type(), q.size(3));
  if (route != KernelRoute::skipped && dc != q.size(3)) {
    // Zero columns of q and k add nothing to q.k (the scale is the caller's, of the true head dim), and
    // v's give out zero columns, sliced off.
    BlockNumerics padded = numerics;
    padded.call_head_dim = dc;
    BlockOutput r = routed_forward(pad_head_dim(q, dc), pad_head_dim(k, dc), pad_head_dim(v, dc), plan, scale, route,
                                   padded);
    r.out = r.out.narrow(3, 0, v.size(3)).contiguous();
    return r;
  }
  const auto cd = compute_dtype(q.scalar_type());
  const int64_t b = q.size(0), hq = q.size(1), sq = q.size(2), d = v.size(3);
  if (route == KernelRoute::skipped)
    return {at::zeros({b, hq, sq, d}, q.options().dtype(cd)), at::full({b, hq, sq}, kNegInf, q.options().dtype(cd))};
  const at::Tensor qs = trim_rows(plan, q), ks = trim_cols(plan, k), vs = trim_cols(plan, v);
  BlockOutput r;
  if (plan.kind == BlockKind::full || plan.causal) {
    r = fused_forward(qs, ks, vs, Call{plan.causal, {}, {}, nullptr}, scale, route, numerics.kernel_dtype_out);
  } else if (route == KernelRoute::cuda_flash_varlen) {
    CP_CHECK(plan.varlen.has_value(), "routed_forward: the varlen route for a plan without varlen segments");
    r = flash_varlen_forward(qs, ks, vs, *plan.varlen, scale);
  } else {
    // Band by band (mask_bands): each band's rows see keys only in its span, so its call takes that
    // span and a mask of the band's size; rows in no band see nothing (out 0, lse -inf).
    const std::vector<MaskBand>& bands = plan.bands;
    CP_CHECK(!bands.empty(), "routed_forward: a masked plan with visible pairs has no bands (not made by plan_block / "
             "plan_from_cells?)");
    const int64_t n = qs.size(2);
    if (bands.size() == 1 && bands[0].r0 == 0 && bands[0].r1 == n) {
      r = band_forward(plan, bands[0], qs, qs, ks.narrow(2, bands[0].c0, bands[0].c1 - bands[0].c0),
                       vs.narrow(2, bands[0].c0, bands[0].c1 - bands[0].c0), scale, route);
    } else {
      r.out = at::zeros({qs.size(0), qs.size(1), n, vs.size(3)}, qs.options().dtype(cd));
      r.lse = at::full({qs.size(0), qs.size(1), n}, kNegInf, qs.options().dtype(cd));
      for (const MaskBand& band : bands) {
        const int64_t nr = band.r1 - band.r0, nc = band.c1 - band.c0;
        const BlockOutput part = band_forward(plan, band, qs, qs.narrow(2, band.r0, nr), ks.narrow(2, band.c0, nc),
                                              vs.narrow(2, band.c0, nc), scale, route);
        r.out.narrow(2, band.r0, nr).copy_(part.out);
        r.lse.narrow(2, band.r0, nr).copy_(part.lse);
      }
    }
  }
  r.out = untrim_rows(plan, r.out, sq, 0);
  r.lse = untrim_rows(plan, r.lse, sq, kNegInf);
  return r;
}

BlockGrads routed_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dsum, const BlockPlan& plan,
                           double scale, KernelRoute route, BlockNumerics numerics) {
  if (route == KernelRoute::tiled) {
    const auto cd = compute_dtype(q.scalar_type());
    const at::Tensor dout_c = dout.to(cd);
    // FA2 computes D = rowsum(dO * O) from the 16-bit O it is given.
    const at::Tensor ds = numerics.rounding.on() ? (dout_c * numerics.rounding(out.to(cd))).sum(-1) : dsum;
    return block_backward(dout_c, q, k, v, lse, ds, plan, scale, numerics.rounding);
  }
  const int64_t dc =
      numerics.call_head_dim > 0 ? numerics.call_head_dim : fused_head_dim(route, q.scalar_type(), q.size(3));
  if (route != KernelRoute::skipped && dc != q.size(3)) {
    // The forward's padding: dout and out padded with zeros keep rowsum(dout * out); dq, dk, dv of the
    // zero columns are sliced off.
    BlockNumerics padded = numerics;
    padded.call_head_dim = dc;
    BlockGrads g = routed_backward(pad_head_dim(dout, dc), pad_head_dim(q, dc), pad_head_dim(k, dc),
                                   pad_head_dim(v, dc), pad_head_dim(out, dc), lse, dsum, plan, scale, route, padded);
    const int64_t d = q.size(3);
    return {g.dq.narrow(3, 0, d).contiguous(), g.dk.narrow(3, 0, d).contiguous(), g.dv.narrow(3, 0, d).contiguous()};
  }
  const auto cd = compute_dtype(q.scalar_type());
  if (route == KernelRoute::skipped)
    return {at::zeros(q.sizes(), q.options().dtype(cd)), at::zeros(k.sizes(), k.options().dtype(cd)),
            at::zeros(v.sizes(), v.options().dtype(cd))};
  const at::Tensor qs = trim_rows(plan, q), ds = trim_rows(plan, dout), os = trim_rows(plan, out);
  const at::Tensor ls = trim_rows(plan, lse);
  const at::Tensor ks = trim_cols(plan, k), vs = trim_cols(plan, v);
  BlockGrads g;
  if (plan.kind == BlockKind::full || plan.causal) {
    g = fused_backward(ds, qs, ks, vs, os, ls, Call{plan.causal, {}, {}, nullptr}, scale, route,
                       numerics.kernel_dtype_out);
  } else if (route == KernelRoute::cuda_flash_varlen) {
    CP_CHECK(plan.varlen.has_value(), "routed_backward: the varlen route for a plan without varlen segments");
    g = flash_varlen_backward(ds, qs, ks, vs, os, ls, *plan.varlen, scale);
  } else {
    // The forward's bands: dQ rows are the band's own, dK / dV add up over the bands' key spans.
    g.dq = at::zeros(qs.sizes(), qs.options().dtype(cd));
    g.dk = at::zeros(ks.sizes(), ks.options().dtype(cd));
    g.dv = at::zeros(vs.sizes(), vs.options().dtype(cd));
    CP_CHECK(!plan.bands.empty(), "routed_backward: a masked plan with visible pairs has no bands");
    for (const MaskBand& band : plan.bands) {
      const int64_t nr = band.r1 - band.r0, nc = band.c1 - band.c0;
      const BlockGrads part = band_backward(plan, band, qs, ds.narrow(2, band.r0, nr), qs.narrow(2, band.r0, nr),
                                            ks.narrow(2, band.c0, nc), vs.narrow(2, band.c0, nc),
                                            os.narrow(2, band.r0, nr), ls.narrow(2, band.r0, nr), scale, route);
      g.dq.narrow(2, band.r0, nr).copy_(part.dq);
      g.dk.narrow(2, band.c0, nc).add_(part.dk);
      g.dv.narrow(2, band.c0, nc).add_(part.dv);
    }
  }
  g.dq = untrim_rows(plan, g.dq, q.size(2), 0);
  g.dk = untrim_cols(plan, g.dk, k.size(2));
  g.dv = untrim_cols(plan, g.dv, v.size(2));
  return g;
}

}  // namespace cpbench::kernels
