// Transport "ring": key/value blocks travel around the ring, one hop per step, while each rank
// attends its queries to the block it holds; per-block (out, lse) partials merge online.
//
// Forward, W steps: at step s rank r holds the K/V block of rank (r - s) mod W. Before computing on
// it, the rank posts the send of that block to r+1 and the receive of the next one from r-1 (two
// buffers alternate), so the transfer overlaps the block's maths; the wait comes after.
//
// Backward recomputes each block's gradients from the merged output and the global lse (nothing
// per block is kept from the forward). K/V travel the ring again, prefetched the same way. dQ
// accumulates locally. dK/dV of a block travel with it: the rank holding block j at step s >= 1
// adds its contribution to the partial sum received from the previous holder and sends it on to r+1,
// which holds block j at step s+1; after the last step the sum arrives at rank j, which adds its
// own (step 0) contribution. So per call each rank sends W-1 K/V blocks in the forward, W-1 again in
// the backward, and W-1 dK/dV blocks, which travel in the accumulation dtype (float32 for 16-bit
// inputs: a partial sum rounded to bf16 at every hop would lose precision growing with W).
//
// Blocks whose mask is empty are skipped (still forwarded: the ring must not stall), and blocks
// whose mask is all-visible run without a mask tensor.
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <utility>

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

// `t`, or a copy when it shares kvw's memory (Wire::to_wire returns a contiguous CPU tensor as is).
at::Tensor own_buffer(const at::Tensor& t, const at::Tensor& kvw) {
  return t.data_ptr() == kvw.data_ptr() ? t.clone() : t;
}

class RingAttention : public torch::autograd::Function<RingAttention> {
 public:
  // kvw: the call's K/V block in its wire form (pack_kv); kv_up_in: MLA's W_up under the latent wire.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& kvw,
                            const std::optional<at::Tensor>& sinks_in, const std::optional<at::Tensor>& kv_up_in,
                            const TransportState& st) {
    const at::Tensor sinks = sinks_in.value_or(at::Tensor());
    const at::Tensor kv_up = kv_up_in.value_or(at::Tensor());
    const int W = st.ring_size(), r = st.ring_rank();
    const auto cd = compute_dtype(q.scalar_type());
    const auto kd = st.kernel_dtype(q);
    const Wire wire(st.comm, q.device());
    at::Tensor qc;
    at::Tensor cur, next;
    {
      Phase p(st, Phase::Kind::compute, "ring_fwd:prologue");
      qc = q.to(kd).contiguous();
      // [2, B, Hkv, S, D] (MLA: pack_kv's forms) in the input dtype; a buffer of its own, never kvw itself
      // (the two buffers receive in turn, and kvw is the node's input, saved for the backward).
      cur = own_buffer(wire.to_wire(kvw), kvw);
      if (W > 1) next = at::empty_like(cur);
    }
    at::Tensor out, lse;
    CallPairs pairs;
    int64_t bytes = 0;
    for (int s = 0; s < W; ++s) {
      const int src = (r - s + W) % W;
      const std::string label = step_label("ring", false, s);
      const StepRange step(st, label);
      comm::Communicator::Exchange ex;
      InFlight flight(st);
      if (s + 1 < W) {
        ex = st.comm.post_exchange(cur, st.ring_peer(r + 1), next, st.ring_peer(r - 1), kTagRingForwardKV);
        bytes += static_cast<int64_t>(cur.nbytes());
      }
      {
        Phase p(st, Phase::Kind::compute, label);
        const BlockPlan& plan = st.plan(src);
        const KernelRoute route = st.route(src, qc);
        st.count_block(plan, route, pairs);
        if (route != KernelRoute::skipped) {
          const auto [kb, vb] = unpack_kv(wire.from_wire(cur), kv_up, st.shape, kd);
          if (st.shape.latent) ++pairs.up_projected_blocks;
          merge_block(out, lse, routed_forward(qc, kb, vb, plan, st.scale, route, st.numerics(q.scalar_type())));
          merge_sink(st, out, lse, sinks, /*after_block=*/true);
        }
      }
      if (s + 1 < W) {
        Phase p(st, Phase::Kind::comm, label);
        ex.wait();
        flight.done(st, label);
        std::swap(cur, next);
      }
    }
    if (!out.defined()) {  // no visible key for any query of this rank
      out = at::zeros({qc.size(0), qc.size(1), qc.size(2), st.shape.v_head_dim}, qc.options().dtype(cd));
      lse = at::full({qc.size(0), qc.size(1), qc.size(2)}, -std::numeric_limits<double>::infinity(),
                     qc.options().dtype(cd));
    }
    merge_sink(st, out, lse, sinks, /*after_block=*/false);
    check_accumulator(out, q.scalar_type(), "ring forward: the merged output", st);
    check_accumulator(lse, q.scalar_type(), "ring forward: the merged log-sum-exp", st);
    tap_forward_lse(lse);
    check_wire_bytes(st, bytes, /*forward=*/true, "ring", q.element_size());
    st.count_call(bytes, pairs);
    ctx->save_for_backward({q, kvw, out, lse, sinks, kv_up});
    ctx->saved_data["state"] = comm::make_saved_object(st);
    return out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& st = comm::saved_object<TransportState>(ctx->saved_data["state"]);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kvw = saved[1], &out = saved[2], &lse = saved[3], &sinks = saved[4],
                     &kv_up = saved[5];
    const int W = st.ring_size(), r = st.ring_rank();
    const auto cd = compute_dtype(q.scalar_type());
    const auto kd = st.kernel_dtype(q);
    const Wire wire(st.comm, q.device());

    at::Tensor qc, dout, dsum, dq, cur, next, dkv_home, dkv_send, dkv_recv;
    {
      Phase p(st, Phase::Kind::compute, "ring_bwd:prologue");
      qc = q.to(kd).contiguous();
      dout = grads[0].to(kd).contiguous();
      dsum = (dout.to(cd) * out).sum(-1);
      dq = at::zeros(qc.sizes(), qc.options().dtype(cd));
      cur = own_buffer(wire.to_wire(kvw), kvw);
      if (W > 1) {
        next = at::empty_like(cur);
        dkv_send = at::empty(cur.sizes(), wire.options(cd));
        dkv_recv = at::empty(cur.sizes(), wire.options(cd));
        check_accumulator(dkv_send, q.scalar_type(), "ring backward: the dK/dV partial sum sent on", st);
        check_accumulator(dkv_recv, q.scalar_type(), "ring backward: the dK/dV partial sum received", st);
      }
      check_accumulator(dq, q.scalar_type(), "ring backward: dQ", st);
    }
    int64_t bytes = 0;
    comm::Communicator::Exchange dkv_ex;
    InFlight dkv_flight(st);
    std::string dkv_label;  // the step that posted the dK/dV exchange in flight
    at::Tensor dkv_up;      // MLA latent wire: this rank's d W_up over the blocks it attended
    for (int s = 0; s < W; ++s) {
      const int src = (r - s + W) % W;
      const std::string label = step_label("ring", true, s);
      const StepRange step(st, label);
      comm::Communicator::Exchange kv_ex;
      InFlight kv_flight(st);
      if (s + 1 < W) {
        kv_ex = st.comm.post_exchange(cur, st.ring_peer(r + 1), next, st.ring_peer(r - 1), kTagRingBackwardKV);
        bytes += static_cast<int64_t>(cur.nbytes());
      }
      at::Tensor contrib;  // this rank's dK/dV for block src in cur's form (pack_kv_grad), in cd; undefined = 0
      {
        Phase p(st, Phase::Kind::compute, label);
        const BlockPlan& plan = st.plan(src);
        const KernelRoute route = st.route(src, qc);
        if (route != KernelRoute::skipped) {
          const at::Tensor block = wire.from_wire(cur);
          const auto [kb, vb] = unpack_kv(block, kv_up, st.shape, kd);
          BlockGrads g = routed_backward(dout, qc, kb, vb, out, lse, dsum, plan, st.scale, route,
                                         st.numerics(q.scalar_type()));
          dq.add_(g.dq);
          contrib = pack_kv_grad(g.dk.to(cd), g.dv.to(cd), block, kv_up, st.shape, dkv_up);
        }
      }
      if (s == 0) {
        dkv_home = contrib;
      } else {
        if (s >= 2) {  // the partial sum for block src, sent by r-1 at its step s-1
          Phase p(st, Phase::Kind::comm, label);
          dkv_ex.wait();
          dkv_flight.done(st, dkv_label, true);
        }
        {
          Phase p(st, Phase::Kind::compute, label);
          if (s >= 2) {
            at::Tensor acc = wire.from_wire(dkv_recv);
            if (contrib.defined()) acc = acc + contrib;
            dkv_send.copy_(acc);
          } else if (contrib.defined()) {
            dkv_send.copy_(contrib);
          } else {
            dkv_send.zero_();
          }
        }
        // r+1 holds block src at step s+1 (or, after the last step, src is r+1's own block). The
        // receive is the partial sum of the block this rank holds next (or, at the last step, the
        // finished sum of its own block).
        dkv_flight = InFlight(st);
        dkv_label = label;
        dkv_ex = st.comm.post_exchange(dkv_send, st.ring_peer(r + 1), dkv_recv, st.ring_peer(r - 1), kTagRingBackwardDKV);
        bytes += static_cast<int64_t>(dkv_send.nbytes());
      }
      if (s + 1 < W) {
        Phase p(st, Phase::Kind::comm, label);
        kv_ex.wait();
        kv_flight.done(st, label);
        std::swap(cur, next);
      }
    }
    at::Tensor dkv;
    if (W > 1) {
      {
        Phase p(st, Phase::Kind::comm, "ring_bwd:epilogue");
        dkv_ex.wait();
        dkv_flight.done(st, dkv_label, true);
      }
      Phase p(st, Phase::Kind::compute, "ring_bwd:epilogue");
      dkv = wire.from_wire(dkv_recv);
      if (dkv_home.defined()) dkv = dkv + dkv_home;
    } else {
      dkv = dkv_home.defined() ? dkv_home : at::zeros(cur.sizes(), qc.options().dtype(cd));
    }
    check_accumulator(dq, q.scalar_type(), "ring backward: dQ", st);
    check_accumulator(dkv, q.scalar_type(), "ring backward: dK/dV", st);
    check_wire_bytes(st, bytes, /*forward=*/false, "ring", q.element_size());
    if (st.stats) st.stats->bytes_sent += bytes;
    const at::Tensor dsinks = sinks.defined() ? sink_grad(lse, dsum, sinks) : at::Tensor();
    at::Tensor dw;
    if (kv_up.defined()) dw = dkv_up.defined() ? dkv_up.to(kv_up.scalar_type()) : at::zeros_like(kv_up);
    return {dq.to(q.scalar_type()), dkv.to(kvw.scalar_type()), dsinks, dw, at::Tensor()};
  }
};

class RingTransport final : public Transport {
 public:
  [[nodiscard]] std::string name() const override { return "ring"; }

  [[nodiscard]] std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                               int64_t cp) const override {
    return common_unsupported_reason(mask, options, cp);
  }

  // Both wires: the latent travels the ring and every holder up-projects it (pack_kv / unpack_kv).
  [[nodiscard]] std::string unsupported_mla(MlaWire /*wire*/) const override { return ""; }

  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    const AttendShape shape = check_attend(name(), q, k, v, ctx);
    return ring_attention(q, k, v, ctx.sinks, make_state(ctx, shape, q.device()), ctx.kv_up);
  }

  // Formulas: kv_passing_costs.hpp.
  [[nodiscard]] int64_t bytes_per_call(const CallShape& c) const override {
    return ring_bytes(c);
  }

  [[nodiscard]] int64_t forward_bytes_per_call(const CallShape& c) const override {
    return kv_passing_forward_bytes(c);
  }

  [[nodiscard]] CallTime time_per_call(const CallCostInputs& in) const override {
    return ring_time(in);
  }

  [[nodiscard]] int64_t peak_activation_bytes(const ActivationShape& a) const override {
    return ring_peak_activation_bytes(a);
  }
};

}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const TransportState& st, const at::Tensor& kv_up) {
  if (st.ring_size() == 1) {
    if (!st.shape.latent) return single_block_attention(q, k, v, sinks, st, "ring");
    const auto [ke, ve] = mla_expand(k.select(1, 0), kv_up, st.shape.q_heads, st.shape.qk_nope_head_dim);
    return single_block_attention(q, ke, ve, sinks, st, "ring");
  }
  return RingAttention::apply(q, pack_kv(k, v, st.shape), optional_sinks(sinks), optional_tensor(kv_up), st);
}

std::shared_ptr<const Transport> make_ring_transport() { return std::make_shared<RingTransport>(); }

}  // namespace cpbench::kernels
