// The Mamba layer under state passing (ssm_cp: state_passing): the shared machinery
// (kernels/mixers/linear/state_passing.hpp) with Mamba's own chunk summary, a decay and a state:
//   summary of chunk c, per row and head: its final state S_c (the tokens after its last reset, decayed
//   to its end) and its carry a_c = exp(sum of dt A over the chunk), 0 when the chunk holds a reset (its
//   first token included): the state after c is a_c * (state before c) + S_c;
//   correction: a token t of chunk c that no reset separates from the token before c's start adds
//   C[t] . (exp(sum of dt A over [start, t]) * state arriving at c).
#include <vector>

#include "kernels/mixers/linear/state_passing.hpp"
#include "kernels/mixers/mamba/mamba.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

// Steps 3-5 of the header: what the state arriving at each own chunk adds to its tokens' outputs,
// [R, L, H, P].
at::Tensor incoming_state_correction(const StatePassingPlan& sp, const SsmScanInputs& in, const SsmStepContext& ctx) {
  const int64_t R = in.x.size(0), H = in.x.size(2), P = in.x.size(3);
  const int64_t G = in.B.size(2), N = in.B.size(3), Kh = H / G;
  const at::Tensor a = in.dt * in.A.view({1, 1, H});  // [R, L, H]: log decay at each token

  // Each own chunk's summary [R, H, P*N + 1]: final state, then carry.
  std::vector<at::Tensor> own;
  for (size_t j = 0; j < sp.chunks.size(); ++j) {
    const auto& ch = sp.chunks[j];
    const at::Tensor a_c = a.narrow(1, ch.begin, ch.length);
    // Decay from each token to the chunk's end, sum over (s, end]: a suffix sum, no long differences.
    const at::Tensor to_end = at::flip(at::cumsum(at::flip(a_c, {1}), 1), {1}) - a_c;
    const at::Tensor w =
        masked_exp(sp.summary_keep.narrow(1, ch.begin, ch.length).unsqueeze(-1), to_end) * in.dt.narrow(1, ch.begin, ch.length);
    const at::Tensor wx = (w.unsqueeze(-1) * in.x.narrow(1, ch.begin, ch.length)).view({R, ch.length, G, Kh, P});
    const at::Tensor state =
        at::einsum("rsgkp,rsgn->rgkpn", {wx, in.B.narrow(1, ch.begin, ch.length)}).reshape({R, H, P * N});
    const at::Tensor carry = masked_exp(sp.carry_keep.select(0, static_cast<int64_t>(j)).view({R, 1}), a_c.sum(1));
    own.push_back(at::cat({state, carry.unsqueeze(-1)}, -1));
  }
  const at::Tensor all = gather_chunk_summaries(std::move(own), ctx, "ssm_states");  // [W * slots, R, H, P*N + 1]
  // The state arriving at each chunk; after chunk c it is carry_c * (the state before c) + S_c.
  const std::vector<at::Tensor> incoming = compose_incoming(
      sp, all, at::zeros({R, H, P * N}, a.options()), [P, N](const at::Tensor& s, const at::Tensor& state) {
        return s.narrow(-1, P * N, 1) * state + s.narrow(-1, 0, P * N);
      });

  std::vector<at::Tensor> pieces;
  for (size_t j = 0; j < sp.chunks.size(); ++j) {
    const auto& ch = sp.chunks[j];
    const int64_t p = sp.drop_incoming_state ? 0 : ch.prefix;
    if (p > 0) {
      const at::Tensor into = masked_exp(sp.prefix_keep.narrow(1, ch.begin, p).unsqueeze(-1),
                                         at::cumsum(a.narrow(1, ch.begin, p), 1));  // sum over [start, t]
      const at::Tensor h = incoming[j].view({R, G, Kh, P, N});
      pieces.push_back(at::einsum("rtgn,rgkpn->rtgkp", {in.C.narrow(1, ch.begin, p), h}).reshape({R, p, H, P}) *
                       into.unsqueeze(-1));
    }
    if (ch.length > p) pieces.push_back(at::zeros({R, ch.length - p, H, P}, a.options()));
  }
  // Every rank must run the all-gather's backward (a collective), also one whose chunks receive
  // nothing (the stream's first chunk, or the negative control): tie the gathered summaries in.
  return at::cat(pieces, 1) + all.sum() * 0;
}

}  // namespace

at::Tensor state_passing_forward(const at::Tensor& proj, const SsmParams& params, const SsmConfig& c,
                                 const SsmStepContext& ctx) {
  const StatePassingPlan& sp = step_state_passing_plan(ctx, c.conv, "mamba");
  const int64_t R = proj.size(0), L = proj.size(1);
  const at::ScalarType st = proj.scalar_type(), ct = recurrence_dtype(st);
  const int64_t d = c.d_inner(), cc = c.conv_channels();
  const at::Tensor taps = state_passing_taps(proj.narrow(2, d, cc), ctx, "ssm_halo");
  const SsmScanInputs in = conv_to_scan_inputs(taps, proj.narrow(2, d + cc, c.heads), sp.local.valid, params.conv_w,
                                            params.conv_b, params.dt_bias, params.A_log, params.D, c.head_dim,
                                            c.groups, c.state, ct);
  at::Tensor y = ssm_scan(in.x, in.dt, in.A, in.B, in.C, in.D, sp.local.group, ctx.chunk);  // each chunk from zero
  if (sp.cp > 1) y = y + incoming_state_correction(sp, in, ctx);
  return y.reshape({R, L, d}).to(st);
}

}  // namespace cpbench
