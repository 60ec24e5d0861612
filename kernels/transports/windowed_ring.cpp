// Transport "ring_window": the ring of the sliding-window layers, stopped where the window ends.
//
// A query at stream position q sees keys q - N < k <= q (sliding_window:N), so a rank needs from the
// others only the keys within N - 1 positions before one of its queries: the halo. The ring's schedule
// stays (at step d rank r sends to r + d and receives from r - d), but only the steps at which some rank
// has a halo to send run (window_halo.hpp: contiguous chunks of c tokens, 1 + ceil((N-1)/c) steps with
// the local block; head-tail, the neighbours'), and each sends only the halo, picked token by token
// here from the layout's map (AttentionContext::global_index). Bytes are then set by N, not by S.
//
// Forward: every step's exchange is posted first, the local block computes meanwhile, then each
// received halo is scattered into a zero block in its owner's local order and runs on the step's block
// plan of that owner (keys outside the halo are invisible to this rank's queries by construction, so
// the plan, built for the whole block, is exact). The halos are kept for the backward (no K/V travel
// again); each halo's dK/dV goes home to its owner, posted as soon as it is computed, and the owner adds
// them into its own block's rows. Per call a rank sends h_s K/V tokens and h_r dK/dV tokens
// (kv_passing_costs.hpp windowed_ring_bytes), checked against the formula at the end of every call.
//
// The halo rule reads stream positions as the mask's positions, up to one offset per row (segment, and
// document under a document mask): true for the unpacked layouts, workload_balanced's rows included, not
// for thd (per-document padding); unsupported_layout refuses packed layouts and attend() checks it. Under
// a window within documents (document+sliding_window) the halo is the window's: keys of another document
// within the window travel and the step's block plan hides them.
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "kernels/comm/autograd.hpp"
#include "kernels/transports/attend_pass.hpp"
#include "kernels/transports/kv_passing_costs.hpp"
#include "kernels/transports/transfer_phases.hpp"
#include "kernels/transports/transport_common.hpp"
#include "kernels/transports/window_halo.hpp"
#include "sharders/core/check.hpp"
#include "sharders/layout.hpp"

namespace cpbench::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

inline constexpr int kTagWindowKV = 0x52f8;
inline constexpr int kTagWindowDKV = 0x52f9;

// One ring step of the halo exchange: this rank sends `send` (local indices of its own block) to r + d
// and receives the rows `recv` of rank r - d's block. int64 index tensors on the compute device.
struct HaloStep {
  int d = 0;
  int from = 0;  // r - d: the owner of what arrives
  at::Tensor send, recv;
};
struct HaloPlan {
  std::vector<HaloStep> steps;
  CallShape shape;  // with this rank's halo (the formula's count)
};

// The local indices of `keys` (a rank's stream positions, [S]) that some query of `queries` ([S]) sees
// under a window of N: the nearest query at or after each key is at most N - 1 positions ahead.
at::Tensor seen_keys(const at::Tensor& keys, const at::Tensor& queries, int64_t window) {
  const at::Tensor sorted = std::get<0>(queries.sort());
  const at::Tensor at_or_after = at::searchsorted(sorted, keys);
  const int64_t n = sorted.size(0);
  const at::Tensor nearest = sorted.index_select(0, at_or_after.clamp_max(n - 1));
  const at::Tensor seen = at_or_after.lt(n).logical_and(nearest.sub(keys).le(window - 1));
  return seen.nonzero().flatten();
}

// Whether pos - stream position is constant over every group of valid tokens that can see each other:
// one row of `all` ([B, W*S]), one segment, one document too when `documents`. `index`: [W*S].
bool window_coordinates_agree(const TokenMeta& all, const at::Tensor& index, bool documents) {
  const at::Tensor offset = all.pos.to(at::kCPU, at::kLong).sub(index.unsqueeze(0)).contiguous();
  const auto field = [&](const at::Tensor& t) {
    return t.defined() ? t.to(at::kCPU, at::kLong).expand_as(offset).contiguous() : at::zeros_like(offset);
  };
  const at::Tensor segment = field(all.segment), doc = documents ? field(all.doc) : at::zeros_like(offset);
  const at::Tensor valid = all.valid.defined() ? all.valid.to(at::kCPU, at::kBool).expand_as(offset).contiguous()
                                               : at::ones_like(offset, offset.options().dtype(at::kBool));
  const int64_t B = offset.size(0), n = offset.size(1);
  const int64_t *o = offset.data_ptr<int64_t>(), *sg = segment.data_ptr<int64_t>(), *dc = doc.data_ptr<int64_t>();
  const bool* ok = valid.data_ptr<bool>();
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> seen;
  for (int64_t i = 0; i < B * n; ++i) {
    if (!ok[i]) continue;
    const auto [it, fresh] = seen.try_emplace({i / n, sg[i], dc[i]}, o[i]);
    if (!fresh && it->second != o[i]) return false;
  }
  return true;
}

// The step's halo plan (the layout's map and the window only: the same for every sliding layer of a
// step); plan.shape carries only the halo counts, the caller fills in the call's shape.
HaloPlan plan_halo(const AttentionContext& ctx, const AttendShape& sh, const at::Device& device) {
  const int W = sh.world, r = sh.rank;
  const int64_t S = sh.tokens, N = ctx.mask.window;
  CP_CHECK(ctx.global_index.defined() && ctx.global_index.numel() == W * S, "ring_window: needs the layout's map ",
           "(AttentionContext::global_index, [W*S] = [", W * S, "]) on rank ", r);
  const at::Tensor index = ctx.global_index.to(at::kCPU, at::kLong).contiguous();
  // The halo rule reads stream positions; the mask reads `pos`. A window in `pos` is one in stream positions
  // wherever two tokens can see each other at all (their row, their segment, their document under a
  // document mask) when pos and the stream position differ by one constant there: true for every row of
  // an unpacked layout and for workload_balanced's rows laid back to back (row b at offset b x its length).
  // Keys of another row that the stream window reaches travel too (invisible under the plan, counted by
  // the same rule on both sides).
  CP_CHECK(window_coordinates_agree(ctx.all, index, ctx.mask.same_document()), "ring_window: the mask's positions ",
           "are not the layout's stream positions up to one offset per row, segment", ctx.mask.same_document() ? " and document" : "",
           " on rank ", r, " (a packed layout?); it runs on unpacked layouts only");
  std::vector<std::vector<int64_t>> ranks(static_cast<size_t>(W));
  const int64_t* p = index.data_ptr<int64_t>();
  for (int j = 0; j < W; ++j) ranks[static_cast<size_t>(j)].assign(p + j * S, p + (j + 1) * S);
  const WindowHalo halo = window_halo(ranks, N);
  const auto block = [&](int j) { return index.narrow(0, static_cast<int64_t>(j) * S, S); };
  HaloPlan plan;
  for (int d : halo.steps()) {
    HaloStep step;
    step.d = d;
    step.from = ((r - d) % W + W) % W;
    step.send = seen_keys(block(r), block((r + d) % W), N).to(device);
    step.recv = seen_keys(block(step.from), block(r), N).to(device);
    plan.steps.push_back(std::move(step));
  }
  plan.shape.halo_sent = halo.sent_by(r);
  plan.shape.halo_received = halo.received_by(r);
  plan.shape.halo_steps = halo.steps_of(r);
  return plan;
}

struct Saved {
  TransportState st;
  HaloPlan plan;
  std::vector<at::Tensor> halos;  // per step, the K/V rows received [2, B, Hkv, |recv|, D] (input dtype)
  int64_t forward_bytes = 0;
};

// `rows` [2, B, H, n, D] placed at `index` of a zero [2, B, H, S, D] block.
at::Tensor scatter_rows(const at::Tensor& rows, const at::Tensor& index, int64_t S) {
  auto sizes = rows.sizes().vec();
  sizes[3] = S;
  return at::zeros(sizes, rows.options()).index_copy_(3, index, rows);
}

class WindowedRing : public torch::autograd::Function<WindowedRing> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& sinks_in, const TransportState& st, const HaloPlan& plan) {
    const int W = st.comm.size(), r = st.comm.rank();
    const int64_t S = q.size(2);
    const Wire wire(st.comm, q.device());
    Saved saved{st, plan, {}, 0};
    ForwardPass f;
    at::Tensor kv_local;
    std::vector<at::Tensor> recv(plan.steps.size());
    std::vector<comm::Communicator::Exchange> ex(plan.steps.size());
    {
      Phase p(st, Phase::Kind::compute, "ring_window_fwd:prologue");
      f = ForwardPass(st, q, sinks_in, std::nullopt);
      kv_local = at::stack({k, v});  // [2, B, Hkv, S, D]
      for (size_t i = 0; i < plan.steps.size(); ++i) {
        const HaloStep& s = plan.steps[i];
        const at::Tensor send = wire.to_wire(kv_local.index_select(3, s.send));
        auto shape = kv_local.sizes().vec();
        shape[3] = s.recv.size(0);
        recv[i] = at::empty(shape, wire.options(k.scalar_type()));
        ex[i] = st.comm.post_exchange(send, st.ring_peer(r + s.d), recv[i], st.ring_peer(r - s.d), kTagWindowKV);
        saved.forward_bytes += static_cast<int64_t>(send.nbytes());
      }
    }
    InFlight flight(st);
    // Every block here is on the compute device already (attend's from_wire leaves it as it is).
    {
      const StepRange step(st, step_label("ring_window", false, 0));
      Phase p(st, Phase::Kind::compute, step_label("ring_window", false, 0));
      f.attend(r, wire, kv_local);
    }
    std::vector<bool> received(static_cast<size_t>(W), false);
    received[static_cast<size_t>(r)] = true;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const HaloStep& s = plan.steps[i];
      const std::string label = step_label("ring_window", false, s.d);
      const StepRange step(st, label);
      {
        Phase p(st, Phase::Kind::comm, label);
        ex[i].wait();
      }
      if (i + 1 == plan.steps.size()) flight.done(st, label);
      Phase p(st, Phase::Kind::compute, label);
      saved.halos.push_back(wire.from_wire(recv[i]));
      received[static_cast<size_t>(s.from)] = true;
      f.attend(s.from, wire, scatter_rows(saved.halos.back(), s.recv, S));
    }
    // A block the window reaches but no step brought would be attended as if it had no keys.
    for (int src = 0; src < W; ++src) {
      if (received[static_cast<size_t>(src)]) continue;
      CP_CHECK(st.route(src, f.qc) == KernelRoute::skipped, "ring_window: rank ", r, "'s queries see keys of rank ",
               src, " under ", st.mask.to_string(), ", but no ring step brings its halo");
      st.count_block(st.plan(src), KernelRoute::skipped, f.pairs);
    }
    f.finish("ring_window", saved.forward_bytes, ByteFormula::own);
    ctx->save_for_backward({q, k, v, f.out, f.lse, f.sinks});
    ctx->saved_data["state"] = comm::make_saved_object(std::move(saved));
    return f.out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& sv = comm::saved_object<Saved>(ctx->saved_data["state"]);
    const TransportState& st = sv.st;
    const HaloPlan& plan = sv.plan;
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4], &sinks = saved[5];
    const int r = st.comm.rank();
    const int64_t S = q.size(2);
    const auto cd = compute_dtype(q.scalar_type());
    const Wire wire(st.comm, q.device());
    BackwardPass b;
    at::Tensor dkv;
    {
      Phase p(st, Phase::Kind::compute, "ring_window_bwd:prologue");
      b = BackwardPass(st, "ring_window", q, grads[0], out, lse, sinks, at::Tensor());
      dkv = at::zeros({2, k.size(0), k.size(1), S, k.size(3)}, b.dq.options());
    }
    int64_t bytes = 0;
    std::vector<at::Tensor> home(plan.steps.size());
    std::vector<comm::Communicator::Exchange> ex(plan.steps.size());
    InFlight flight(st);
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const HaloStep& s = plan.steps[i];
      const std::string label = step_label("ring_window", true, s.d);
      const StepRange step(st, label);
      Phase p(st, Phase::Kind::compute, label);
      at::Tensor contrib = b.block(s.from, wire, scatter_rows(sv.halos[i], s.recv, S));
      // The halo's rows go home to their owner (zeros when no query here saw them: the owner expects them).
      at::Tensor rows = contrib.defined()
                            ? contrib.index_select(3, s.recv)
                            : at::zeros({2, k.size(0), k.size(1), s.recv.size(0), k.size(3)}, b.dq.options());
      const at::Tensor send = wire.to_wire(rows);
      auto shape = send.sizes().vec();
      shape[3] = s.send.size(0);
      home[i] = at::empty(shape, wire.options(cd));
      ex[i] = st.comm.post_exchange(send, st.ring_peer(r - s.d), home[i], st.ring_peer(r + s.d), kTagWindowDKV);
      bytes += static_cast<int64_t>(send.nbytes());
    }
    {
      const std::string label = step_label("ring_window", true, 0);
      const StepRange step(st, label);
      Phase p(st, Phase::Kind::compute, label);
      const at::Tensor own = b.block(r, wire, at::stack({k, v}));
      if (own.defined()) dkv.add_(own);
    }
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const std::string label = step_label("ring_window", true, plan.steps[i].d);
      {
        Phase p(st, Phase::Kind::comm, label);
        ex[i].wait();
      }
      if (i + 1 == plan.steps.size()) flight.done(st, label, true);
      Phase p(st, Phase::Kind::compute, label);
      dkv.index_add_(3, plan.steps[i].send, wire.from_wire(home[i]));
    }
    // What travelled is what the halo formula says (window_halo.hpp, kv_passing_costs.hpp), every call.
    const int64_t want = windowed_ring_bytes(plan.shape);
    CP_CHECK(sv.forward_bytes + bytes == want, "ring_window: rank ", r, " sent ", sv.forward_bytes, " + ", bytes,
             " bytes (forward + backward), the halo formula says ", want, " (", plan.shape.halo_sent, " tokens sent, ",
             plan.shape.halo_received, " received, window ", st.mask.window, ")");
    const BackwardResult g = b.finish(dkv, bytes, ByteFormula::own);
    return {g.dq, dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()), g.dsinks, at::Tensor(), at::Tensor()};
  }
};

class WindowedRingTransport final : public Transport {
 public:
  [[nodiscard]] std::string name() const override { return "ring_window"; }

  [[nodiscard]] std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                               int64_t cp) const override {
    if (mask.kind != MaskSpec::Kind::sliding_window)
      return "ring_window runs sliding_window masks only (the sliding_attention layers), got " + mask.to_string();
    return common_unsupported_reason(mask, options, cp);
  }

  [[nodiscard]] std::string unsupported_layout(const Layout& layout) const override {
    if (layout.packed())
      return "ring_window reads stream positions as the mask's positions; the packed layout " + layout.name() +
             "'s are not (per-document padding)";
    return "";
  }

  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    const AttendShape shape = check_attend(name(), q, k, v, ctx);
    CP_CHECK(ctx.mask.kind == MaskSpec::Kind::sliding_window, "ring_window: mask ", ctx.mask.to_string(),
             " is not a sliding window (rank ", shape.rank, ")");
    const TransportState st = make_state(ctx, shape, q.device());
    if (shape.world == 1) return single_block_attention(q, k, v, ctx.sinks, st, "ring_window");
    HaloPlan plan = step_plan(ctx, shape, q.device());
    const int64_t halo_sent = plan.shape.halo_sent, halo_received = plan.shape.halo_received,
                  halo_steps = plan.shape.halo_steps;
    plan.shape = CallShape{shape.world,    shape.batch, shape.q_heads, shape.kv_heads, shape.tokens, shape.head_dim,
                           static_cast<int64_t>(c10::elementSize(q.scalar_type()))};
    plan.shape.halo_sent = halo_sent;
    plan.shape.halo_received = halo_received;
    plan.shape.halo_steps = halo_steps;
    return WindowedRing::apply(q, k, v, optional_sinks(ctx.sinks), st, plan);
  }

  // Formulas: kv_passing_costs.hpp (the halo in CallShape / ActivationShape: window_halo.hpp).
  [[nodiscard]] int64_t bytes_per_call(const CallShape& c) const override {
    return c.cp <= 1 ? 0 : windowed_ring_bytes(c);
  }
  [[nodiscard]] int64_t forward_bytes_per_call(const CallShape& c) const override {
    return c.cp <= 1 ? 0 : windowed_ring_forward_bytes(c);
  }
  [[nodiscard]] CallTime time_per_call(const CallCostInputs& in) const override { return windowed_ring_time(in); }
  [[nodiscard]] int64_t peak_activation_bytes(const ActivationShape& a) const override {
    return windowed_ring_peak_activation_bytes(a);
  }

 private:
  // The halo plan of the step whose block plans `ctx.plans` are: planned by the first sliding layer of a
  // step and reused by the others (the runner builds one PlanCache per step and kind), so the host
  // reads the metadata and copies the index tensors to the device once per step, not per layer.
  // Without step plans (ctx.plans null) every call plans.
  [[nodiscard]] HaloPlan step_plan(const AttentionContext& ctx, const AttendShape& shape,
                                   const at::Device& device) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (ctx.plans && ctx.plans == cached_for_ && cached_.has_value()) return *cached_;
    HaloPlan plan = plan_halo(ctx, shape, device);
    if (ctx.plans) {
      cached_for_ = ctx.plans;  // held, so a later step's PlanCache cannot reuse its address
      cached_ = plan;
    }
    return plan;
  }
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const PlanCache> cached_for_;
  mutable std::optional<HaloPlan> cached_;
};

}  // namespace

std::shared_ptr<const Transport> make_windowed_ring_transport() { return std::make_shared<WindowedRingTransport>(); }

}  // namespace cpbench::kernels
