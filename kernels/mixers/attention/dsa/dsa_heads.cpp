#include "kernels/mixers/attention/dsa/dsa_heads.hpp"

#include <cmath>
#include <memory>

#include "kernels/comm/autograd.hpp"
#include "kernels/mixers/attention/dsa/dsa.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

// An observer that checks one exchange's bytes: its first report (the forward) against x.forward, its
// second (the backward, if any) against x.backward.
comm::AllToAllObserver checked(const std::string& nvtx, int rank, const dsa_costs::Exchange& x) {
  auto calls = std::make_shared<int>(0);
  const auto check = [calls, rank, x](int64_t bytes) {
    const bool forward = (*calls)++ == 0;
    const int64_t want = forward ? x.forward : x.backward;
    CP_CHECK(bytes == want, "model.attention.dsa (head split): rank ", rank, " sent ", bytes, " bytes for the ", x.name,
             " in the ", forward ? "forward" : "backward", ", the formula (dsa_costs.hpp head_split_exchanges) says ",
             want);
  };
  comm::AllToAllObserver o{nvtx, {}};
  o.done = [check](int64_t bytes, double) { check(bytes); };
  o.done_on_device = [check](int64_t bytes, const comm::DeviceTime&, const comm::DeviceTime&) { check(bytes); };
  return o;
}

}  // namespace

at::Tensor dsa_head_split_attend(const DsaLayerTensors& t, const DsaConfig& c, const MlaDims& d, DsaStepContext& ctx) {
  const int W = ctx.world, U = static_cast<int>(ctx.ulysses), u = ctx.rank % U, g = ctx.rank / U;
  const int64_t B = ctx.batch, S = ctx.local_tokens, N = W * S, Q = U * S, H = t.q.size(1), HI = c.index_heads,
                dn = d.qk_nope_head_dim, dv = d.v_head_dim, L = d.latent_dim();
  CP_CHECK(ctx.head_split() && ctx.comm != nullptr && U >= 1 && W % U == 0 && H % U == 0 && t.q.size(2) == S,
           "model.attention.dsa (", ctx.transport, "): ", H, " heads must split over U = ", U, " of W = ", W,
           " ranks, q ", shape_str(t.q.sizes()), " of S = ", S, " tokens (rank ", ctx.rank, ")");
  CP_CHECK(ctx.visible_all.defined() && ctx.visible_all.size(1) == Q && ctx.visible_all.size(2) == N,
           "model.attention.dsa (", ctx.transport, "): the step context has no visibility of the group's queries (rank ",
           ctx.rank, ")");
  ctx.dims.heads = H;
  const std::vector<dsa_costs::Exchange> wire =
      dsa_costs::head_split_exchanges(ctx.dims, c.loss, W, U, B, S, ctx.element_size);
  const auto obs = [&](const std::string& name) {
    for (const auto& x : wire)
      if (x.name == name) return checked(ctx.nvtx, ctx.rank, x);
    CP_CHECK(false, "model.attention.dsa (", ctx.transport, "): no formula for the exchange ", name);
    return comm::AllToAllObserver{};
  };
  const comm::Communicator& comm = *ctx.comm;
  std::vector<int> group(static_cast<size_t>(U));  // the Ulysses group: U consecutive ranks (a2a: every rank)
  for (int i = 0; i < U; ++i) group[static_cast<size_t>(i)] = g * U + i;
  // An all-to-all in the group: x cut into U blocks along `split`, block i to group rank i; the blocks
  // received, from group ranks 0 .. U-1, concatenated along `concat`. Differentiable (the same exchange back).
  const auto exchange = [&](const at::Tensor& x, int64_t split, int64_t concat, const std::string& name) {
    return at::cat(comm::all_to_all_autograd(comm, at::stack(x.chunk(U, split), 0), group, obs(name)).unbind(0), concat);
  };

  // 1. The key side, every rank's in global order (the allgather path's gather, over all W ranks).
  const at::Tensor keys = ctx.gather_keys(at::cat({t.latent, t.k_idx}, -1));
  const at::Tensor lat = keys.narrow(-1, 0, L), kig = keys.narrow(-1, L, c.index_head_dim);
  // 2. Heads <-> tokens: this rank's heads of the group's queries, in rank order. The index heads padded to
  // a multiple of U: a zero head adds an exact 0 to every score (and gets no gradient).
  const int64_t pad = (HI + U - 1) / U * U - HI;
  const at::Tensor q_idx = pad > 0 ? at::constant_pad_nd(t.q_idx, {0, 0, 0, pad}) : t.q_idx;
  const at::Tensor w = pad > 0 ? at::constant_pad_nd(t.w, {0, pad}) : t.w;
  const at::Tensor qh = exchange(t.q, 1, 2, "q");                // [B, H/U, Q, dn+dr]
  const at::Tensor qih = exchange(q_idx, 2, 1, "q_I");           // [B, Q, H_u, d_I]
  const at::Tensor wh = exchange(w, 2, 1, "head weights");       // [B, Q, H_u]
  // 3. This rank's index heads' part of the group's queries' scores; the group's sum over this rank's rows.
  const at::Tensor partial = kernels::dsa::index_scores(qih, wh, kig, c.scoring_relu);  // [B, Q, N]
  const auto row_sum = [&](const at::Tensor& x, const std::string& name) {  // [B, Q, n] -> [B, S, n], summed
    return exchange(x, 1, 0, name).view({U, B, S, x.size(2)}).sum(0);
  };
  const bool dense = c.loss == DsaLoss::dense;
  const at::Tensor scores = row_sum(dense ? partial : partial.detach(), "score sum");  // [B, S, N]
  CP_CHECK(ctx.visible.size(1) == S && ctx.visible.size(2) == N, "model.attention.dsa (", ctx.transport,
           "): visibility ", shape_str(ctx.visible.sizes()), " for scores ", shape_str(scores.sizes()), " (rank ",
           ctx.rank, ")");
  const at::Tensor picks = ctx.fault == kDsaFaultBufferOrder
                               ? kernels::dsa::select_topk_unstable(scores, ctx.visible, c.topk)
                               : kernels::dsa::select_topk(scores, ctx.visible, c.topk);  // [B, S, K]
  ctx.add_picks(picks);
  ctx.shared_picks = picks;  // what GLM-5's shared layers after this one attend (dsa_indexer.cpp)
  // 4. The group's queries' picks (rank order), sparse MLA over them for this rank's heads.
  const int64_t K = picks.size(2);
  const at::Tensor all_picks =
      comm::all_to_all_autograd(comm, picks.unsqueeze(0).expand({U, B, S, K}).contiguous(), group, obs("picks"))
          .permute({1, 0, 2, 3})
          .reshape({B, Q, K});
  const int64_t rows = (H / U) * (dn + dv);  // W_up's rows of this rank's heads
  const at::Tensor w_up = t.w_up.narrow(0, u * rows, rows);
  const double scale = 1.0 / std::sqrt(static_cast<double>(t.q.size(3)));
  const kernels::dsa::SparseMla sp = kernels::dsa::sparse_mla(qh, lat, w_up, all_picks, dn, scale);

  // 5. The indexer's KL on this rank's rows, its target summed over every head of the group.
  at::Tensor kl;
  if (dense) {
    const at::Tensor target =
        kernels::dsa::head_probability_sum(kernels::dsa::dense_logits(qh, lat, w_up, dn, scale), ctx.visible_all);
    kl = kernels::dsa::indexer_kl_of_sum(row_sum(target, "KL target"), H, scores, ctx.visible);
  } else {
    const at::Tensor target = kernels::dsa::head_probability_sum(sp.logits, all_picks.ge(0));
    const at::Tensor picked = row_sum(partial.gather(-1, all_picks.clamp_min(0)), "picked score");
    kl = kernels::dsa::indexer_kl_of_sum(row_sum(target, "KL target"), H, picked, picks.ge(0));
  }
  const at::Tensor valid = ctx.row_valid.to(kl.scalar_type());
  ctx.add_loss((kl * valid).sum() * (c.loss_coeff / ctx.loss_rows));

  const at::Tensor out = exchange(sp.out, 2, 1, "output");  // [B, H, S, dv]
  if (ctx.bytes_sent)
    for (const auto& x : wire) *ctx.bytes_sent += x.forward + x.backward;
  return out;
}

}  // namespace cpbench
