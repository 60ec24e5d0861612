#pragma once
// What the kv-passing transports' passes share (internal to kernels/transports/): the maths of one key
// block, forward and backward, and how each pass begins and ends. The attention features live here once:
// the sink (kernels/attention/sink.hpp: its merge and its gradient), MLA's latent wire (each block
// up-projected, W_up's gradient), the empty merge, the accumulator checks (accumulator.hpp), the byte
// formula's check, the call's counts and the lse tap. A transport (allgather.cpp, ring.cpp,
// windowed_ring.cpp; a2a and hybrid through ring_attention) owns how K/V move and when each block is
// attended; a feature is a change here plus what it changes in the wire form (pack_kv / unpack_kv,
// transport_common.hpp). W = 1 (one block, nothing moves): single_block_attention.
//
// Order of the floating-point work is the transports' own (a block merges when the transport attends it;
// these functions only name the steps), so a transport's results are bit for bit what they were written
// out in place.
#include <ATen/ATen.h>

#include <memory>
#include <optional>

#include "kernels/transports/transfer_phases.hpp"
#include "kernels/transports/transport_common.hpp"

namespace cpbench::kernels {

// What a pass's bytes are checked against at its end.
enum class ByteFormula {
  kv_passing,  // check_wire_bytes (kv_passing_costs.hpp) on MLA calls: allgather, ring
  own,         // the transport checks its own (ring_window: the halo formula, once per call, in the backward)
};

// A forward over key blocks: made in the transport's prologue phase, fed every block the rank attends
// (attend), closed by finish. `st` must outlive it (the autograd node's state).
struct ForwardPass {
  ForwardPass() = default;
  // q [B, Hq, S, D] in its input dtype; sinks [Hq] or none; kv_up MLA's W_up under the latent wire or
  // none (both as the autograd node takes them: optional_sinks, optional_tensor). Copies q to the kernel
  // dtype (qc).
  ForwardPass(const TransportState& st, const at::Tensor& q, const std::optional<at::Tensor>& sinks,
              const std::optional<at::Tensor>& kv_up);

  // Block `src`'s plan and route counted (TransportState::count_block); unless the route skips it,
  // `kv_wire` (pack_kv's form, where the wire holds it; brought to the compute device only then) is
  // unpacked (the latent up-projected), attended and merged into (out, lse), then the sink rule after a
  // block (merge_sink).
  void attend(int src, const Wire& wire, const at::Tensor& kv_wire);

  // After the last block: (out, lse) of a merge no block reached set to no visible key (out 0, lse
  // -inf), the sink merged once (merge_sink), both checked to be in the compute dtype, lse tapped
  // (tap_forward_lse), `bytes` (this rank's forward sends) checked per `formula` and the call counted
  // (TransportState::count_call). `transport` names the checks ("allgather", "ring", "ring_window").
  void finish(const char* transport, int64_t bytes, ByteFormula formula);

  const TransportState* st = nullptr;
  at::ScalarType input = at::kFloat;  // q's dtype
  at::Tensor qc;                      // q [B, Hq, S, D] in the kernel dtype, contiguous
  at::Tensor sinks, kv_up;            // undefined when none
  at::Tensor out, lse;                // [B, Hq, S, Dv], [B, Hq, S] in the compute dtype; undefined until a block merges
  CallPairs pairs;
};

// A backward's gradients but dK/dV (in the transport's form, which it hands back itself): dq [B, Hq, S, D]
// in q's dtype; dsinks [Hq] when the call had sinks; dw (d W_up, W_up's dtype) under the latent wire.
struct BackwardResult {
  at::Tensor dq, dsinks, dw;
};

// A backward over key blocks, recomputing each block's gradients from the merged output and global lse:
// made in the transport's prologue phase, fed every block (block), closed by finish. `st` must outlive it.
struct BackwardPass {
  BackwardPass() = default;
  // q, and out / lse as the forward saved them (compute dtype); grad_out: dO [B, Hq, S, Dv]. Makes qc and
  // dout in the kernel dtype, dsum = rowsum(dO * O) and dq = 0 in the compute dtype (checked).
  BackwardPass(const TransportState& st, const char* transport, const at::Tensor& q, const at::Tensor& grad_out,
               const at::Tensor& out, const at::Tensor& lse, const at::Tensor& sinks, const at::Tensor& kv_up);

  // Block `src`'s gradients: its dQ added to dq; returns its dK/dV in kv_wire's form (pack_kv_grad) in the
  // compute dtype, or undefined when the route skips it (a zero contribution). Latent wire: the block's
  // d W_up added to dkv_up.
  [[nodiscard]] at::Tensor block(int src, const Wire& wire, const at::Tensor& kv_wire);

  // After the last block, with `dkv` this rank's finished dK/dV (compute dtype): dq and dkv checked to be
  // in the compute dtype, `bytes` (this rank's backward sends) checked per `formula` and added to the
  // stats, the sink's gradient (sink_grad) and d W_up (zero when no block was up-projected) made.
  [[nodiscard]] BackwardResult finish(const at::Tensor& dkv, int64_t bytes, ByteFormula formula);

  const TransportState* st = nullptr;
  const char* transport = "";
  at::ScalarType input = at::kFloat;
  at::Tensor qc, dout;  // kernel dtype
  at::Tensor dsum, dq;  // compute dtype
  at::Tensor out, lse, sinks, kv_up;
  at::Tensor dkv_up;  // latent wire: this rank's d W_up over the blocks it attended (undefined until one)
};

// ---- The Transport of a kv-passing transport that one attention function runs (allgather, ring) ----
// Every mask, dtype and device common_unsupported_reason allows, both MLA wires; attend() checks the
// shapes (check_attend) and calls `attention` with the call's state; the forward bytes are
// kv_passing_forward_bytes, the rest of the costs the transport's own (kv_passing_costs.hpp).
struct KvPassingSpec {
  const char* name;
  // q, k, v, sinks, the call's state, kv_up as ring_attention (transport_common.hpp) takes them; W = 1 too.
  at::Tensor (*attention)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const TransportState& st, const at::Tensor& kv_up);
  int64_t (*bytes_per_call)(const CallShape& c);
  CallTime (*time_per_call)(const CallCostInputs& in);
  int64_t (*peak_activation_bytes)(const ActivationShape& a);
};
[[nodiscard]] std::shared_ptr<const Transport> make_kv_passing_transport(const KvPassingSpec& spec);

}  // namespace cpbench::kernels
