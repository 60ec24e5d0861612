#include "kernels/mixers/attention/dsa/dsa_ring.hpp"

#include <torch/torch.h>

#include <optional>
#include <utility>

#include "kernels/comm/autograd.hpp"
#include "kernels/mixers/attention/dsa/dsa.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench::kernels::dsa {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Gloo tags, one per pass, apart from the attention ring's (transport_common.hpp, 0x52f0..).
constexpr int kTagScore = 0x5d50;
constexpr int kTagCollect = 0x5d51;
constexpr int kTagReturn = 0x5d52;

// Gloo moves host memory only: device tensors travel through the host.
struct Staging {
  bool host = false;
  at::Device device{at::kCPU};
  Staging(const comm::Communicator& comm, const at::Tensor& like)
      : host(comm.is_gloo() && !like.is_cpu()), device(like.device()) {}
  // A buffer of its own on the wire's device (never `t`'s memory: the buffers receive in turn).
  [[nodiscard]] at::Tensor own(const at::Tensor& t) const { return (host ? t.to(at::kCPU) : t).contiguous().clone(); }
  [[nodiscard]] at::Tensor back(const at::Tensor& t) const { return host ? t.to(device) : t; }
};

int ring_rank(const DsaRing& g) { return g.comm.rank(); }
int ring_size(const DsaRing& g) { return g.comm.size(); }

void check_sent(const DsaRing& g, int64_t sent, int64_t want, const char* pass) {
  CP_CHECK(sent == want, "model.attention.dsa (ring): rank ", ring_rank(g), " sent ", sent, " bytes in the ", pass,
           " pass, the formula (dsa_costs.hpp) says ", want);
}

// Block src's columns: their global key indices [S].
at::Tensor block_keys(const DsaRing& g, int src) { return g.key_global.narrow(0, src * g.local_tokens, g.local_tokens); }

class RingCollect : public torch::autograd::Function<RingCollect> {
 public:
  // block / row int64 [B, M]: the rank holding each wanted row and its row there (-1: none).
  // known [B, M, n_k] or undefined: the rows' last n_k values, collected already (they do not travel).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& keys_local, const at::Tensor& block,
                            const at::Tensor& row, const std::optional<at::Tensor>& known_in, const DsaRing& g) {
    const at::Tensor known = known_in.value_or(at::Tensor());
    nvtx::Range range{g.nvtx, "dsa_ring:collect"};
    const int W = ring_size(g), r = ring_rank(g);
    const int64_t B = block.size(0), M = block.size(1), n = keys_local.size(2) - (known.defined() ? known.size(2) : 0);
    const Staging wire(g.comm, keys_local);
    at::Tensor cur = wire.own(keys_local.narrow(-1, 0, n)), next = W > 1 ? at::empty_like(cur) : at::Tensor();
    const at::Tensor where = row.clamp_min(0).unsqueeze(-1).expand({B, M, n});
    at::Tensor out = at::zeros({B, M, n}, keys_local.options());
    int64_t sent = 0;
    for (int s = 0; s < W; ++s) {
      const int src = (r - s + W) % W;
      comm::Communicator::Exchange ex;
      if (s + 1 < W) {
        ex = g.comm.post_exchange(cur, (r + 1) % W, next, (r - 1 + W) % W, kTagCollect);
        sent += static_cast<int64_t>(cur.nbytes());
      }
      const at::Tensor held = block.eq(src).unsqueeze(-1);
      out = at::where(held, wire.back(cur).gather(1, where), out);
      if (s + 1 < W) {
        ex.wait();
        std::swap(cur, next);
      }
    }
    check_sent(g, sent, g.collect_bytes, "forward (key side)");
    ctx->save_for_backward({block, row});
    ctx->saved_data["ring"] = comm::make_saved_object(g);
    ctx->saved_data["tokens"] = keys_local.size(1);
    return known.defined() ? at::cat({out, known.to(out.scalar_type())}, -1) : out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = comm::saved_object<DsaRing>(ctx->saved_data["ring"]);
    nvtx::Range range{g.nvtx, "dsa_ring:return"};
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &block = saved[0], &row = saved[1];
    const int W = ring_size(g), r = ring_rank(g);
    const int64_t S = ctx->saved_data["tokens"].toInt();
    const at::Tensor& grad = grads[0];
    const int64_t B = grad.size(0), M = grad.size(1), n = grad.size(2);
    const auto gd = grad.element_size() < 4 ? at::kFloat : grad.scalar_type();  // the accumulation dtype
    const at::Tensor where = row.clamp_min(0).unsqueeze(-1).expand({B, M, n});
    const at::Tensor gc = grad.to(gd);
    const auto contribution = [&](int src) {  // this rank's gradient of block src's rows, [B, S, n]
      const at::Tensor part = gc.masked_fill(block.ne(src).unsqueeze(-1), 0.0);
      return at::zeros({B, S, n}, gc.options()).scatter_add_(1, where, part);
    };
    const Staging wire(g.comm, grad);
    at::Tensor home = contribution(r), send, recv;
    int64_t sent = 0;
    comm::Communicator::Exchange ex;
    // Step s: this rank held block r - s in the forward; the partial sum of that block (its holders at
    // steps < s) arrives from r - 1, gains this rank's part, and goes on to r + 1, which held it at s + 1.
    // After step W - 1 the sum that arrives is this rank's own block's, from every other rank.
    for (int s = 1; s < W; ++s) {
      at::Tensor part = contribution((r - s + W) % W);
      if (s >= 2) {
        ex.wait();
        part = part + wire.back(recv);
      }
      send = wire.own(part);
      if (!recv.defined()) recv = at::empty_like(send);
      ex = g.comm.post_exchange(send, (r + 1) % W, recv, (r - 1 + W) % W, kTagReturn);
      sent += static_cast<int64_t>(send.nbytes());
    }
    if (W > 1) {
      ex.wait();
      home = home + wire.back(recv);
    }
    check_sent(g, sent, g.return_bytes, "backward (key side's gradient)");
    return {home.to(grad.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

RingPicks ring_topk(const DsaRing& g, const at::Tensor& k_local, const at::Tensor& q_idx, const at::Tensor& w,
                    const at::Tensor& visible, bool relu, int64_t k, bool stable) {
  at::NoGradGuard no_grad;
  nvtx::Range range{g.nvtx, "dsa_ring:score"};
  const int W = ring_size(g), r = ring_rank(g);
  const int64_t S = g.local_tokens;
  CP_CHECK(k_local.dim() == 3 && k_local.size(1) == S && visible.dim() == 3 && visible.size(2) == W * S &&
               g.key_global.numel() == W * S,
           "model.attention.dsa (ring): index keys ", shape_str(k_local.sizes()), " must be [B, ", S,
           ", d_I] and the visibility ", shape_str(visible.sizes()), " [B, Sq, ", W * S, "] (rank ", r, ")");
  const Staging wire(g.comm, k_local);
  at::Tensor cur = wire.own(k_local), next = W > 1 ? at::empty_like(cur) : at::Tensor();
  RunningTopk top;
  int64_t sent = 0;
  for (int s = 0; s < W; ++s) {
    const int src = (r - s + W) % W;
    comm::Communicator::Exchange ex;
    if (s + 1 < W) {
      ex = g.comm.post_exchange(cur, (r + 1) % W, next, (r - 1 + W) % W, kTagScore);
      sent += static_cast<int64_t>(cur.nbytes());
    }
    const at::Tensor keys = block_keys(g, src), held = wire.back(cur);
    merge_topk(top, index_scores(q_idx, w, held, relu), visible.index_select(2, keys), keys, k, stable, held);
    if (s + 1 < W) {
      ex.wait();
      std::swap(cur, next);
    }
  }
  check_sent(g, sent, g.score_bytes, "forward (index keys)");
  const at::Tensor picks = running_picks(top);
  return {picks, top.rows.masked_fill(picks.lt(0).unsqueeze(-1), 0.0)};
}

at::Tensor ring_collect(const DsaRing& g, const at::Tensor& keys_local, const at::Tensor& columns,
                        const at::Tensor& known) {
  const int64_t S = g.local_tokens;
  CP_CHECK(keys_local.dim() == 3 && keys_local.size(1) == S && columns.dim() == 2 &&
               columns.size(0) == keys_local.size(0) && columns.scalar_type() == at::kLong,
           "model.attention.dsa (ring): key side ", shape_str(keys_local.sizes()), " must be [B, ", S,
           ", n] and the wanted columns ", shape_str(columns.sizes()), " int64 [B, M] (rank ", ring_rank(g), ")");
  CP_CHECK(!known.defined() || (known.dim() == 3 && known.size(0) == columns.size(0) &&
                                known.size(1) == columns.size(1) && known.size(2) < keys_local.size(2)),
           "model.attention.dsa (ring): the rows known already ", shape_str(known.sizes()), " must be [",
           columns.size(0), ", ", columns.size(1), ", n_k < ", keys_local.size(2), "] (rank ", ring_rank(g), ")");
  // Where each wanted key lives: rank-order column c = block c / S, row c % S.
  const at::Tensor none = columns.lt(0);
  const at::Tensor c = g.key_column.index_select(0, columns.clamp_min(0).flatten()).view_as(columns);
  const at::Tensor block = c.div(S, "floor").masked_fill(none, -1), row = c.remainder(S).masked_fill(none, -1);
  return RingCollect::apply(keys_local, block, row,
                            known.defined() ? std::optional<at::Tensor>(known.detach()) : std::nullopt, g);
}

}  // namespace cpbench::kernels::dsa
