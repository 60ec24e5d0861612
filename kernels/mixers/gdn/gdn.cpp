#include "kernels/mixers/gdn/gdn.hpp"

#include <cmath>
#include <vector>

#include "kernels/mixers/config_check.hpp"
#include "kernels/mixers/linear/linear_layer.hpp"
#include "kernels/mixers/linear/state_passing.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

void GdnConfig::validate() const {
  check_field_minimums("gdn", *this);
  CP_CHECK_USAGE(value_heads % key_heads == 0, "model.gdn.value_heads: ", value_heads,
                 " must be a positive multiple of model.gdn.key_heads ", key_heads,
                 " (value heads share key heads in groups)");
}

std::vector<ConfigField> GdnConfig::fields() {
  return {{"key_heads", &key_heads}, {"value_heads", &value_heads}, {"key_head_dim", &key_head_dim},
          {"value_head_dim", &value_head_dim}, {"conv", &conv}, {"chunk", &chunk}};
}

std::string GdnConfig::cp_unsupported_reason(int64_t cp) const {
  const std::string heads = even_split_reason("model.gdn.value_heads", value_heads, cp,
                                              "head-parallel CP gives every rank value_heads/cp heads");
  return !heads.empty() ? heads
                        : split_or_replicate_reason("model.gdn.key_heads", key_heads, cp,
                                                    "key heads are split over, or replicated across, the ranks; a "
                                                    "split inside a key head would cut its dk contraction");
}

namespace {

// Channels of `proj` ([q | k | v | z | b | a]) that rank r of W runs: its key heads' q and k, its value
// heads' v, b and a. With `conv_coords`, the same channels of conv1d ([q | k | v]) without b and a.
std::vector<int64_t> gdn_rank_channels(const GdnConfig& c, int64_t W, int64_t r, bool conv_coords) {
  const int64_t Hk = c.key_heads, Hv = c.value_heads, dk = c.key_head_dim, dv = c.value_head_dim;
  const int64_t hk = Hk >= W ? Hk / W : 1, k0 = Hk >= W ? r * hk : r / (W / Hk);
  const int64_t hv = Hv / W, v0 = r * hv;
  std::vector<int64_t> idx;
  push_range(idx, k0 * dk, hk * dk);                          // q
  push_range(idx, c.key_dim() + k0 * dk, hk * dk);            // k
  push_range(idx, 2 * c.key_dim() + v0 * dv, hv * dv);        // v
  if (conv_coords) return idx;
  const int64_t ba = c.conv_channels() + c.value_dim();  // after z
  push_range(idx, ba + v0, hv);                                // b
  push_range(idx, ba + Hv + v0, hv);                           // a
  return idx;
}

}  // namespace

LinearLayerSpec gdn_spec(const GdnConfig& c) { return linear_spec("gdn", c, c.value_heads, gdn_rank_channels); }

GdnScanInputs gdn_scan_inputs(const at::Tensor& taps, const at::Tensor& ba, const at::Tensor& valid,
                              const at::Tensor& conv_w, const at::Tensor& dt_bias, const at::Tensor& A_log, int64_t hk,
                              int64_t hv, int64_t dk, int64_t dv, at::ScalarType ct) {
  const int64_t R = taps.size(0), L = taps.size(1), kd = hk * dk;
  CP_CHECK(taps.dim() == 4 && taps.size(3) == 2 * kd + hv * dv && ba.size(2) == 2 * hv && hv % hk == 0,
           "gdn: taps ", shape_str(taps.sizes()), " and [b | a] ", shape_str(ba.sizes()), " for ", hk, " key heads x ",
           dk, " and ", hv, " value heads x ", dv);
  const at::Tensor x = at::silu((taps.to(ct) * conv_w.to(ct).t().unsqueeze(0).unsqueeze(0)).sum(2));
  GdnScanInputs in;
  // Value head i reads key head i / (hv / hk): each key head's q and k repeated for its value heads.
  const int64_t per_key = hv / hk;
  in.q = (delta_rule_l2_normalize(x.narrow(2, 0, kd).reshape({R, L, hk, dk})) / std::sqrt(static_cast<double>(dk)))
             .repeat_interleave(per_key, 2);
  in.k = delta_rule_l2_normalize(x.narrow(2, kd, kd).reshape({R, L, hk, dk})).repeat_interleave(per_key, 2);
  in.v = x.narrow(2, 2 * kd, hv * dv).reshape({R, L, hv, dv});
  // Pad slots get g = beta = 0: the state passes them unchanged.
  const at::Tensor keep = valid.to(ct).unsqueeze(-1);
  in.beta = at::sigmoid(ba.narrow(2, 0, hv).to(ct)) * keep;
  in.g = -at::exp(A_log.to(ct)) * at::softplus(ba.narrow(2, hv, hv).to(ct) + dt_bias.to(ct)) * keep;
  return in;
}

at::Tensor delta_rule_l2_normalize(const at::Tensor& x) { return x * at::rsqrt((x * x).sum(-1, true) + 1e-6); }

at::Tensor gdn_gated_norm(const at::Tensor& o, const at::Tensor& z, const at::Tensor& norm_w, const GdnConfig& c) {
  return gated_rms_norm(o, z, norm_w, c.value_heads, c.value_head_dim, /*sigmoid_gate=*/false);
}

at::Tensor gated_rms_norm(const at::Tensor& o, const at::Tensor& z, const at::Tensor& norm_w, int64_t heads,
                          int64_t dv, bool sigmoid_gate) {
  const int64_t R = o.size(0), L = o.size(1);
  CP_CHECK(o.dim() == 3 && o.size(2) == heads * dv && z.sizes() == o.sizes(), "gated norm of o ",
           shape_str(o.sizes()), " with z ", shape_str(z.sizes()), ", expected [R, L, ", heads * dv, "]");
  const at::ScalarType ct = recurrence_dtype(o.scalar_type());
  const at::Tensor h = o.to(ct).view({R, L, heads, dv});
  const at::Tensor zc = z.to(ct).view({R, L, heads, dv});
  const at::Tensor y = h * at::rsqrt(h.pow(2).mean(-1, true) + 1e-6) * norm_w.to(ct) *
                       (sigmoid_gate ? at::sigmoid(zc) : at::silu(zc));
  return y.reshape({R, L, heads * dv}).to(o.scalar_type());
}

// Head-parallel (and one rank): the whole stream for this rank's heads.
at::Tensor channel_parallel_forward(const at::Tensor& proj, const GdnParams& params, const GdnConfig& c,
                                    const GdnStepContext& ctx) {
  // fill_cp_context refused a split that does not divide the heads.
  const int64_t W = ctx.comm ? ctx.comm->size() : 1;
  const int64_t hk = c.key_heads >= W ? c.key_heads / W : 1, hv = c.value_heads / W;
  const int64_t dk = c.key_head_dim, dv = c.value_head_dim;

  const at::Tensor mine = channel_parallel_gather(proj, ctx, "gdn_a2a", "gdn");  // [R, L, channels]
  const at::ScalarType st = proj.scalar_type(), ct = recurrence_dtype(st);
  const int64_t cc = 2 * hk * dk + hv * dv;
  const at::Tensor taps = conv_taps(mine.narrow(2, 0, cc).to(ct), ctx.plan, c.conv);
  const GdnScanInputs in = gdn_scan_inputs(taps, mine.narrow(2, cc, 2 * hv), ctx.plan.valid,
                                           params.conv_w.index_select(0, ctx.conv_channels),
                                           params.dt_bias.index_select(0, ctx.heads),
                                           params.A_log.index_select(0, ctx.heads), hk, hv, dk, dv, ct);
  const at::Tensor o = gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, ctx.plan.group, ctx.chunk)
                           .o.reshape({mine.size(0), mine.size(1), hv * dv})
                           .to(st);
  return channel_parallel_return(o, ctx, "gdn_a2a");  // [R, S_local, Hv*dv]
}

// One Gated DeltaNet layer (LinearLayer, linear_layer.hpp): x [R, S_local, hidden] -> in_proj
// [q | k | v | z | b | a] -> the delta rule under the step's strategy -> the gated RMSNorm with z -> out_proj.
// Its own weights, drawn after in_proj: conv_w, a per-head decay (dt_bias, A_log [Hv]), norm_w.
constexpr LinearLayerDef<GdnStepContext, GdnConfig, GdnParams> kGdnLayer{
    {"gdn_norm", "gdn_in_proj", "gdn_out_proj"},
    [](GdnParams& p, const GdnConfig& c, const LayerInit& in) {
      draw_conv(p, in, "gdn_", c);
      draw_decay(p, in, "gdn_", c.value_heads, c.value_heads);
      p.norm_w = in.around("gdn_norm_w", c.value_head_dim, 1.0, 0.1);
    },
    [](const at::Tensor& proj, const GdnConfig& c) { return proj.narrow(-1, c.conv_channels(), c.value_dim()); },
    [](const at::Tensor& o, const at::Tensor& z, const GdnParams& p, const GdnConfig& c) {
      return gdn_gated_norm(o, z, p.norm_w, c);
    }};

// The parts the shared machinery takes from this mixer (linear_parts.hpp), beside its layer: constant data.
constexpr LinearParts<GdnConfig, GdnCpStrategy, GdnCpShape, GdnStepContext> kGdnParts{
    &MixerConfigs::gdn, make_linear_layer<LinearLayer<kGdnLayer>>, gdn_spec, gdn_cp_shape, gdn_cp_terms};
const LinearParts<GdnConfig, GdnCpStrategy, GdnCpShape, GdnStepContext>& linear_parts(const GdnConfig&) {
  return kGdnParts;
}

}  // namespace cpbench
