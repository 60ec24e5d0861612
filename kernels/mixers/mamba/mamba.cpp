#include "kernels/mixers/mamba/mamba.hpp"

#include <vector>

#include "kernels/mixers/config_check.hpp"
#include "kernels/mixers/linear/linear_layer.hpp"
#include "kernels/mixers/linear/state_passing.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

void SsmConfig::validate() const {
  check_field_minimums("ssm", *this);
  CP_CHECK_USAGE(heads % groups == 0, "model.ssm.groups: ", groups, " must divide model.ssm.heads ", heads);
}

std::string SsmConfig::cp_unsupported_reason(int64_t cp) const {
  const std::string split =
      even_split_reason("model.ssm.heads", heads, cp, "hidden-parallel CP gives every rank heads/cp SSM heads");
  return !split.empty() ? split
                        : split_or_replicate_reason("model.ssm.groups", groups, cp,
                                                    "B/C groups are split over, or replicated across, the ranks");
}

std::vector<ConfigField> SsmConfig::fields() {
  return {{"heads", &heads}, {"head_dim", &head_dim}, {"state", &state},
          {"groups", &groups}, {"conv", &conv}, {"chunk", &chunk}};
}

namespace {

// Channels of `proj` ([z | x | B | C | dt]) that rank q of W scans: its heads' x, its groups' B and C,
// its heads' dt. With `conv_coords`, the same channels of conv1d ([x | B | C]) without dt.
std::vector<int64_t> rank_channels(const SsmConfig& c, int64_t W, int64_t q, bool conv_coords) {
  const int64_t h_l = c.heads / W, d_l = h_l * c.head_dim, N = c.state, G = c.groups;
  const int64_t g_l = G >= W ? G / W : 1;
  const int64_t g0 = G >= W ? q * g_l : q / (W / G);
  const int64_t base = conv_coords ? 0 : c.d_inner();  // skip z in proj coordinates
  std::vector<int64_t> idx;
  push_range(idx, base + q * d_l, d_l);                                    // x
  push_range(idx, base + c.d_inner() + g0 * N, g_l * N);                   // B
  push_range(idx, base + c.d_inner() + G * N + g0 * N, g_l * N);           // C
  if (!conv_coords) push_range(idx, base + c.d_inner() + 2 * G * N + q * h_l, h_l);  // dt
  return idx;
}


}  // namespace

LinearLayerSpec mamba_spec(const SsmConfig& c) { return linear_spec("mamba", c, c.heads, rank_channels); }

SsmScanInputs conv_to_scan_inputs(const at::Tensor& taps, const at::Tensor& dt_raw, const at::Tensor& valid,
                               const at::Tensor& conv_w, const at::Tensor& conv_b, const at::Tensor& dt_bias,
                               const at::Tensor& A_log, const at::Tensor& D, int64_t head_dim, int64_t groups,
                               int64_t state, at::ScalarType ct) {
  const int64_t R = taps.size(0), L = taps.size(1), h = dt_raw.size(2), d = h * head_dim, gn = groups * state;
  const at::Tensor xbc = at::silu((taps.to(ct) * conv_w.to(ct).t().unsqueeze(0).unsqueeze(0)).sum(2) + conv_b.to(ct));
  SsmScanInputs in;
  in.x = xbc.narrow(2, 0, d).reshape({R, L, h, head_dim});
  in.B = xbc.narrow(2, d, gn).reshape({R, L, groups, state});
  in.C = xbc.narrow(2, d + gn, gn).reshape({R, L, groups, state});
  // Pad slots get dt = 0: no decay, no input, so the state carries through them unchanged.
  in.dt = at::softplus(dt_raw.to(ct) + dt_bias.to(ct)) * valid.to(ct).unsqueeze(-1);
  in.A = -at::exp(A_log.to(ct));
  in.D = D.to(ct);
  return in;
}

// Hidden-parallel (and one rank): the whole stream for this rank's channels.
at::Tensor channel_parallel_forward(const at::Tensor& proj, const SsmParams& params, const SsmConfig& c,
                                    const SsmStepContext& ctx) {
  // fill_cp_context refused a split that does not divide the heads and groups.
  const int64_t W = ctx.comm ? ctx.comm->size() : 1;
  const int64_t h_l = c.heads / W, d_l = h_l * c.head_dim, g_l = c.groups >= W ? c.groups / W : 1;
  const int64_t N = c.state;

  // Sequence-parallel -> hidden-parallel: block q of the last dim holds rank q's channels.
  const at::Tensor mine = channel_parallel_gather(proj, ctx, "ssm_a2a", "mamba");  // [R, L, channels]
  const at::ScalarType st = proj.scalar_type(), ct = recurrence_dtype(st);
  const int64_t cc = d_l + 2 * g_l * N;
  // Causal depthwise conv over each token's earlier real tokens of its group (ScanPlan::conv_src).
  const at::Tensor taps = conv_taps(mine.narrow(2, 0, cc).to(ct), ctx.plan, c.conv);
  const SsmScanInputs in = conv_to_scan_inputs(
      taps, mine.narrow(2, cc, h_l), ctx.plan.valid, params.conv_w.index_select(0, ctx.conv_channels),
      params.conv_b.index_select(0, ctx.conv_channels), params.dt_bias.index_select(0, ctx.heads),
      params.A_log.index_select(0, ctx.heads), params.D.index_select(0, ctx.heads), c.head_dim, g_l, N, ct);
  const at::Tensor y = ssm_scan(in.x, in.dt, in.A, in.B, in.C, in.D, ctx.plan.group, ctx.chunk)
                           .reshape({mine.size(0), mine.size(1), d_l})
                           .to(st);
  return channel_parallel_return(y, ctx, "ssm_a2a");  // [R, S_local, d_inner]
}

// One Mamba-2 layer (LinearLayer, linear_layer.hpp): x [R, S_local, hidden] -> in_proj [x | z | B | C | dt] ->
// the scan under the step's strategy -> y silu(z) -> out_proj. Its own weights, drawn after in_proj: conv_w,
// conv_b, dt_bias and A_log [H], D [H].
constexpr LinearLayerDef<SsmStepContext, SsmConfig, SsmParams> kMambaLayer{
    {"ssm_norm", "in_proj", "out_proj"},
    [](SsmParams& p, const SsmConfig& c, const LayerInit& in) {
      draw_conv(p, in, "", c);
      p.conv_b = in.normal("conv_b", {c.conv_channels()}, 0.1);
      draw_decay(p, in, "", c.heads, c.heads);
      p.D = in.around("D", c.heads, 1.0, 0.1);
    },
    [](const at::Tensor& proj, const SsmConfig& c) { return proj.narrow(-1, 0, c.d_inner()); },
    [](const at::Tensor& y, const at::Tensor& z, const SsmParams&, const SsmConfig&) { return y * at::silu(z); }};

// The parts the shared machinery takes from this mixer (linear_parts.hpp), beside its layer: constant data.
constexpr LinearParts<SsmConfig, SsmCpStrategy, SsmCpShape, SsmStepContext> kMambaParts{
    &MixerConfigs::ssm, make_linear_layer<LinearLayer<kMambaLayer>>, mamba_spec, ssm_cp_shape, ssm_cp_terms};
const LinearParts<SsmConfig, SsmCpStrategy, SsmCpShape, SsmStepContext>& linear_parts(const SsmConfig&) {
  return kMambaParts;
}

}  // namespace cpbench
