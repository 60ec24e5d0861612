// The attention of a rank that holds a single key block: W = 1 (the whole sequence is local), for
// every transport. Nothing travels and nothing merges, so the block's kernel call is the whole
// attention: its output and gradients come back in the kernel's own dtype (bf16 on CUDA's flash
// routes: BlockNumerics::kernel_dtype_out), with no float32 copies of out and dQ, no K/V stack,
// no dK/dV buffer and no rowsum(dO * O) unless the tiled route reads it. Timed, counted and tapped as
// the multi-block paths are (one step, label "<transport>_<fwd|bwd>:0").
#include <torch/torch.h>

#include "kernels/attention/mla.hpp"
#include "kernels/attention/sink.hpp"
#include "kernels/comm/autograd.hpp"
#include "kernels/transports/accumulator.hpp"
#include "kernels/transports/transfer_phases.hpp"
#include "kernels/transports/transport_common.hpp"

namespace cpbench::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SingleBlockAttention : public torch::autograd::Function<SingleBlockAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& sinks_in, const TransportState& st,
                            const std::string& transport) {
    const at::Tensor sinks = sinks_in.value_or(at::Tensor());
    const auto kd = st.kernel_dtype(q);
    const std::string label = step_label(transport.c_str(), false, 0);
    const StepRange step(st, label);
    Phase p(st, Phase::Kind::compute, label);
    const at::Tensor qc = q.to(kd).contiguous(), kc = k.to(kd).contiguous(), vc = v.to(kd).contiguous();
    const BlockPlan& plan = st.plan(0);
    const KernelRoute route = st.route(0, qc);
    CallPairs pairs;
    st.count_block(plan, route, pairs);
    // MLA's latent wire: single_block_attention up-projected the one block (mla_expand).
    if (st.shape.latent) pairs.up_projected_blocks = 1;
    BlockOutput r = routed_forward(qc, kc, vc, plan, st.scale, route, st.numerics(q.scalar_type(), true));
    if (sinks.defined()) {  // the whole merge is this one block: the sink follows it (sink.hpp)
      const auto out_dtype = r.out.scalar_type();
      at::Tensor out = r.out.to(compute_dtype(q.scalar_type()));
      r.lse = r.lse.to(out.scalar_type());
      merge_sink(st, out, r.lse, sinks, /*after_block=*/true);
      merge_sink(st, out, r.lse, sinks, /*after_block=*/false);
      r.out = out.to(out_dtype);
    }
    tap_forward_lse(r.lse);
    st.count_call(0, pairs);
    ctx->save_for_backward({q, k, v, r.out, r.lse, sinks});
    ctx->saved_data["state"] = comm::make_saved_object(st);
    ctx->saved_data["transport"] = transport;
    return r.out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& st = comm::saved_object<TransportState>(ctx->saved_data["state"]);
    const std::string transport = ctx->saved_data["transport"].toStringRef();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4],
                     &sinks = saved[5];
    const auto cd = compute_dtype(q.scalar_type());
    const auto kd = st.kernel_dtype(q);
    const std::string label = step_label(transport.c_str(), true, 0);
    const StepRange step(st, label);
    Phase p(st, Phase::Kind::compute, label);
    const at::Tensor qc = q.to(kd).contiguous(), kc = k.to(kd).contiguous(), vc = v.to(kd).contiguous();
    const at::Tensor dout = grads[0].to(kd).contiguous();
    const BlockPlan& plan = st.plan(0);
    const KernelRoute route = st.route(0, qc);
    // Only the tiled route reads rowsum(dO * O); the fused kernels compute it themselves.
    // Only the tiled route and the sink read rowsum(dO * O); the fused kernels compute it themselves.
    const at::Tensor dsum = route == KernelRoute::tiled || sinks.defined() ? (dout.to(cd) * out.to(cd)).sum(-1)
                                                                            : at::Tensor();
    const BlockGrads g =
        routed_backward(dout, qc, kc, vc, out, lse, dsum, plan, st.scale, route, st.numerics(q.scalar_type(), true));
    const at::Tensor dsinks = sinks.defined() ? sink_grad(lse, dsum, sinks) : at::Tensor();
    return {g.dq.to(q.scalar_type()), g.dk.to(k.scalar_type()), g.dv.to(v.scalar_type()), dsinks, at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor single_block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& sinks, const TransportState& st, const std::string& transport,
                                  const at::Tensor& kv_up) {
  if (!st.shape.latent) return SingleBlockAttention::apply(q, k, v, optional_sinks(sinks), st, transport);
  const auto [ke, ve] = mla_expand(k.select(1, 0), kv_up, st.shape.q_heads, st.shape.qk_nope_head_dim);
  return SingleBlockAttention::apply(q, ke, ve, optional_sinks(sinks), st, transport);
}

}  // namespace cpbench::kernels
