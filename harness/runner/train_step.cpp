#include "harness/runner/train_step.hpp"

#include <algorithm>
#include <chrono>

#include "kernels/mixers/section_clock.hpp"
#include "harness/runner/reference_check.hpp"
#include "kernels/attention/mla.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/comm/autograd.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {
namespace {

using clock_type = std::chrono::steady_clock;

// Every CP rank's [B, S_local] metadata, in rank order along dim 1: [B, W * S_local].
TokenMeta gather_meta(const comm::Communicator& comm, const TokenMeta& local) {
  // One collective for the four fields: [4, B, S] -> [W * 4, B, S].
  const at::Tensor stacked = at::stack({local.pos, local.segment, local.doc, local.valid.to(at::kLong)});
  const at::Tensor all = comm.all_gather(stacked).view({comm.size(), 4, local.batch(), local.tokens()});
  const auto field = [&](int64_t i) { return all.select(1, i).permute({1, 0, 2}).reshape({local.batch(), -1}); };
  return TokenMeta{field(0), field(1), field(2), field(3).to(at::kBool)};
}

// A token tensor [B, S_local, ...] of every rank, in the caller's coordinates [B, S, ...]: all-gather,
// then the sharder's gather verb (which restores the global order and trims the padding).
at::Tensor gather_tokens(const comm::Communicator& comm, const Sharder& sharder, const at::Tensor& local) {
  const at::Tensor full = all_gather_autograd(comm, local, 1);
  return sharder.gather_token_tensor(full.chunk(comm.size(), 1), 1, /*trim=*/true, 0.0);
}

// The transport's spans of one step as timeline events, relative to the step's start.
void add_attention_spans(const AttentionStats& stats, clock_type::time_point start, RankTimeline& trace) {
  const auto rel = [&](clock_type::time_point t) { return std::chrono::duration<double>(t - start).count(); };
  for (const auto& sp : stats.spans) {
    TimelineEvent e;
    e.name = sp.name;
    e.start_s = rel(sp.begin);
    e.dur_s = std::chrono::duration<double>(sp.end - sp.begin).count();
    switch (sp.kind) {
      case AttentionSpan::Kind::compute:
        e.lane = "compute";
        e.kind = "compute";
        break;
      case AttentionSpan::Kind::wait:
        e.lane = "compute";
        e.kind = "wait";
        break;
      case AttentionSpan::Kind::transfer:
        e.lane = "comm";
        e.kind = "transfer";
        break;
      case AttentionSpan::Kind::transfer_grad:
        e.lane = "comm_grad";
        e.kind = "transfer";
        break;
    }
    trace.events.push_back(std::move(e));
  }
}

}  // namespace

at::Tensor sorted_picks(const at::Tensor& picks, int64_t per_layer) {
  const int64_t n = picks.size(-1), k = per_layer > 0 && n % per_layer == 0 ? per_layer : n;
  auto shape = picks.sizes().vec();
  shape.back() = n / k;
  shape.push_back(k);
  return std::get<0>(picks.reshape(shape).sort(-1)).reshape(picks.sizes()).contiguous();
}

StepTimes run_step(CaseContext& x, AttentionStats& stats, RankTimeline* trace, StepState* keep) {
  const CaseSpec& c = x.c;
  StepTimes t;
  x.sync();
  x.comm.barrier();
  stats.reset();
  stats.record_spans = trace != nullptr;
  const auto t_step = clock_type::now();
  // CUDA: the transports time their spans with device events; this one, taken with the device idle
  // (synchronized above), maps them onto the host clock of t_step.
  const comm::DeviceTime anchor = x.cuda ? comm::DeviceTime::now(x.device) : comm::DeviceTime{};
  const nvtx::Range step_range{x.nvtx, "step"};
  const auto mark = [&](const char* phase, clock_type::time_point from) {
    const auto to = clock_type::now();
    if (trace)
      trace->events.push_back({phase, "phases", "phase", std::chrono::duration<double>(from - t_step).count(),
                               std::chrono::duration<double>(to - from).count()});
    return std::chrono::duration<double>(to - from).count();
  };
  auto t0 = clock_type::now();
  StepState local_state;
  StepState& st = keep ? *keep : local_state;
  st.sharder.emplace(x.layout, SharderOptions{c.cp, x.cp_rank, x.s.batch.padding_token_id, c.mask, 0});
  Sharder& sharder = *st.sharder;
  Batch local;
  TokenMeta local_meta, all_meta;
  at::Tensor global_index;  // the layout's map: global stream position of each rank-order column
  std::shared_ptr<const kernels::PlanCache> plans, sliding_plans;
  MixerContexts contexts;               // the non-attention mixers', by letter
  SectionClock mixer_clock(x.device);  // their sections
  {
    nvtx::Range range{x.nvtx, "shard"};
    local = sharder.shard(x.data.batch);
    // The attention runs on what each rank's shard returned: its own tokens' metadata, and every
    // rank's gathered in rank order (the layout's local order per rank).
    local_meta = sharder.attention_meta(local).to(x.device);
    all_meta = gather_meta(x.comm, local_meta);
    // Block plans for the whole step, from the metadata on the host (one copy from the device under
    // NCCL, here): every layer's forward and backward reuse them, with no host synchronization.
    // The head-parallel transports gather in rank order and attend in global order: the shard's own
    // map between the two (host memory, read once here).
    std::vector<int64_t> rank_order;
    for (const auto& r : sharder.shard_layout().global.ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
    global_index = at::tensor(rank_order, at::kLong);
    plans = x.transport->make_plans(c.mask, local_meta, all_meta, global_index, x.cp_rank, static_cast<int>(c.cp),
                                    x.device);
    if (x.sliding_transport)  // the sliding_attention layers' plans: their mask, their transport's form
      sliding_plans = x.sliding_transport->make_plans(c.sliding_mask, local_meta, all_meta, global_index, x.cp_rank,
                                                      static_cast<int>(c.cp), x.device);
    // The other mixers' step contexts (index maps, scan plans, the strategy's exchanges), once per step.
    for (const Mixer* m : mixers_in(x.s.model.mixers)) {
      CpStepInputs in;
      in.comm = &x.comm;
      in.layout = &sharder.shard_layout().global;
      in.all_meta = all_meta;
      in.mask = c.mask;
      in.dtype = c.dtype;
      in.device = x.device;
      in.nvtx = x.nvtx;
      in.strategy = m->strategy_axis().empty() ? c.transport : c.mixer_strategy(*m);  // attention: its transport
      in.ulysses = c.ulysses;
      if (x.control) in.fault = x.control->mixer_fault(m->name(), ControlSite{x.cp_rank, c.cp, c.dtype});
      auto ctx = m->cp_context(x.s.model, in);
      if (!ctx) continue;
      ctx->bytes_sent = &t.mixer_bytes[m->letter()];
      ctx->clock = &mixer_clock;
      contexts.emplace(m->letter(), std::move(ctx));
    }
  }
  x.sync();
  t.shard = mark("shard", t0);

  t0 = clock_type::now();
  AttentionContext ctx{&x.comm,       c.mask, local_meta,   all_meta,
                       x.scale,       &stats, x.nvtx,       plans,
                       x.s.kernels == AttentionKernels::tiled, global_index,
                       x.s.kernels == AttentionKernels::flash_numerics};
  AttentionFn cp_attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                            const at::Tensor& kv_up) {
    if (!sinks.defined() && !kv_up.defined()) return x.transport->attend(q, k, v, ctx);
    AttentionContext call = ctx;  // this layer's sinks, MLA's W_up on the latent wire
    call.sinks = sinks;
    call.kv_up = kv_up;
    return x.transport->attend(q, k, v, call);
  };
  AttentionContext sliding_ctx = ctx;  // model.attention.layer_types: the sliding layers' mask and plans
  sliding_ctx.mask = c.sliding_mask;
  sliding_ctx.plans = sliding_plans;
  AttentionFn cp_sliding = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                               const at::Tensor& kv_up) {
    AttentionContext call = sliding_ctx;
    call.sinks = sinks;
    call.kv_up = kv_up;
    return x.sliding_transport->attend(q, k, v, call);
  };
  const AttentionFn* sliding_fn = x.sliding_transport ? &cp_sliding : nullptr;
  x.model->zero_grad();
  {
    nvtx::Range range{x.nvtx, "forward"};
    if (x.routing == AttentionRouting::sdpa_hook) {
      // The model's own attention is plain local SDPA; the wrap installs the CP transport at the hook
      // point for this forward only.
      AttentionFn local_attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& sinks, const at::Tensor& kv_up) {
        if (kv_up.defined()) {  // MLA's latent wire: nothing travels here, the layer's up-projection
          const auto [ke, ve] = kernels::mla_expand(k.select(1, 0), kv_up, q.size(1), q.size(3) - (k.size(3) - kv_up.size(1)));
          return local_attention(q, ke, ve, local_meta, local_meta, c.mask, x.scale, sinks);
        }
        return local_attention(q, k, v, local_meta, local_meta, c.mask, x.scale, sinks);
      };
      SdpaHookGuard guard(*x.model, cp_attn);
      st.out = x.model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, local_attn, contexts);
    } else {
      st.out = x.model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, cp_attn, contexts,
                                sliding_fn);
    }
    at::Tensor count = valid_token_count(*local.labels, local.loss_mask).contiguous();
    x.comm.all_reduce_sum(count);
    st.loss = token_loss_sum(st.out.logits, *local.labels, local.loss_mask) / count;
    for (const auto& [letter, ctx] : contexts)  // e.g. DSA's indexer loss, already over the sequence's rows
      if (const at::Tensor aux = ctx->aux_loss(); aux.defined()) {
        st.loss = st.loss + aux.to(st.loss.scalar_type());
        st.aux = st.aux.defined() ? st.aux + aux.detach() : aux.detach();
      }
    for (const auto& [letter, ctx] : contexts)
      if (const at::Tensor p = ctx->key_picks(); p.defined()) st.picks = p;
  }
  x.sync();
  t.forward = mark("forward", t0);
  for (const auto& [letter, ctx] : contexts) {
    // What a mixer's layers sent is what its formula says one layer sends, times its layers.
    const int64_t layers = count_layers(x.s.model.mixers, x.s.model.layers, letter);
    const int64_t expected = ctx->bytes_of_layers(layers);
    const Mixer& m = mixer_for(letter);
    CP_CHECK(t.mixer_bytes[letter] == expected, m.name(), " ", ctx->strategy_name(), ": the ", layers, " ", m.label(),
             " layers sent ", t.mixer_bytes[letter], " bytes from rank ", x.cp_rank, ", the ", m.name(),
             " formula says ", expected, " (", c.name(), ")");
  }

  t0 = clock_type::now();
  {
    nvtx::Range range{x.nvtx, "backward"};
    st.loss.backward();
    // Parameter gradients: sum of the CP ranks' partial gradients, in one flat buffer held in float32
    // for 16-bit parameters (float64 stays float64): each rank's partial is rounded to the parameter
    // dtype once, by its own backward, and the sum over W ranks is not rounded again per rank, as a
    // bf16 all-reduce would (an error growing with W; docs/correctness.md, "Accumulators").
    std::vector<at::Tensor> grads;
    for (auto& [name, p] : x.params) grads.push_back(grad_or_zeros(p).flatten());
    at::Tensor flat = at::cat(grads);
    if (keep) st.partial_grads = flat.clone();
    if (flat.scalar_type() != at::kDouble) flat = flat.to(at::kFloat);
    x.comm.all_reduce_sum(flat);
    int64_t off = 0;
    for (auto& [name, p] : x.params) {
      const int64_t n = p.numel();
      p.mutable_grad() = flat.narrow(0, off, n).view_as(p).to(p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
      off += n;
    }
  }
  x.sync();
  t.backward = mark("backward", t0);
  t.total = mark("step", t_step);
  resolve_device_times(stats, anchor, t_step);  // CUDA spans (the device is synchronized: no wait)
  if (trace) add_attention_spans(stats, t_step, *trace);
  t.mixer_s = mixer_clock.seconds();
  t.attn = stats;
  return t;
}

Outputs gather_outputs(CaseContext& x, const StepState& kept) {
  nvtx::Range range{x.nvtx, "gather"};
  Outputs o;
  o.logits = gather_tokens(x.comm, *kept.sharder, kept.out.logits.detach());
  o.x0_grad = gather_tokens(x.comm, *kept.sharder, kept.out.x0.grad().detach());
  at::Tensor l = kept.loss.detach().clone().contiguous();
  x.comm.all_reduce_sum(l);
  o.loss = l;
  // Every rank calls the collective when any mixer adds to the loss (the same model on every rank).
  if (kept.aux.defined()) {
    at::Tensor a = kept.aux.to(at::kDouble).reshape({1}).contiguous();
    x.comm.all_reduce_sum(a);
    o.aux_loss = a.squeeze(0);
  }
  for (auto& [name, p] : x.params) o.grads.push_back(p.grad().detach().clone());
  const at::ScalarType pt = kept.partial_grads.defined() ? kept.partial_grads.scalar_type() : at::kDouble;
  if (pt == at::kBFloat16 || pt == at::kHalf) {
    // What the CP sum legitimately adds to a 16-bit gradient: every rank's partial was rounded once.
    at::Tensor r = half_ulp(kept.partial_grads).to(at::kFloat).contiguous();
    x.comm.all_reduce_sum(r);
    int64_t off = 0;
    for (auto& [name, p] : x.params) {
      const int64_t n = p.numel();
      o.grad_rounding.push_back(r.narrow(0, off, n).view(p.sizes()).to(at::kCPU));
      off += n;
    }
  }
  if (kept.picks.defined()) {
    // A pick names a column of the gathered metadata (rank order): its input position is that column's
    // token's position in the caller's row, known by sharding the positions themselves like the batch.
    const Sharder& sh = *kept.sharder;
    const at::Tensor& labels = *x.data.batch.labels;
    const int64_t B = labels.size(0), S = labels.size(1), W = x.comm.size();
    const at::Tensor pos = at::arange(S, at::kLong).unsqueeze(0).expand({B, S}).contiguous().to(labels.device());
    const at::Tensor local_pos = sh.shard_token_tensor(pos, 1, -1).contiguous();  // [B', S_local]
    const int64_t rows = local_pos.size(0), n = local_pos.size(1);
    const at::Tensor cols = x.comm.all_gather(local_pos).view({W, rows, n}).permute({1, 0, 2}).reshape({rows, W * n});
    const at::Tensor p = kept.picks.to(cols.device());
    at::Tensor named = cols.gather(1, p.clamp_min(0).flatten(1)).view_as(p).masked_fill(p.lt(0), -1);
    named = sorted_picks(named, x.s.model.attention.dsa.topk);
    const int64_t k = named.size(2);
    const at::Tensor all = x.comm.all_gather(named).view({W, rows, n, k}).permute({1, 0, 2, 3}).reshape({rows, W * n, k});
    o.picks = sh.restore_gathered(all, 1, /*trim=*/true, -1).to(at::kCPU);
  }
  o.owner = input_owner(*kept.sharder, x.data);
  x.sync();
  return o;
}

}  // namespace cpbench
