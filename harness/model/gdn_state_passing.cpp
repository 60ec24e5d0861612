#include "harness/model/gdn_state_passing.hpp"

#include <algorithm>
#include <vector>

#include "harness/model/ssm_state_passing.hpp"
#include "kernels/comm/autograd.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {

namespace {

// An all-gather sends its block to W-1 ranks; its backward's reduce-scatter sends W-1 blocks back.
void count_gdn_all_gather(const GdnStepContext& ctx, const at::Tensor& block, int64_t W) {
  if (ctx.bytes_sent && W > 1) *ctx.bytes_sent += 2 * (W - 1) * static_cast<int64_t>(block.nbytes());
}

}  // namespace

at::Tensor gdn_state_passing_forward(const at::Tensor& proj, const GdnParams& params, const GdnConfig& c,
                                     const GdnStepContext& ctx) {
  CP_CHECK(ctx.state_passing != nullptr, "gdn: state passing without its step plan");
  const StatePassingPlan& sp = *ctx.state_passing;
  const int64_t W = sp.cp, r = sp.rank, R = proj.size(0), L = proj.size(1), K = c.conv;
  CP_CHECK(R == sp.rows && L == sp.length && K == sp.conv, "gdn state passing: proj ", shape_str(proj.sizes()),
           " conv ", K, ", the step's plan covers [", sp.rows, ", ", sp.length, "] conv ", sp.conv, " (rank ", r, ")");
  CP_CHECK(W == 1 || (ctx.comm && ctx.comm->size() == W), "gdn state passing: plan for cp ", W, " (rank ", r, ")");
  const at::ScalarType st = proj.scalar_type();
  const at::ScalarType ct = (st == at::kBFloat16 || st == at::kHalf) ? at::kFloat : st;
  const int64_t Hk = c.key_heads, Hv = c.value_heads, dk = c.key_head_dim, dv = c.value_head_dim;
  const int64_t cc = c.conv_channels();

  // The conv's input rows: own tokens, every chunk's halo, a zero row (the plan's conv_src buffer).
  const at::Tensor flat = proj.narrow(2, 0, cc).reshape({R * L, cc});
  const at::Tensor zero = at::zeros({1, cc}, flat.options());
  std::vector<at::Tensor> rows{flat};
  if (W > 1 && K > 1) {
    nvtx::Range range{ctx.nvtx, "gdn_halo"};
    const at::Tensor tails = at::cat({flat, zero}).index_select(0, sp.tail_src);  // [slots*R*(K-1), cc]
    rows.push_back(all_gather_autograd(*ctx.comm, tails, 0));
    count_gdn_all_gather(ctx, tails, W);
  }
  rows.push_back(zero);
  const at::Tensor taps = at::cat(rows).index_select(0, sp.local.conv_src).view({R, L, K, cc});
  const GdnScanInputs in = gdn_scan_inputs(taps, proj.narrow(2, cc + c.value_dim(), 2 * Hv), sp.local.valid,
                                           params.conv_w, params.dt_bias, params.A_log, Hk, Hv, dk, dv, ct);
  if (W == 1)
    return gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, sp.local.group, ctx.chunk).o.reshape({R, L, Hv * dv}).to(st);

  // Step 2: each own chunk from zero, with dk identity-started columns for its transition and readout.
  const auto opts = in.v.options();
  const at::Tensor start = at::cat({at::zeros({R, Hv, dk, dv}, opts), at::eye(dk, opts).expand({R, Hv, dk, dk})}, -1);
  std::vector<at::Tensor> outputs, readouts, pairs;
  for (size_t j = 0; j < sp.chunks.size(); ++j) {
    const auto& ch = sp.chunks[j];
    const auto part = [&](const at::Tensor& t) { return t.narrow(1, ch.begin, ch.length); };
    const at::Tensor v_aug = at::cat({part(in.v), at::zeros({R, ch.length, Hv, dk}, opts)}, -1);
    const GdnScanResult res = gdn_chunk_scan(part(in.q), part(in.k), v_aug, part(in.g), part(in.beta),
                                             part(sp.local.group), ctx.chunk, start);
    outputs.push_back(res.o.narrow(-1, 0, dv));
    readouts.push_back(res.o.narrow(-1, dv, dk));
    const at::Tensor carry = sp.carry_keep.select(0, static_cast<int64_t>(j)).to(opts.dtype()).view({R, 1, 1, 1});
    pairs.push_back(at::cat({res.final_state.narrow(-1, dv, dk) * carry, res.final_state.narrow(-1, 0, dv)}, -1));
  }
  while (static_cast<int64_t>(pairs.size()) < sp.slots) pairs.push_back(at::zeros({R, Hv, dk, dk + dv}, opts));
  const at::Tensor block = at::stack(pairs);  // [slots, R, Hv, dk, dk + dv]

  // Steps 3-4: every chunk's pair, composed in stream order up to this rank's last chunk.
  at::Tensor all;
  {
    nvtx::Range range{ctx.nvtx, "gdn_states"};
    all = all_gather_autograd(*ctx.comm, block, 0);  // [W * slots, ...], slot q*slots + j
    count_gdn_all_gather(ctx, block, W);
  }
  std::vector<at::Tensor> incoming(sp.chunks.size());
  const int64_t last = sp.own_position.empty() ? -1 : *std::max_element(sp.own_position.begin(), sp.own_position.end());
  at::Tensor state = at::zeros({R, Hv, dk, dv}, opts);
  for (int64_t i = 0; i <= last; ++i) {
    for (size_t j = 0; j < sp.chunks.size(); ++j)
      if (sp.own_position[j] == i) incoming[j] = state;
    const at::Tensor pair = all.select(0, sp.stream_order[static_cast<size_t>(i)]);
    state = at::matmul(pair.narrow(-1, 0, dk), state) + pair.narrow(-1, dk, dv);
  }

  // Step 5: the incoming state's share of each token reached by it.
  std::vector<at::Tensor> pieces;
  for (size_t j = 0; j < sp.chunks.size(); ++j) {
    const auto& ch = sp.chunks[j];
    at::Tensor o = outputs[j];
    if (!sp.drop_incoming_state && ch.prefix > 0) {
      const at::Tensor reach = sp.prefix_keep.narrow(1, ch.begin, ch.length).to(opts.dtype()).view({R, ch.length, 1, 1});
      o = o + at::einsum("rthk,rhkv->rthv", {readouts[j], incoming[j]}) * reach;
    }
    pieces.push_back(o);
  }
  // Every rank must run the all-gather's backward (a collective), also one whose chunks receive nothing
  // (the stream's first chunk, or the negative control): tie the gathered pairs in.
  const at::Tensor o = at::cat(pieces, 1) + all.sum() * 0;
  return o.reshape({R, L, Hv * dv}).to(st);
}

}  // namespace cpbench
