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
#include <span>
#include <vector>

#include "kernels/attention/sink.hpp"
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

class AllGatherAttention : public torch::autograd::Function<AllGatherAttention> {
 public:
  // kvw: the call's K/V block in its wire form (pack_kv); kv_up_in: MLA's W_up under the latent wire.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& kvw,
                            const std::optional<at::Tensor>& sinks_in, const std::optional<at::Tensor>& kv_up_in,
                            const TransportState& st) {
    const int W = st.comm.size(), r = st.comm.rank();
    const Wire wire(st.comm, q.device());
    ForwardPass f;
    at::Tensor local_kv, gathered;
    c10::intrusive_ptr<c10d::Work> work;
    {
      Phase p(st, Phase::Kind::compute, "allgather_fwd:prologue");
      f = ForwardPass(st, q, sinks_in, kv_up_in);
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
    // Step s: the block of rank (r - s) mod W; step 0 (the local block) overlaps the all-gather.
    const auto attend_block = [&](int s, const at::Tensor& kv_wire) {
      const std::string label = step_label("allgather", false, s);
      const StepRange step(st, label);
      Phase p(st, Phase::Kind::compute, label);
      f.attend((r - s + W) % W, wire, kv_wire);
    };
    attend_block(0, local_kv);  // overlaps the all-gather
    if (work) {
      Phase p(st, Phase::Kind::comm, "allgather_fwd:all_gather");
      work->wait();
      flight.done(st, "allgather_fwd:all_gather");
    }
    for (int s = 1; s < W; ++s) attend_block(s, blocks[(r - s + W) % W]);
    f.finish("allgather", bytes, ByteFormula::kv_passing);
    ctx->save_for_backward({q, kvw, f.out, f.lse, blocks, f.sinks, f.kv_up});
    ctx->saved_data["state"] = comm::make_saved_object(st);
    return f.out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& st = comm::saved_object<TransportState>(ctx->saved_data["state"]);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kvw = saved[1], &out = saved[2], &lse = saved[3], &blocks = saved[4],
                     &sinks = saved[5], &kv_up = saved[6];
    const int W = st.comm.size(), r = st.comm.rank();
    const Wire wire(st.comm, q.device());
    BackwardPass b;
    at::Tensor dkv_all;
    {
      Phase p(st, Phase::Kind::compute, "allgather_bwd:prologue");
      b = BackwardPass(st, "allgather", q, grads[0], out, lse, sinks, kv_up);
      std::vector<int64_t> shape = blocks.sizes().vec();
      dkv_all = at::zeros(shape, b.dq.options());  // [W, 2, B, Hkv, S, D] (blocks' form), compute dtype
      check_accumulator(dkv_all, q.scalar_type(), "allgather backward: the dK/dV of every block", st);
    }
    for (int s = 0; s < W; ++s) {
      const int src = (r - s + W) % W;
      const std::string label = step_label("allgather", true, s);
      const StepRange step(st, label);
      Phase p(st, Phase::Kind::compute, label);
      const at::Tensor contrib = b.block(src, wire, blocks[src]);
      if (contrib.defined()) dkv_all[src].copy_(contrib);
    }
    at::Tensor dkv;
    int64_t bytes = 0;
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
      bytes = (W - 1) * static_cast<int64_t>(dkv.nbytes());
    } else {
      dkv = dkv_all[0];
    }
    const BackwardResult g = b.finish(dkv, bytes, ByteFormula::kv_passing);
    return {g.dq, dkv.to(kvw.scalar_type()), g.dsinks, g.dw, at::Tensor()};
  }
};

}  // namespace

// Both MLA wires: the latent is gathered and every block up-projected where it is attended.
std::shared_ptr<const Transport> make_allgather_transport() {
  const auto attention = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                            const TransportState& st, const at::Tensor& kv_up) -> at::Tensor {
    if (st.shape.world == 1) return single_block_attention(q, k, v, sinks, st, "allgather", kv_up);
    return AllGatherAttention::apply(q, pack_kv(k, v, st.shape), optional_sinks(sinks), optional_tensor(kv_up), st);
  };
  return make_kv_passing_transport(
      {"allgather", attention, allgather_bytes, allgather_time, allgather_peak_activation_bytes});
}

}  // namespace cpbench::kernels
