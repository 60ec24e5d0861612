// Transport "allgather": one all-gather of every rank's K/V, then this rank's queries attend all keys.
//
// Forward: the all-gather is posted asynchronously and the local (diagonal) block is computed while it
// is in flight; then the other ranks' blocks follow in the ring's order (rank r-1, r-2, ...), merged
// online with the same block kernel, fast paths and merge as the ring, so the two transports differ
// only in how K/V move. The gathered K/V are kept for the backward (the all-gather transport's memory
// cost: the whole sequence's K/V per call).
// Backward: block gradients from the merged output and global lse; dK/dV for every rank's block fill
// one [W, 2, B, Hkv, S, D] buffer in the accumulation dtype (float32 for 16-bit inputs), which a
// reduce-scatter (SUM) hands back to the owners.
//
// The K/V all-gather moves raw bytes (a uint8 view): exact for every dtype, whatever the backend's
// reduction-type support (Gloo's bfloat16 coverage varies by version).
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <span>
#include <vector>

#include "kernels/attention/mla.hpp"
#include "kernels/attention/sink.hpp"
#include "kernels/comm/autograd.hpp"
#include "kernels/transports/accumulator.hpp"
#include "kernels/transports/kv_passing_costs.hpp"
#include "kernels/transports/transfer_phases.hpp"
#include "kernels/transports/transport_common.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class AllGatherAttention : public torch::autograd::Function<AllGatherAttention> {
 public:
  // kvw: the call's K/V block in its wire form (pack_kv); kv_up_in: MLA's W_up under the latent wire.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& kvw,
                            const std::optional<at::Tensor>& sinks_in, const std::optional<at::Tensor>& kv_up_in,
                            const TransportState& st) {
    const at::Tensor sinks = sinks_in.value_or(at::Tensor());
    const at::Tensor kv_up = kv_up_in.value_or(at::Tensor());
    const int W = st.comm.size(), r = st.comm.rank();
    const auto cd = compute_dtype(q.scalar_type());
    const auto kd = st.kernel_dtype(q);
    const Wire wire(st.comm, q.device());
    at::Tensor qc, local_kv, gathered;
    c10::intrusive_ptr<c10d::Work> work;
    {
      Phase p(st, Phase::Kind::compute, "allgather_fwd:prologue");
      qc = q.to(kd).contiguous();
      local_kv = wire.to_wire(kvw);  // [2, B, Hkv, S, D] (MLA: pack_kv's forms), input dtype
    }
    int64_t bytes = 0;
    InFlight flight(st);
    if (W > 1) {
      std::vector<int64_t> shape = local_kv.sizes().vec();
      shape[0] *= W;
      gathered = at::empty(shape, local_kv.options());
      at::Tensor in_bytes = local_kv.view(at::kByte);
      at::Tensor out_bytes = gathered.view(at::kByte);
      work = st.comm.backend()->_allgather_base(out_bytes, in_bytes);
      bytes += (W - 1) * static_cast<int64_t>(local_kv.nbytes());
    } else {
      gathered = local_kv;
    }
    // [W, 2, B, Hkv, S, D]: rank j's K at [j][0], V at [j][1] (MLA: [W, 1, ...], pack_kv's forms).
    std::vector<int64_t> block_shape = local_kv.sizes().vec();
    block_shape.insert(block_shape.begin(), W);
    const at::Tensor blocks = gathered.view(block_shape);
    at::Tensor out, lse;
    CallPairs pairs;
    // Step s: the block of rank (r - s) mod W; step 0 (the local block) overlaps the all-gather.
    const auto attend_block = [&](int s, const at::Tensor& kv_wire) {
      const int src = (r - s + W) % W;
      const std::string label = step_label("allgather", false, s);
      const StepRange step(st, label);
      Phase p(st, Phase::Kind::compute, label);
      const BlockPlan& plan = st.plan(src);
      const KernelRoute route = st.route(src, qc);
      st.count_block(plan, route, pairs);
      if (route == KernelRoute::skipped) return;
      const auto [kb, vb] = unpack_kv(wire.from_wire(kv_wire), kv_up, st.shape, kd);
      if (st.shape.latent) ++pairs.up_projected_blocks;
      merge_block(out, lse, routed_forward(qc, kb, vb, plan, st.scale, route, st.numerics(q.scalar_type())));
      merge_sink(st, out, lse, sinks, /*after_block=*/true);
    };
    attend_block(0, local_kv);  // overlaps the all-gather
    if (work) {
      Phase p(st, Phase::Kind::comm, "allgather_fwd:all_gather");
      work->wait();
      flight.done(st, "allgather_fwd:all_gather");
    }
    for (int s = 1; s < W; ++s) attend_block(s, blocks[(r - s + W) % W]);
    if (!out.defined()) {
      out = at::zeros({qc.size(0), qc.size(1), qc.size(2), st.shape.v_head_dim}, qc.options().dtype(cd));
      lse = at::full({qc.size(0), qc.size(1), qc.size(2)}, -std::numeric_limits<double>::infinity(),
                     qc.options().dtype(cd));
    }
    merge_sink(st, out, lse, sinks, /*after_block=*/false);
    check_accumulator(out, q.scalar_type(), "allgather forward: the merged output", st);
    check_accumulator(lse, q.scalar_type(), "allgather forward: the merged log-sum-exp", st);
    tap_forward_lse(lse);
    check_wire_bytes(st, bytes, /*forward=*/true, "allgather", q.element_size());
    st.count_call(bytes, pairs);
    ctx->save_for_backward({q, kvw, out, lse, blocks, sinks, kv_up});
    ctx->saved_data["state"] = comm::make_saved_object(st);
    return out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& st = comm::saved_object<TransportState>(ctx->saved_data["state"]);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kvw = saved[1], &out = saved[2], &lse = saved[3], &blocks = saved[4],
                     &sinks = saved[5], &kv_up = saved[6];
    const int W = st.comm.size(), r = st.comm.rank();
    const auto cd = compute_dtype(q.scalar_type());
    const auto kd = st.kernel_dtype(q);
    const Wire wire(st.comm, q.device());

    at::Tensor qc, dout, dsum, dq, dkv_all;
    {
      Phase p(st, Phase::Kind::compute, "allgather_bwd:prologue");
      qc = q.to(kd).contiguous();
      dout = grads[0].to(kd).contiguous();
      dsum = (dout.to(cd) * out).sum(-1);
      dq = at::zeros(qc.sizes(), qc.options().dtype(cd));
      std::vector<int64_t> shape = blocks.sizes().vec();
      dkv_all = at::zeros(shape, qc.options().dtype(cd));  // [W, 2, B, Hkv, S, D] (blocks' form)
      check_accumulator(dq, q.scalar_type(), "allgather backward: dQ", st);
      check_accumulator(dkv_all, q.scalar_type(), "allgather backward: the dK/dV of every block", st);
    }
    at::Tensor dkv_up;  // MLA latent wire: this rank's d W_up over the blocks it attended
    for (int s = 0; s < W; ++s) {
      const int src = (r - s + W) % W;
      const std::string label = step_label("allgather", true, s);
      const StepRange step(st, label);
      Phase p(st, Phase::Kind::compute, label);
      const BlockPlan& plan = st.plan(src);
      const KernelRoute route = st.route(src, qc);
      if (route == KernelRoute::skipped) continue;
      const at::Tensor block = wire.from_wire(blocks[src]);
      const auto [kb, vb] = unpack_kv(block, kv_up, st.shape, kd);
      BlockGrads g = routed_backward(dout, qc, kb, vb, out, lse, dsum, plan, st.scale, route,
                                     st.numerics(q.scalar_type()));
      dq.add_(g.dq);
      dkv_all[src].copy_(pack_kv_grad(g.dk.to(cd), g.dv.to(cd), block, kv_up, st.shape, dkv_up));
    }
    at::Tensor dkv;
    if (W > 1) {
      at::Tensor full = wire.to_wire(dkv_all.flatten(0, 1));  // [W*2, B, Hkv, S, D] (MLA: [W, ...])
      // The reduce-scatter sums W partial dK/dV: in 16 bits every addition would round.
      check_accumulator(full, q.scalar_type(), "allgather backward: the dK/dV reduce-scatter buffer", st);
      {
        Phase p(st, Phase::Kind::comm, "allgather_bwd:reduce_scatter");
        const InFlight rs(st);
        dkv = wire.from_wire(st.comm.reduce_scatter_sum(full));  // [2, B, Hkv, S, D]
        rs.done(st, "allgather_bwd:reduce_scatter", true);
      }
      check_wire_bytes(st, (W - 1) * static_cast<int64_t>(dkv.nbytes()), /*forward=*/false, "allgather",
                       q.element_size());
      if (st.stats) st.stats->bytes_sent += (W - 1) * static_cast<int64_t>(dkv.nbytes());
    } else {
      dkv = dkv_all[0];
    }
    check_accumulator(dq, q.scalar_type(), "allgather backward: dQ", st);
    check_accumulator(dkv, q.scalar_type(), "allgather backward: the reduce-scattered dK/dV", st);
    const at::Tensor dsinks = sinks.defined() ? sink_grad(lse, dsum, sinks) : at::Tensor();
    at::Tensor dw;
    if (kv_up.defined()) dw = dkv_up.defined() ? dkv_up.to(kv_up.scalar_type()) : at::zeros_like(kv_up);
    return {dq.to(q.scalar_type()), dkv.to(kvw.scalar_type()), dsinks, dw, at::Tensor()};
  }
};

class AllGatherTransport final : public Transport {
 public:
  [[nodiscard]] std::string name() const override { return "allgather"; }

  [[nodiscard]] std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                               int64_t cp) const override {
    return common_unsupported_reason(mask, options, cp);
  }

  // Both wires: the latent is gathered and every block up-projected where it is attended.
  [[nodiscard]] std::string unsupported_mla(MlaWire /*wire*/) const override { return ""; }

  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    const AttendShape shape = check_attend(name(), q, k, v, ctx);
    if (shape.world == 1) {
      if (!shape.latent)
        return single_block_attention(q, k, v, ctx.sinks, make_state(ctx, shape, q.device()), name());
      // Nothing travels: the latent is up-projected as the layer would (mla.hpp mla_expand).
      const auto [ke, ve] = mla_expand(k.select(1, 0), ctx.kv_up, shape.q_heads, shape.qk_nope_head_dim);
      return single_block_attention(q, ke, ve, ctx.sinks, make_state(ctx, shape, q.device()), name());
    }
    return AllGatherAttention::apply(q, pack_kv(k, v, shape), optional_sinks(ctx.sinks), optional_tensor(ctx.kv_up),
                                     make_state(ctx, shape, q.device()));
  }

  // Formulas: kv_passing_costs.hpp.
  [[nodiscard]] int64_t bytes_per_call(const CallShape& c) const override {
    return allgather_bytes(c);
  }

  [[nodiscard]] int64_t forward_bytes_per_call(const CallShape& c) const override {
    return kv_passing_forward_bytes(c);
  }

  [[nodiscard]] CallTime time_per_call(const CallCostInputs& in) const override {
    return allgather_time(in);
  }

  [[nodiscard]] int64_t peak_activation_bytes(const ActivationShape& a) const override {
    return allgather_peak_activation_bytes(a);
  }
};

}  // namespace

std::shared_ptr<const Transport> make_allgather_transport() { return std::make_shared<AllGatherTransport>(); }

}  // namespace cpbench::kernels
