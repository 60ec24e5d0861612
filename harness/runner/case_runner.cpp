#include "harness/runner/case_runner.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include "harness/model/data.hpp"
#include "harness/model/mamba.hpp"
#include "harness/model/model.hpp"
#include "harness/runner/device_choice.hpp"
#include "harness/runner/reference_check.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/comm/autograd.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/comm/process_group.hpp"
#include "kernels/transports/transport.hpp"
#include "reports/json_report.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"
#include "sharders/registry.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

RunResult result_skeleton(const ScenarioSpec& s, const CaseSpec& c) {
  RunResult r;
  r.index = c.index;
  r.name = c.name();
  r.expect = to_string(c.expect);
  r.axes = {{"sharder", c.sharder},        {"transport", c.transport}, {"cp", std::to_string(c.cp)},
            {"dp", std::to_string(c.dp)},  {"mask", c.mask.to_string()}, {"dtype", dtype_name(c.dtype)},
            {"device", to_string(s.device)}};
  if (c.ulysses > 0) r.axes["ulysses"] = std::to_string(c.ulysses);
  return r;
}

std::string skip_reason(const ScenarioSpec& s, const CaseSpec& c, int job_world_size) {
  if (job_world_size > 0 && c.world_size() != job_world_size)
    return detail::concat("needs world size cp x dp = ", c.world_size(), ", the job has ", job_world_size);
  if (s.device == DeviceKind::cuda && !torch::cuda::is_available())
    return "device: cuda requested, but CUDA is not available here";
  if (attention_routing(c.sharder) == AttentionRouting::local_only && c.cp == 1 && c.expect == Expect::mismatch)
    return "a local-only negative control cannot differ from the reference at cp=1";
  if (attention_routing(c.sharder) == AttentionRouting::ssm_rank_order && c.expect == Expect::mismatch) {
    if (!s.model.has_ssm()) return "the ssm_rank_order negative control needs a model with Mamba layers (model.mixers)";
    if (c.cp == 1) return "the ssm_rank_order negative control cannot differ from the reference at cp=1";
  }
  auto opts = at::TensorOptions().dtype(c.dtype).device(s.device == DeviceKind::cuda ? at::kCUDA : at::kCPU);
  const std::string why = make_transport(c.transport, c.transport_options())->unsupported_reason(c.mask, opts, c.cp);
  if (!why.empty()) return c.transport + ": " + why;
  return "";
}

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = median(v);
  if (m <= 0) return 0;
  return (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / m;
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// A parameter the forward did not use (the embedding when inputs_embeds is the primary) has no
// gradient; for the comparison and the all-reduce it is exactly zero.
at::Tensor grad_or_zeros(const at::Tensor& p) { return p.grad().defined() ? p.grad() : at::zeros_like(p); }

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

struct StepTimes {
  double shard = 0, forward = 0, backward = 0, gather = 0, total = 0;
  int64_t ssm_bytes = 0;  // bytes the Mamba layers' all-to-alls sent from this rank
  AttentionStats attn;
};


// ---- one case, step by step ----

// Everything a rank of the case holds: device and groups, data, model, the sharder's layout and the
// transport. Built once per case.
struct CaseContext {
  const ScenarioSpec& s;
  const CaseSpec& c;
  int cp_rank = 0, dp_index = 0;
  at::Device device = at::kCPU;
  bool cuda = false;
  bool shared_gpu = false;
  std::optional<comm::ProcessGroup> cp_pg, world_pg;
  comm::Communicator comm;
  GlobalData data;
  TinyTransformer model{nullptr};
  std::shared_ptr<const Layout> layout;
  AttentionRouting routing = AttentionRouting::transport;
  std::shared_ptr<const Transport> transport;
  double scale = 0;
  std::string nvtx;  // "cp:<sharder>"
  std::vector<std::pair<std::string, at::Tensor>> params;

  CaseContext(const ScenarioSpec& spec, const CaseSpec& cs) : s(spec), c(cs) {}
  // Phase boundaries on a GPU: synchronize, then read the host clock, so a phase's time covers its
  // kernels (an NVTX range marks the same span for Nsight).
  void sync() const {
    if (cuda) torch::cuda::synchronize(device.index());
  }
};

// Device, backend and process groups (the CP group of this rank's data-parallel replica, and the
// world when dp > 1), then data, model, layout and transport.
void setup_case(CaseContext& x, RankRuntime& rt) {
  const CaseSpec& c = x.c;
  const int cp = static_cast<int>(c.cp);
  x.dp_index = rt.rank / cp;
  x.cp_rank = rt.rank % cp;
  x.cuda = x.s.device == DeviceKind::cuda;
  const DeviceChoice dc = choose_device(x.cuda, rt.local_rank, rt.local_world_size,
                                        x.cuda ? static_cast<int>(torch::cuda::device_count()) : 0, x.s.share_gpu);
  const comm::BackendKind kind = dc.backend;
  x.shared_gpu = dc.shared_gpu;
  std::optional<at::Device> bound;
  if (x.cuda) {
    x.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(dc.device_index));
    c10::cuda::set_device(x.device.index());
    if (kind == comm::BackendKind::nccl) bound = x.device;
  }
  const auto timeout = std::chrono::milliseconds(x.s.timeout_s * 1000);
  std::vector<int> cp_ranks;
  for (int i = 0; i < cp; ++i) cp_ranks.push_back(x.dp_index * cp + i);
  const std::string tag = "case" + std::to_string(c.index);
  x.cp_pg.emplace(comm::ProcessGroup::create(rt.store, tag + "/cp" + std::to_string(x.dp_index), cp_ranks, rt.rank,
                                             kind, timeout, 1, bound));
  x.comm = comm::Communicator(x.cp_pg->backend_ptr());
  if (c.dp > 1) {
    std::vector<int> all(rt.world_size);
    for (int i = 0; i < rt.world_size; ++i) all[i] = i;
    x.world_pg.emplace(comm::ProcessGroup::create(rt.store, tag + "/world", all, rt.rank, kind, timeout, 1, bound));
  }
  x.data = make_global_data(x.s.batch, x.s.model, c.dtype, x.device, static_cast<uint64_t>(x.dp_index));
  x.model = TinyTransformer(x.s.model, c.dtype, x.device);
  x.layout = make_layout(c.sharder);
  x.routing = attention_routing(c.sharder);
  x.transport = make_transport(c.transport, c.transport_options());
  x.scale = 1.0 / std::sqrt(static_cast<double>(x.s.model.head_dim()));
  x.nvtx = nvtx::prefix(c.sharder);
  for (const auto& p : x.model->named_parameters()) x.params.emplace_back(p.key(), p.value());
}

// What the single-rank reference and the CP step are compared on.
struct Outputs {
  at::Tensor loss, logits, x0_grad;  // logits and dL/d(x0) in the caller's [B, S, ...] coordinates
  std::vector<at::Tensor> grads;     // every parameter's gradient, in x.params order
  at::Tensor owner;                  // [B, S]: the CP rank owning each input position (-1: dropped)
};

// The unsharded batch on one rank (the first of each CP group) through `model`, with plain masked
// attention.
Outputs run_reference(const CaseContext& x, TinyTransformer& model, const GlobalData& data) {
  model->zero_grad();
  const TokenMeta& m = data.reference_meta;
  AttentionFn attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return local_attention(q, k, v, m, m, x.c.mask, x.scale);
  };
  const Batch& b = data.batch;
  at::Tensor embeds;
  if (b.inputs_embeds) embeds = b.inputs_embeds->clone();
  std::optional<SsmStepContext> ssm;
  if (x.s.model.has_ssm())
    ssm = single_rank_ssm_context(m, x.c.mask, x.s.model.ssm.conv, model->parameters()[0].scalar_type(), x.device);
  ModelOutput out = model->forward(b.input_ids, b.inputs_embeds ? std::optional<at::Tensor>(embeds) : std::nullopt,
                                   *b.position_ids, attn, ssm ? &*ssm : nullptr);
  at::Tensor loss = token_loss_sum(out.logits, *b.labels, b.loss_mask) / valid_token_count(*b.labels, b.loss_mask);
  loss.backward();
  Outputs ref;
  ref.loss = loss.detach();
  ref.logits = out.logits.detach();
  ref.x0_grad = out.x0.grad().detach();
  for (const auto& p : model->parameters()) ref.grads.push_back(grad_or_zeros(p).detach().clone());
  return ref;
}

// What the CP step is judged against (docs/correctness.md). float64 / float32: the single-rank run in
// the case's dtype (`exact`). bfloat16 / float16: a float64 reference (`exact`, the same rounded
// parameters and inputs upcast) and the single-rank run in the case's dtype (`single`), whose error
// against float64 is the precision's own.
struct References {
  Outputs exact, single;
  double seconds = 0;
};

References run_references(CaseContext& x) {
  nvtx::Range range{x.nvtx, "reference"};
  const auto t = clock_type::now();
  References r;
  if (!judged_by_precision(x.c.dtype)) {
    r.exact = run_reference(x, x.model, x.data);
  } else {
    r.single = run_reference(x, x.model, x.data);
    TinyTransformer model64(x.s.model, at::kDouble, x.device);
    {
      at::NoGradGuard no_grad;
      const auto lp = x.model->parameters();
      const auto hp = model64->parameters();
      for (size_t i = 0; i < hp.size(); ++i) hp[i].copy_(lp[i].to(at::kDouble));
    }
    GlobalData data64 = x.data;
    if (data64.batch.inputs_embeds) data64.batch.inputs_embeds = data64.batch.inputs_embeds->to(at::kDouble);
    r.exact = run_reference(x, model64, data64);
  }
  r.seconds = seconds_since(t);
  return r;
}

// Negative controls' deliberate faults (AttentionRouting::perturbed / grad_dropped): a relative change
// of one rank's attention output on a few tokens (forward), or the gradient of a few tokens' keys and
// values never reaching their owner (backward only). Applied on the last CP rank.
constexpr int64_t kControlTokens = 4;
double perturbation(at::ScalarType dtype) {
  // 1e-4 is far below what a sloppy check would notice in float32 / float64. In bfloat16 the rule's
  // bound is three times the single-rank error, whose max over a 2048-token row is already a few percent of
  // an attention output: 5e-2 on four tokens went unnoticed there (measured, docs/correctness.md), so
  // the bf16 control moves them by 25%.
  return judged_by_precision(dtype) ? 0.25 : 1e-4;
}

at::Tensor perturb_output(const at::Tensor& out, double eps) {
  // out [B, H, S_local, D]: scale the first kControlTokens local tokens by (1 + eps).
  const int64_t n = std::min<int64_t>(kControlTokens, out.size(2));
  at::Tensor factor = at::ones({1, 1, out.size(2), 1}, out.options());
  factor.narrow(2, 0, n).fill_(1.0 + eps);
  return out * factor;
}

// Identity forward; backward zeroes the gradient of the first kControlTokens local tokens.
class DropTokenGrad : public torch::autograd::Function<DropTokenGrad> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& t) { return t.view_as(t); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    at::Tensor g = grads[0].clone();
    g.narrow(2, 0, std::min<int64_t>(kControlTokens, g.size(2))).zero_();
    return {g};
  }
};

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

// One CP training step: shard, forward through the case's attention routing, loss over the global
// valid-token count, backward, parameter-gradient all-reduce over CP, gather. With `check`, also
// gathers what the reference check compares. With `trace`, records the step's timeline: its phases
// and the transport's spans, relative to the moment this rank left the step's opening barrier (the
// common start of the CP group).
StepTimes run_step(CaseContext& x, AttentionStats& stats, Outputs* check, RankTimeline* trace = nullptr) {
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
  Sharder sharder(x.layout, SharderOptions{c.cp, x.cp_rank, x.s.batch.padding_token_id, c.mask, 0});
  Batch local;
  TokenMeta local_meta, all_meta;
  std::shared_ptr<const kernels::PlanCache> plans;
  std::optional<SsmStepContext> ssm;
  {
    nvtx::Range range{x.nvtx, "shard"};
    local = sharder.shard(x.data.batch);
    // The attention runs on what each rank's shard returned: its own tokens' metadata, and every
    // rank's gathered in rank order (the layout's local order per rank).
    local_meta = sharder.attention_meta(local).to(x.device);
    all_meta = gather_meta(x.comm, local_meta);
    // Block plans for the whole step, from the metadata on the host (one copy from the device under
    // NCCL, here): every layer's forward and backward reuse them, with no host synchronization.
    if (x.routing != AttentionRouting::local_only)
      plans = x.transport->make_plans(c.mask, local_meta, all_meta, x.cp_rank, static_cast<int>(c.cp), x.device);
    // Mamba layers: the shard's own map between rank order and the global stream, and the scan's
    // resets, once per step.
    if (x.s.model.has_ssm())
      ssm.emplace(cp_ssm_context(x.comm, sharder, all_meta, c.mask, x.s.model.ssm.conv, c.dtype, x.device, x.nvtx,
                                 x.routing != AttentionRouting::ssm_rank_order));
    if (ssm) ssm->bytes_sent = &t.ssm_bytes;
  }
  x.sync();
  t.shard = mark("shard", t0);

  t0 = clock_type::now();
  AttentionContext ctx{&x.comm, c.mask, local_meta, all_meta, x.scale, &stats, x.nvtx, plans, false};
  AttentionFn cp_attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return x.transport->attend(q, k, v, ctx);
  };
  AttentionFn local_attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return local_attention(q, k, v, local_meta, local_meta, c.mask, x.scale);
  };
  const SsmStepContext* ssm_ptr = ssm ? &*ssm : nullptr;
  x.model->zero_grad();
  ModelOutput out;
  at::Tensor loss;
  {
    nvtx::Range range{x.nvtx, "forward"};
    switch (x.routing) {
      case AttentionRouting::transport:
      case AttentionRouting::ssm_rank_order:  // its fault is in the SSM context above
        out = x.model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, cp_attn, ssm_ptr);
        break;
      case AttentionRouting::sdpa_hook: {
        // The model's own attention is plain local SDPA; the wrap installs the CP transport at the
        // hook point for this forward only.
        SdpaHookGuard guard(*x.model, cp_attn);
        out = x.model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, local_attn, ssm_ptr);
        break;
      }
      case AttentionRouting::local_only:
        out = x.model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, local_attn, ssm_ptr);
        break;
      case AttentionRouting::perturbed: {
        const bool faulty = x.cp_rank == c.cp - 1;
        const double eps = perturbation(c.dtype);
        AttentionFn attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
          const at::Tensor o = x.transport->attend(q, k, v, ctx);
          return faulty ? perturb_output(o, eps) : o;
        };
        out = x.model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, attn, ssm_ptr);
        break;
      }
      case AttentionRouting::grad_dropped: {
        const bool faulty = x.cp_rank == c.cp - 1;
        AttentionFn attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
          return faulty ? x.transport->attend(q, DropTokenGrad::apply(k), DropTokenGrad::apply(v), ctx)
                        : x.transport->attend(q, k, v, ctx);
        };
        out = x.model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, attn, ssm_ptr);
        break;
      }
    }
    at::Tensor count = valid_token_count(*local.labels, local.loss_mask).contiguous();
    x.comm.all_reduce_sum(count);
    loss = token_loss_sum(out.logits, *local.labels, local.loss_mask) / count;
  }
  x.sync();
  t.forward = mark("forward", t0);

  t0 = clock_type::now();
  {
    nvtx::Range range{x.nvtx, "backward"};
    loss.backward();
    // Parameter gradients: sum of the CP ranks' partial gradients, in one flat buffer.
    std::vector<at::Tensor> grads;
    for (auto& [name, p] : x.params) grads.push_back(grad_or_zeros(p).flatten());
    at::Tensor flat = at::cat(grads);
    x.comm.all_reduce_sum(flat);
    int64_t off = 0;
    for (auto& [name, p] : x.params) {
      const int64_t n = p.numel();
      p.mutable_grad() = flat.narrow(0, off, n).view_as(p).clone();
      off += n;
    }
  }
  x.sync();
  t.backward = mark("backward", t0);

  t0 = clock_type::now();
  {
    nvtx::Range range{x.nvtx, "gather"};
    at::Tensor logits = gather_tokens(x.comm, sharder, out.logits.detach());
    if (check) {
      check->logits = logits;
      check->x0_grad = gather_tokens(x.comm, sharder, out.x0.grad().detach());
      at::Tensor l = loss.detach().clone().contiguous();
      x.comm.all_reduce_sum(l);
      check->loss = l;
      for (auto& [name, p] : x.params) check->grads.push_back(p.grad().detach().clone());
      check->owner = input_owner(sharder, x.data);
    }
  }
  x.sync();
  t.gather = mark("gather", t0);
  t.total = mark("step", t_step);
  resolve_device_times(stats, anchor, t_step);  // CUDA spans (the device is synchronized: no wait)
  if (trace) add_attention_spans(stats, t_step, *trace);
  t.attn = stats;
  return t;
}

// Compares the CP step's outputs with the references (on the first rank of each CP group; the others
// return nothing), labelled with the step they come from. With dp > 1 the replicas exchange their
// worst scores over the world group.
std::vector<TensorError> check_outputs(const CaseContext& x, const Outputs& got, const References& ref,
                                       const char* step) {
  nvtx::Range range{x.nvtx, "check"};
  std::vector<TensorError> errs;
  if (x.cp_rank == 0) {
    const bool precision = judged_by_precision(x.c.dtype);
    const ElementwiseBound bound = elementwise_bound(x.c.dtype);
    const PrecisionRule rule;
    // Logits at padding positions are not part of the model's contract (the shard may drop them).
    const at::Tensor valid = x.data.batch.padding_mask->logical_not().unsqueeze(-1).to(at::kCPU);
    const auto masked = [&](const at::Tensor& t) { return t.defined() ? t.to(at::kCPU) * valid : t; };
    const auto check = [&](const std::string& name, const at::Tensor& cp, const at::Tensor& exact,
                           const at::Tensor& single, const ElementNames& names) {
      TensorError e = precision ? compare_precision(name, cp, single, exact, rule, names)
                                : compare_elementwise(name, cp, exact, bound, names);
      e.step = step;
      errs.push_back(std::move(e));
    };
    check("loss", got.loss, ref.exact.loss, ref.single.loss, {});
    check("logits", masked(got.logits), masked(ref.exact.logits), masked(ref.single.logits), {{"b", "s", "v"}, &got.owner});
    check(x.data.batch.inputs_embeds ? "grad:inputs_embeds" : "grad:embeddings_out", got.x0_grad, ref.exact.x0_grad,
          ref.single.x0_grad, {{"b", "s", "h"}, &got.owner});
    double grad_scale = 0;
    for (const auto& g : ref.exact.grads) grad_scale = std::max(grad_scale, g.abs().max().item<double>());
    for (size_t i = 0; i < x.params.size(); ++i)
      check("grad:" + x.params[i].first, got.grads[i], ref.exact.grads[i],
            precision ? ref.single.grads[i] : at::Tensor(), {{"i", "j"}, nullptr, grad_scale});
  }
  if (x.world_pg) {
    // Data-parallel replicas check their own batches; the report takes the worst of them.
    comm::Communicator world(x.world_pg->backend_ptr());
    const int64_t n = static_cast<int64_t>(x.params.size()) + 3;
    at::Tensor worst = at::zeros({n}, at::kDouble);
    for (size_t i = 0; i < errs.size(); ++i) worst[static_cast<int64_t>(i)] = errs[i].score;
    world.all_reduce_max(worst);
    for (size_t i = 0; i < errs.size(); ++i) {
      const double w = worst[static_cast<int64_t>(i)].item<double>();
      if (w > errs[i].score) {
        errs[i].score = w;
        errs[i].ok = w <= 1.0;
        errs[i].worst += " (another data-parallel replica is worse: error/bound " + std::to_string(w) + ")";
      }
    }
  }
  return errs;
}

// Per tensor, the worse of the first and the last checked step.
std::vector<TensorError> worse_of(std::vector<TensorError> first, const std::vector<TensorError>& last) {
  for (size_t i = 0; i < first.size() && i < last.size(); ++i) {
    const bool last_worse = (!last[i].ok && first[i].ok) || (last[i].ok == first[i].ok && last[i].score > first[i].score);
    if (last_worse) first[i] = last[i];
  }
  return first;
}

// The timed steps' samples.
struct Timings {
  std::vector<double> total, shard, fwd, bwd, gath, attn_s, comm_s, transfer_s;
  double flops = 0, bytes = 0, ssm_bytes = 0;
  std::map<std::string, int64_t> kernel_blocks;  // per step
  int64_t pairs = 0;
  RankTimeline timeline;  // the median timed step (see time_steps)
};

Timings time_steps(CaseContext& x, AttentionStats& stats) {
  for (int64_t i = 0; i < x.s.measure.warmup; ++i) (void)run_step(x, stats, nullptr);
  Timings m;
  std::vector<RankTimeline> timelines(static_cast<size_t>(x.s.measure.iters));
  for (int64_t i = 0; i < x.s.measure.iters; ++i) {
    RankTimeline& trace = timelines[static_cast<size_t>(i)];
    trace.rank = x.cp_rank;
    StepTimes t = run_step(x, stats, nullptr, &trace);
    m.total.push_back(t.total);
    m.shard.push_back(t.shard);
    m.fwd.push_back(t.forward);
    m.bwd.push_back(t.backward);
    m.gath.push_back(t.gather);
    // Compute only: time blocked in the ring's exchanges waits for the slowest peer and would hide it.
    m.attn_s.push_back(t.attn.compute_seconds);
    m.comm_s.push_back(t.attn.comm_seconds);
    m.transfer_s.push_back(t.attn.transfer_seconds);
    m.kernel_blocks = t.attn.kernel_blocks;
    m.flops = t.attn.flops;
    m.bytes = static_cast<double>(t.attn.bytes_sent);
    m.ssm_bytes = static_cast<double>(t.ssm_bytes);
    m.pairs = t.attn.visible_pairs;
  }
  // The timeline shown is the step whose time, on the CP group's slowest rank, is the median (the lower
  // one for an even count): one collective, so every rank keeps the same step.
  at::Tensor slowest = at::tensor(m.total, at::kDouble).to(x.device);
  x.comm.all_reduce_max(slowest);
  const at::Tensor host = slowest.to(at::kCPU).contiguous();
  const std::vector<double> totals(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
  std::vector<size_t> order(totals.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return totals[a] < totals[b]; });
  m.timeline = std::move(timelines[order[(order.size() - 1) / 2]]);
  return m;
}

// The outcome against the case's expectation, and the metrics (global rank 0 only).
void record(const CaseContext& x, const Timings& m, const at::Tensor& per_rank, const Outputs& got,
            double reference_s, RunResult& res) {
  const CaseSpec& c = x.c;
  bool all_ok = true;
  std::string first_bad;
  for (const auto& e : res.errors) {
    if (!e.ok && first_bad.empty()) first_bad = e.tensor + " " + e.worst;
    all_ok = all_ok && e.ok;
  }
  const Expect outcome = all_ok ? Expect::match : Expect::mismatch;
  res.outcome = to_string(outcome);
  if (outcome == c.expect) {
    res.status = "ok";
  } else {
    res.status = "failed";
    res.reason = c.expect == Expect::match
                     ? "differs from the single-rank reference: " + first_bad
                     : "negative control: expected a mismatch with the reference, but every tensor matched";
  }
  const double step_s = median(m.total);
  const double tokens = static_cast<double>(x.data.real_tokens * c.dp);
  res.metrics.push_back({"tokens_per_s", step_s > 0 ? tokens / step_s : 0, "tokens/s", spread(m.total)});
  res.metrics.push_back({"step_time_s", step_s, "s", spread(m.total)});
  res.metrics.push_back({"phase_shard_s", median(m.shard), "s", spread(m.shard)});
  res.metrics.push_back({"phase_forward_s", median(m.fwd), "s", spread(m.fwd)});
  res.metrics.push_back({"phase_backward_s", median(m.bwd), "s", spread(m.bwd)});
  res.metrics.push_back({"phase_gather_s", median(m.gath), "s", spread(m.gath)});
  // Exposed: the time the compute waited for communication; transfer: the time it was in flight.
  res.metrics.push_back({"attention_exposed_comm_s", median(m.comm_s), "s", spread(m.comm_s)});
  res.metrics.push_back({"attention_transfer_s", median(m.transfer_s), "s", spread(m.transfer_s)});
  // The kernel each block used (fused_attention.hpp routes), blocks per step on this rank.
  for (const auto& [route, n] : m.kernel_blocks)
    res.metrics.push_back({"attention_blocks_" + route, static_cast<double>(n), "blocks", 0});
  if (x.cp_rank == 0) res.metrics.push_back({"reference_step_s", reference_s, "s", 0});
  double max_f = 0, sum_f = 0, max_t = 0, sum_t = 0, max_b = 0, max_comm = 0;
  for (int64_t r = 0; r < c.cp; ++r) {
    RankStats rs;
    rs.rank = static_cast<int>(r);
    rs.attention_s = per_rank[r][0].item<double>();
    rs.attention_flops = per_rank[r][1].item<double>();
    rs.bytes_sent = per_rank[r][2].item<double>();
    rs.comm_s = per_rank[r][3].item<double>();
    rs.transfer_s = per_rank[r][5].item<double>();
    res.ranks.push_back(rs);
    max_f = std::max(max_f, rs.attention_flops);
    sum_f += rs.attention_flops;
    max_t = std::max(max_t, rs.attention_s);
    sum_t += rs.attention_s;
    max_b = std::max(max_b, rs.bytes_sent);
    max_comm = std::max(max_comm, rs.transfer_s);
  }
  const double n = static_cast<double>(c.cp);
  res.metrics.push_back({"attention_flops_imbalance", sum_f > 0 ? max_f / (sum_f / n) : 1.0, "ratio", 0});
  res.metrics.push_back({"attention_time_imbalance", sum_t > 0 ? max_t / (sum_t / n) : 1.0, "ratio", 0});
  res.metrics.push_back({"bytes_sent_per_rank", max_b, "bytes", 0});
  // Bytes over the time they were in flight (on a GPU: the communication stream's time), not over the
  // exposed time, which overlap shrinks towards 0 and would inflate the bandwidth without bound.
  res.metrics.push_back({"achieved_bandwidth", max_comm > 0 ? max_b / max_comm : 0, "B/s", 0});
  // Mamba layers (hidden-parallel): every rank sends the same, so rank 0's count is per rank.
  if (x.s.model.has_ssm()) res.metrics.push_back({"ssm_a2a_bytes_per_rank", m.ssm_bytes, "bytes", 0});
  res.metrics.push_back({"peak_rss", static_cast<double>(peak_rss_bytes()), "bytes", 0});
  if (x.cuda) {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(x.device.index());
    res.metrics.push_back(
        {"peak_gpu_allocated",
         static_cast<double>(st.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak),
         "bytes", 0});
  }
  if (got.loss.defined()) res.metrics.push_back({"loss", got.loss.item<double>(), "nats", 0});
}

}  // namespace

RunResult run_case(const ScenarioSpec& s, const CaseSpec& c, RankRuntime& rt) {
  const auto start = clock_type::now();
  ScopedRankContext rank_context(rt.rank, rt.world_size);
  RunResult res = result_skeleton(s, c);
  CP_CHECK(c.world_size() == rt.world_size, c.name(), ": needs world size ", c.world_size(), ", the job has ",
           rt.world_size);
  CaseContext x(s, c);
  setup_case(x, rt);
  res.axes["backend"] = comm::to_string(x.cp_pg->kind());
  if (x.shared_gpu) res.axes["shared_gpu"] = "true";

  References ref;
  if (x.cp_rank == 0) ref = run_references(x);
  if (x.cuda) c10::cuda::CUDACachingAllocator::resetPeakStats(x.device.index());

  // The first step and the one after the timed steps are checked: state that leaks across steps (a
  // hook left installed, a cached plan or index map reused with stale metadata) fails the second.
  AttentionStats stats;
  Outputs got;
  (void)run_step(x, stats, &got);
  const std::vector<TensorError> first = check_outputs(x, got, ref, "first");
  const Timings m = time_steps(x, stats);
  Outputs last;
  (void)run_step(x, stats, &last);
  res.errors = worse_of(first, check_outputs(x, last, ref, "last"));
  const double reference_s = ref.seconds;
  // Per-rank numbers, gathered to every CP rank.
  at::Tensor mine =
      at::tensor({median(m.attn_s), m.flops, m.bytes, median(m.comm_s), static_cast<double>(m.pairs),
                  median(m.transfer_s)},
                 at::kDouble);
  at::Tensor per_rank = x.comm.all_gather(mine.to(x.device)).to(at::kCPU).view({c.cp, 6});
  if (rt.rank == 0) record(x, m, per_rank, got, reference_s, res);
  // The timeline of the first data-parallel replica's CP ranks reaches global rank 0 through the store.
  const std::string key = detail::concat("timeline/case", c.index, "/rank");
  if (x.dp_index == 0 && x.cp_rank != 0) {
    const std::string bytes = to_json(m.timeline).dump();
    rt.store->set(key + std::to_string(x.cp_rank), std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  if (rt.rank == 0) {
    res.timeline.clock = x.cuda ? "steady+cuda_events" : "steady";
    res.timeline.ranks.push_back(m.timeline);
    for (int64_t r = 1; r < c.cp; ++r) {
      const std::vector<uint8_t> bytes = rt.store->get(key + std::to_string(r));
      res.timeline.ranks.push_back(rank_timeline_from_json(nlohmann::json::parse(bytes.begin(), bytes.end())));
    }
  }
  res.wall_s = seconds_since(start);
  return res;
}

}  // namespace cpbench
