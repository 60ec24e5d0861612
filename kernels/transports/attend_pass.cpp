#include "kernels/transports/attend_pass.hpp"

#include <limits>
#include <string>

#include "kernels/attention/sink.hpp"
#include "kernels/transports/accumulator.hpp"
#include "kernels/transports/kv_passing_costs.hpp"

namespace cpbench::kernels {

namespace {

void check_state(const at::Tensor& state, at::ScalarType input, const char* transport, const char* what,
                 const TransportState& st) {
  check_accumulator(state, input, (std::string(transport) + " " + what).c_str(), st);
}

class KvPassingTransport final : public Transport {
 public:
  explicit KvPassingTransport(const KvPassingSpec& spec) : spec_(spec) {}

  [[nodiscard]] std::string name() const override { return spec_.name; }

  [[nodiscard]] std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                               int64_t cp) const override {
    return common_unsupported_reason(mask, options, cp);
  }

  [[nodiscard]] std::string unsupported_mla(MlaWire /*wire*/) const override { return ""; }

  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    const AttendShape shape = check_attend(name(), q, k, v, ctx);
    return spec_.attention(q, k, v, ctx.sinks, make_state(ctx, shape, q.device()), ctx.kv_up);
  }

  [[nodiscard]] int64_t bytes_per_call(const CallShape& c) const override { return spec_.bytes_per_call(c); }
  [[nodiscard]] int64_t forward_bytes_per_call(const CallShape& c) const override {
    return kv_passing_forward_bytes(c);
  }
  [[nodiscard]] CallTime time_per_call(const CallCostInputs& in) const override { return spec_.time_per_call(in); }
  [[nodiscard]] int64_t peak_activation_bytes(const ActivationShape& a) const override {
    return spec_.peak_activation_bytes(a);
  }

 private:
  KvPassingSpec spec_;
};

}  // namespace

std::shared_ptr<const Transport> make_kv_passing_transport(const KvPassingSpec& spec) {
  return std::make_shared<KvPassingTransport>(spec);
}

ForwardPass::ForwardPass(const TransportState& st_in, const at::Tensor& q, const std::optional<at::Tensor>& sinks_in,
                         const std::optional<at::Tensor>& kv_up_in)
    : st(&st_in),
      input(q.scalar_type()),
      qc(q.to(st_in.kernel_dtype(q)).contiguous()),
      sinks(sinks_in.value_or(at::Tensor())),
      kv_up(kv_up_in.value_or(at::Tensor())) {}

void ForwardPass::attend(int src, const Wire& wire, const at::Tensor& kv_wire) {
  const BlockPlan& plan = st->plan(src);
  const KernelRoute route = st->route(src, qc);
  st->count_block(plan, route, pairs);
  if (route == KernelRoute::skipped) return;
  const auto [kb, vb] = unpack_kv(wire.from_wire(kv_wire), kv_up, st->shape, qc.scalar_type());
  if (st->shape.latent) ++pairs.up_projected_blocks;
  merge_block(out, lse, routed_forward(qc, kb, vb, plan, st->scale, route, st->numerics(input)));
  merge_sink(*st, out, lse, sinks, /*after_block=*/true);
}

void ForwardPass::finish(const char* transport, int64_t bytes, ByteFormula formula) {
  if (!out.defined()) {  // no visible key for any query of this rank
    const auto cd = compute_dtype(input);
    out = at::zeros({qc.size(0), qc.size(1), qc.size(2), st->shape.v_head_dim}, qc.options().dtype(cd));
    lse = at::full({qc.size(0), qc.size(1), qc.size(2)}, -std::numeric_limits<double>::infinity(),
                   qc.options().dtype(cd));
  }
  merge_sink(*st, out, lse, sinks, /*after_block=*/false);
  check_state(out, input, transport, "forward: the merged output", *st);
  check_state(lse, input, transport, "forward: the merged log-sum-exp", *st);
  tap_forward_lse(lse);
  if (formula == ByteFormula::kv_passing)
    check_wire_bytes(*st, bytes, /*forward=*/true, transport, static_cast<int64_t>(c10::elementSize(input)));
  st->count_call(bytes, pairs);
}

BackwardPass::BackwardPass(const TransportState& st_in, const char* transport_in, const at::Tensor& q,
                           const at::Tensor& grad_out, const at::Tensor& out_in, const at::Tensor& lse_in,
                           const at::Tensor& sinks_in, const at::Tensor& kv_up_in)
    : st(&st_in),
      transport(transport_in),
      input(q.scalar_type()),
      out(out_in),
      lse(lse_in),
      sinks(sinks_in),
      kv_up(kv_up_in) {
  const auto cd = compute_dtype(input);
  const auto kd = st->kernel_dtype(q);
  qc = q.to(kd).contiguous();
  dout = grad_out.to(kd).contiguous();
  dsum = (dout.to(cd) * out).sum(-1);
  dq = at::zeros(qc.sizes(), qc.options().dtype(cd));
  check_state(dq, input, transport, "backward: dQ", *st);
}

at::Tensor BackwardPass::block(int src, const Wire& wire, const at::Tensor& kv_wire) {
  const KernelRoute route = st->route(src, qc);
  if (route == KernelRoute::skipped) return {};
  const at::Tensor kv = wire.from_wire(kv_wire);
  const auto [kb, vb] = unpack_kv(kv, kv_up, st->shape, qc.scalar_type());
  const BlockGrads g =
      routed_backward(dout, qc, kb, vb, out, lse, dsum, st->plan(src), st->scale, route, st->numerics(input));
  dq.add_(g.dq);
  const auto cd = dq.scalar_type();
  return pack_kv_grad(g.dk.to(cd), g.dv.to(cd), kv, kv_up, st->shape, dkv_up);
}

BackwardResult BackwardPass::finish(const at::Tensor& dkv, int64_t bytes, ByteFormula formula) {
  check_state(dq, input, transport, "backward: dQ", *st);
  check_state(dkv, input, transport, "backward: dK/dV", *st);
  if (formula == ByteFormula::kv_passing)
    check_wire_bytes(*st, bytes, /*forward=*/false, transport, static_cast<int64_t>(c10::elementSize(input)));
  if (st->stats) st->stats->bytes_sent += bytes;
  BackwardResult r;
  r.dq = dq.to(input);
  if (sinks.defined()) r.dsinks = sink_grad(lse, dsum, sinks);
  if (kv_up.defined()) r.dw = dkv_up.defined() ? dkv_up.to(kv_up.scalar_type()) : at::zeros_like(kv_up);
  return r;
}

}  // namespace cpbench::kernels
