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
#include <utility>

#include "kernels/comm/autograd.hpp"
#include "kernels/transports/accumulator.hpp"
#include "kernels/transports/attend_pass.hpp"
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

// One ring step's K/V hop: unless the step is the last, the block held (`cur`) goes to ring position r+1
// while the next one arrives from r-1 into `next`, overlapping the step's maths (posted at construction,
// its bytes added to `bytes`); land() waits for it (a comm phase named `label`) and swaps the two buffers,
// so `cur` then holds the next step's block. The buffers must outlive the hop.
class KvHop {
 public:
  KvHop(const TransportState& st, int step, at::Tensor& cur, at::Tensor& next, int tag, int64_t& bytes)
      : st_(st), flight_(st), cur_(cur), next_(next), last_(step + 1 >= st.ring_size()) {
    if (last_) return;
    const int r = st.ring_rank();
    ex_ = st.comm.post_exchange(cur, st.ring_peer(r + 1), next, st.ring_peer(r - 1), tag);
    bytes += static_cast<int64_t>(cur.nbytes());
  }
  KvHop(const KvHop&) = delete;
  KvHop& operator=(const KvHop&) = delete;

  void land(const std::string& label) {
    if (last_) return;
    Phase p(st_, Phase::Kind::comm, label);
    ex_.wait();
    flight_.done(st_, label);
    std::swap(cur_, next_);
  }

 private:
  const TransportState& st_;
  InFlight flight_;
  at::Tensor& cur_;
  at::Tensor& next_;
  bool last_;
  comm::Communicator::Exchange ex_;
};

class RingAttention : public torch::autograd::Function<RingAttention> {
 public:
  // kvw: the call's K/V block in its wire form (pack_kv); kv_up_in: MLA's W_up under the latent wire.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& kvw,
                            const std::optional<at::Tensor>& sinks_in, const std::optional<at::Tensor>& kv_up_in,
                            const TransportState& st) {
    const int W = st.ring_size(), r = st.ring_rank();
    const Wire wire(st.comm, q.device());
    ForwardPass f;
    at::Tensor cur, next;
    {
      Phase p(st, Phase::Kind::compute, "ring_fwd:prologue");
      f = ForwardPass(st, q, sinks_in, kv_up_in);
      // [2, B, Hkv, S, D] (MLA: pack_kv's forms) in the input dtype; a buffer of its own, never kvw itself
      // (the two buffers receive in turn, and kvw is the node's input, saved for the backward).
      cur = own_buffer(wire.to_wire(kvw), kvw);
      if (W > 1) next = at::empty_like(cur);
    }
    int64_t bytes = 0;
    for (int s = 0; s < W; ++s) {
      const std::string label = step_label("ring", false, s);
      const StepRange step(st, label);
      KvHop hop(st, s, cur, next, kTagRingForwardKV, bytes);
      {
        Phase p(st, Phase::Kind::compute, label);
        f.attend((r - s + W) % W, wire, cur);
      }
      hop.land(label);
    }
    f.finish("ring", bytes, ByteFormula::kv_passing);
    ctx->save_for_backward({q, kvw, f.out, f.lse, f.sinks, f.kv_up});
    ctx->saved_data["state"] = comm::make_saved_object(st);
    return f.out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& st = comm::saved_object<TransportState>(ctx->saved_data["state"]);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kvw = saved[1], &out = saved[2], &lse = saved[3], &sinks = saved[4],
                     &kv_up = saved[5];
    const int W = st.ring_size(), r = st.ring_rank();
    const auto cd = compute_dtype(q.scalar_type());
    const Wire wire(st.comm, q.device());

    BackwardPass b;
    at::Tensor cur, next, dkv_home, dkv_send, dkv_recv;
    {
      Phase p(st, Phase::Kind::compute, "ring_bwd:prologue");
      b = BackwardPass(st, "ring", q, grads[0], out, lse, sinks, kv_up);
      cur = own_buffer(wire.to_wire(kvw), kvw);
      if (W > 1) {
        next = at::empty_like(cur);
        dkv_send = at::empty(cur.sizes(), wire.options(cd));
        dkv_recv = at::empty(cur.sizes(), wire.options(cd));
        check_accumulator(dkv_send, q.scalar_type(), "ring backward: the dK/dV partial sum sent on", st);
        check_accumulator(dkv_recv, q.scalar_type(), "ring backward: the dK/dV partial sum received", st);
      }
    }
    int64_t bytes = 0;
    comm::Communicator::Exchange dkv_ex;
    InFlight dkv_flight(st);
    std::string dkv_label;  // the step that posted the dK/dV exchange in flight
    for (int s = 0; s < W; ++s) {
      const int src = (r - s + W) % W;
      const std::string label = step_label("ring", true, s);
      const StepRange step(st, label);
      KvHop hop(st, s, cur, next, kTagRingBackwardKV, bytes);
      at::Tensor contrib;  // this rank's dK/dV for block src in cur's form (pack_kv_grad), in cd; undefined = 0
      {
        Phase p(st, Phase::Kind::compute, label);
        contrib = b.block(src, wire, cur);
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
      hop.land(label);
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
      dkv = dkv_home.defined() ? dkv_home : at::zeros(cur.sizes(), b.dq.options());
    }
    const BackwardResult g = b.finish(dkv, bytes, ByteFormula::kv_passing);
    return {g.dq, dkv.to(kvw.scalar_type()), g.dsinks, g.dw, at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const TransportState& st, const at::Tensor& kv_up) {
  if (st.ring_size() == 1) return single_block_attention(q, k, v, sinks, st, "ring", kv_up);
  return RingAttention::apply(q, pack_kv(k, v, st.shape), optional_sinks(sinks), optional_tensor(kv_up), st);
}

// Both MLA wires: the latent travels the ring and every holder up-projects it (pack_kv / unpack_kv).
std::shared_ptr<const Transport> make_ring_transport() {
  return make_kv_passing_transport({"ring", ring_attention, ring_bytes, ring_time, ring_peak_activation_bytes});
}

}  // namespace cpbench::kernels
