#include "kernels/mixers/kda/kda.hpp"

#include <cmath>
#include <vector>

#include "kernels/mixers/config_check.hpp"
#include "kernels/mixers/linear/state_passing.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

void KdaConfig::validate() const {
  check_field_minimums("kda", *this);
}

std::vector<ConfigField> KdaConfig::fields() {
  return {{"heads", &heads}, {"key_head_dim", &key_head_dim}, {"value_head_dim", &value_head_dim},
          {"conv", &conv},   {"chunk", &chunk},               {"gate_rank", &gate_rank}};
}

std::string KdaConfig::cp_unsupported_reason(int64_t cp) const {
  return even_split_reason("model.kda.heads", heads, cp, "head-parallel CP gives every rank heads/cp heads");
}

namespace {

// Channels of proj ([q | k | v | b | f]) rank r of W runs: its heads' q, k, v, b and gate channels. With
// `conv_coords`, the same channels of conv1d ([q | k | v]).
std::vector<int64_t> kda_rank_channels(const KdaConfig& c, int64_t W, int64_t r, bool conv_coords) {
  const int64_t h = c.heads / W, h0 = r * h, dk = c.key_head_dim, dv = c.value_head_dim;
  std::vector<int64_t> idx;
  push_range(idx, h0 * dk, h * dk);                    // q
  push_range(idx, c.key_dim() + h0 * dk, h * dk);      // k
  push_range(idx, 2 * c.key_dim() + h0 * dv, h * dv);  // v
  if (conv_coords) return idx;
  push_range(idx, c.conv_channels() + h0, h);                        // b
  push_range(idx, c.conv_channels() + c.heads + h0 * dk, h * dk);    // f, this rank's heads' key channels
  return idx;
}

}  // namespace

LinearLayerSpec kda_spec(const KdaConfig& c) { return linear_spec("kda", c, c.heads, kda_rank_channels); }

GdnScanInputs kda_scan_inputs(const at::Tensor& taps, const at::Tensor& bf, const at::Tensor& valid,
                              const at::Tensor& conv_w, const at::Tensor& dt_bias, const at::Tensor& A_log, int64_t h,
                              int64_t dk, int64_t dv, at::ScalarType ct) {
  const int64_t R = taps.size(0), L = taps.size(1), kd = h * dk;
  CP_CHECK(taps.dim() == 4 && taps.size(3) == 2 * kd + h * dv && bf.size(2) == h + kd && dt_bias.size(0) == kd &&
               A_log.size(0) == h,
           "kda: taps ", shape_str(taps.sizes()), ", [b | f] ", shape_str(bf.sizes()), ", dt_bias ",
           shape_str(dt_bias.sizes()), " for ", h, " heads x ", dk, " / ", dv);
  const at::Tensor x = at::silu((taps.to(ct) * conv_w.to(ct).t().unsqueeze(0).unsqueeze(0)).sum(2));
  GdnScanInputs in;
  in.q = delta_rule_l2_normalize(x.narrow(2, 0, kd).reshape({R, L, h, dk})) / std::sqrt(static_cast<double>(dk));
  in.k = delta_rule_l2_normalize(x.narrow(2, kd, kd).reshape({R, L, h, dk}));
  in.v = x.narrow(2, 2 * kd, h * dv).reshape({R, L, h, dv});
  const at::Tensor keep = valid.to(ct).unsqueeze(-1);
  in.beta = at::sigmoid(bf.narrow(2, 0, h).to(ct)) * keep;
  // Per head and key channel: f and dt_bias are [h*dk] in head-major order.
  const at::Tensor f = (bf.narrow(2, h, kd).to(ct) + dt_bias.to(ct)).reshape({R, L, h, dk});
  in.g = -at::exp(A_log.to(ct)).view({1, 1, h, 1}) * at::softplus(f) * keep.unsqueeze(-1);
  return in;
}

at::Tensor kda_forward(const at::Tensor& proj, const KdaParams& params, const KdaConfig& c, const KdaStepContext& ctx) {
  const int64_t dk = c.key_head_dim, dv = c.value_head_dim;
  const auto compute = [](const at::Tensor& p) { return recurrence_dtype(p.scalar_type()); };
  const auto state_passing = [&](const at::Tensor& p) {
    const StatePassingPlan& sp = step_state_passing_plan(ctx, c.conv, "kda");
    const int64_t cc = c.conv_channels();
    const at::Tensor taps = state_passing_taps(p.narrow(2, 0, cc), ctx, "kda_halo");
    const GdnScanInputs in = kda_scan_inputs(taps, p.narrow(2, cc, c.heads + c.key_dim()), sp.local.valid,
                                             params.conv_w, params.dt_bias, params.A_log, c.heads, dk, dv, compute(p));
    return delta_rule_state_passing(in, ctx, "kda_states").reshape({p.size(0), p.size(1), c.value_dim()})
        .to(p.scalar_type());
  };
  // Head-parallel (and one rank): the whole stream for this rank's heads (fill_cp_context refused a split
  // that does not divide them).
  const auto head_parallel = [&](const at::Tensor& p) {
    const int64_t h = c.heads / (ctx.comm ? ctx.comm->size() : 1), cc = h * (2 * dk + dv);
    const at::Tensor mine = channel_parallel_gather(p, ctx, "kda_a2a", "kda");  // [R, L, channels]
    const at::Tensor taps = conv_taps(mine.narrow(2, 0, cc).to(compute(p)), ctx.plan, c.conv);
    const GdnScanInputs in =
        kda_scan_inputs(taps, mine.narrow(2, cc, h + h * dk), ctx.plan.valid,
                        params.conv_w.index_select(0, ctx.conv_channels),
                        params.dt_bias.view({c.heads, dk}).index_select(0, ctx.heads).reshape({-1}),
                        params.A_log.index_select(0, ctx.heads), h, dk, dv, compute(p));
    const at::Tensor o = gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, ctx.plan.group, ctx.chunk)
                             .o.reshape({mine.size(0), mine.size(1), h * dv})
                             .to(p.scalar_type());
    return channel_parallel_return(o, ctx, "kda_a2a");  // [R, S_local, H*dv]
  };
  return linear_forward(proj, ctx, c.proj_width(), c.value_dim(), "kda", state_passing, head_parallel);
}

}  // namespace cpbench
