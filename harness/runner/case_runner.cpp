#include "harness/runner/case_runner.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <nvtx3/nvtx3.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>

#include "kernels/comm/autograd.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/comm/process_group.hpp"
#include "harness/model/data.hpp"
#include "harness/model/model.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

double tolerance_for(const std::string& dtype) {
  if (dtype == "float64") return 1e-10;
  if (dtype == "float32") return 1e-5;
  return 2e-2;  // bfloat16
}

RunResult result_skeleton(const ScenarioSpec& s, const CaseSpec& c) {
  RunResult r;
  r.index = c.index;
  r.name = c.name();
  r.expect = c.expect;
  r.axes = {{"sharder", c.sharder}, {"transport", c.transport}, {"cp", std::to_string(c.cp)},
            {"dp", std::to_string(c.dp)}, {"mask", c.mask}, {"dtype", c.dtype}, {"device", s.device}};
  return r;
}

std::string skip_reason(const ScenarioSpec& s, const CaseSpec& c, int job_world_size) {
  if (job_world_size > 0 && c.world_size() != job_world_size)
    return detail::concat("needs world size cp x dp = ", c.world_size(), ", the job has ", job_world_size);
  if (s.device == "cuda" && !torch::cuda::is_available()) return "device: cuda requested, but CUDA is not available here";
  auto layout = make_layout(c.sharder);
  if (layout->attention() == Layout::Attention::local_only && c.cp == 1 && c.expect == "mismatch")
    return "a local-only negative control cannot differ from the reference at cp=1";
  auto opts = at::TensorOptions().dtype(parse_dtype(c.dtype)).device(s.device == "cuda" ? at::kCUDA : at::kCPU);
  const std::string why = make_transport(c.transport)->unsupported_reason(MaskSpec::parse(c.mask), opts, c.cp);
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

// Unravels a flat index of `shape` as "(b=.., s=.., x=..)" with the given axis names.
std::string unravel(int64_t flat, at::IntArrayRef shape, const std::vector<std::string>& names) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string s = "(";
  for (size_t d = 0; d < idx.size(); ++d) {
    if (d) s += ", ";
    s += (d < names.size() ? names[d] : "i" + std::to_string(d)) + "=" + std::to_string(idx[d]);
  }
  return s + ")";
}

// Compares cp against ref; `owner` (optional) maps (b, s) of [B, S, ...] tensors to the owning rank.
TensorError compare(const std::string& name, const at::Tensor& cp_in, const at::Tensor& ref_in, double tol,
                    const std::vector<std::string>& axis_names, const at::Tensor* owner) {
  TensorError e;
  e.tensor = name;
  e.tolerance = tol;
  at::Tensor cp = cp_in.detach().to(at::kCPU, at::kDouble), ref = ref_in.detach().to(at::kCPU, at::kDouble);
  if (!cp.sizes().equals(ref.sizes())) {
    e.ok = false;
    e.max_abs = e.max_rel = INFINITY;
    e.worst = "shape " + shape_str(cp.sizes()) + " differs from the reference's " + shape_str(ref.sizes());
    return e;
  }
  at::Tensor diff = (cp - ref).abs();
  const bool nan = at::isnan(cp).any().item<bool>();
  if (nan) diff = at::where(at::isnan(diff), at::full_like(diff, INFINITY), diff);
  const double scale = std::max(ref.abs().max().item<double>(), 1e-300);
  const int64_t worst = diff.flatten().argmax().item<int64_t>();
  e.max_abs = diff.flatten()[worst].item<double>();
  e.max_rel = e.max_abs / scale;
  e.ok = !nan && e.max_rel <= tol;
  std::string where = unravel(worst, cp.sizes(), axis_names);
  if (owner && cp.dim() >= 2) {
    const int64_t S = cp.size(1);
    const int64_t inner = cp.numel() / (cp.size(0) * S);
    const int64_t bs = worst / inner;
    const int64_t o = (*owner)[bs / S][bs % S].item<int64_t>();
    where += o >= 0 ? " owned by rank " + std::to_string(o) : " (dropped by the shard)";
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, ": cp=%.10g ref=%.10g", cp.flatten()[worst].item<double>(),
                ref.flatten()[worst].item<double>());
  e.worst = where + buf;
  return e;
}

// A parameter the forward did not use (the embedding when inputs_embeds is the primary) has no
// gradient; for the comparison and the all-reduce it is exactly zero.
at::Tensor grad_or_zeros(const at::Tensor& p) { return p.grad().defined() ? p.grad() : at::zeros_like(p); }

struct StepTimes {
  double shard = 0, forward = 0, backward = 0, gather = 0, total = 0;
  AttentionStats attn;
};

}  // namespace

RunResult run_case(const ScenarioSpec& s, const CaseSpec& c, RankRuntime& rt) {
  const auto start = clock_type::now();
  RunResult res = result_skeleton(s, c);
  CP_CHECK(c.world_size() == rt.world_size, c.name(), ": needs world size ", c.world_size(), ", the job has ",
           rt.world_size);
  const int cp = static_cast<int>(c.cp);
  const int dp_index = rt.rank / cp, cp_rank = rt.rank % cp;
  const bool cuda = s.device == "cuda";
  at::Device device = at::kCPU;
  comm::BackendKind kind = comm::BackendKind::gloo;
  if (cuda) {
    const int n = static_cast<int>(torch::cuda::device_count());
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rt.local_rank % n));
    c10::cuda::set_device(device.index());  // NCCL binds the communicator to the current device
    // NCCL needs one GPU per rank; ranks sharing a GPU talk over Gloo (reported in the axes).
    if (n >= rt.world_size) kind = comm::BackendKind::nccl;
  }
  res.axes["backend"] = comm::to_string(kind);
  const auto timeout = std::chrono::milliseconds(s.timeout_s * 1000);
  std::vector<int> cp_ranks;
  for (int i = 0; i < cp; ++i) cp_ranks.push_back(dp_index * cp + i);
  const std::string tag = "case" + std::to_string(c.index);
  auto cp_pg = comm::ProcessGroup::create(rt.store, tag + "/cp" + std::to_string(dp_index), cp_ranks, rt.rank, kind, timeout);
  comm::Communicator comm(cp_pg.backend_ptr());
  std::optional<comm::ProcessGroup> world_pg;
  if (c.dp > 1) {
    std::vector<int> all(rt.world_size);
    for (int i = 0; i < rt.world_size; ++i) all[i] = i;
    world_pg.emplace(comm::ProcessGroup::create(rt.store, tag + "/world", all, rt.rank, kind, timeout));
  }

  const at::ScalarType dtype = parse_dtype(c.dtype);
  GlobalData data = make_global_data(s.batch, s.model, dtype, device, static_cast<uint64_t>(dp_index));
  TinyTransformer model(s.model, dtype, device);
  auto layout = make_layout(c.sharder);
  auto transport = make_transport(c.transport);
  const MaskSpec mask = MaskSpec::parse(c.mask);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.model.head_dim()));
  const std::string nvtx = "cp:" + c.sharder;
  const double tol = tolerance_for(c.dtype);
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());

  // ---- the single-rank reference (the first rank of each CP group) ----
  struct Reference {
    at::Tensor loss, logits, x0_grad;
    std::vector<at::Tensor> grads;
    double seconds = 0;
  } ref;
  if (cp_rank == 0) {
    nvtx3::scoped_range range{nvtx + ":reference"};
    const auto t = clock_type::now();
    model->zero_grad();
    const TokenMeta& m = data.reference_meta;
    auto attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return local_attention(q, k, v, m, m, mask, scale);
    };
    const Batch& b = data.batch;
    at::Tensor embeds;
    if (b.inputs_embeds) embeds = b.inputs_embeds->clone();
    ModelOutput out = model->forward(b.input_ids, b.inputs_embeds ? std::optional<at::Tensor>(embeds) : std::nullopt,
                                     *b.position_ids, attn);
    at::Tensor loss = token_loss_sum(out.logits, *b.labels, b.loss_mask) / valid_token_count(*b.labels, b.loss_mask);
    loss.backward();
    ref.loss = loss.detach();
    ref.logits = out.logits.detach();
    ref.x0_grad = out.x0.grad().detach();
    for (auto& [name, p] : params) ref.grads.push_back(grad_or_zeros(p).detach().clone());
    ref.seconds = seconds_since(t);
  }

  // Phase boundaries on a GPU: synchronize, then read the host clock, so a phase's time covers its
  // kernels (an NVTX range marks the same span for Nsight).
  auto sync = [&]() {
    if (cuda) torch::cuda::synchronize(device.index());
  };
  if (cuda) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());

  // ---- the CP step ----
  AttentionStats stats;
  struct Checked {
    at::Tensor loss, logits, x0_grad;
    std::vector<at::Tensor> grads;
    at::Tensor owner;
  };
  auto step = [&](Checked* check) -> StepTimes {
    StepTimes t;
    sync();
    comm.barrier();
    stats.reset();
    const auto t_step = clock_type::now();
    auto t0 = clock_type::now();
    Sharder sharder(layout, SharderOptions{c.cp, cp_rank, s.batch.padding_token_id, mask.to_string(), mask.window, 0});
    Batch local;
    TokenMeta local_meta, all_meta;
    {
      nvtx3::scoped_range range{nvtx + ":shard"};
      local = sharder.shard(data.batch);
      TokenMeta stream = stream_meta(sharder, local, data);
      const int64_t P = sharder.shard_layout().padded_seq_len;
      std::vector<at::Tensor> idx;
      for (int64_t r = 0; r < c.cp; ++r) idx.push_back(sharder.local_token_global_indices(P, r).to(device));
      auto pick = [&](const at::Tensor& ix) {
        return TokenMeta{stream.pos.index_select(1, ix), stream.segment.index_select(1, ix),
                         stream.doc.index_select(1, ix), stream.valid.index_select(1, ix)};
      };
      local_meta = pick(idx[static_cast<size_t>(cp_rank)]);
      all_meta = pick(at::cat(idx));
    }
    sync();
    t.shard = seconds_since(t0);

    t0 = clock_type::now();
    AttentionContext ctx{&comm, mask, local_meta, all_meta, scale, &stats, nvtx};
    AttentionFn cp_attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return transport->attend(q, k, v, ctx);
    };
    AttentionFn local_attn = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return local_attention(q, k, v, local_meta, local_meta, mask, scale);
    };
    model->zero_grad();
    ModelOutput out;
    at::Tensor loss;
    {
      nvtx3::scoped_range range{nvtx + ":forward"};
      switch (layout->attention()) {
        case Layout::Attention::transport:
          out = model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, cp_attn);
          break;
        case Layout::Attention::sdpa_hook: {
          // The model's own attention is plain local SDPA; the wrap installs the CP transport at the
          // hook point for this forward only.
          SdpaHookGuard guard(*model, cp_attn);
          out = model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, local_attn);
          break;
        }
        case Layout::Attention::local_only:
          out = model->forward(local.input_ids, local.inputs_embeds, *local.position_ids, local_attn);
          break;
      }
      at::Tensor count = valid_token_count(*local.labels, local.loss_mask).contiguous();
      comm.all_reduce_sum(count);
      loss = token_loss_sum(out.logits, *local.labels, local.loss_mask) / count;
    }
    sync();
    t.forward = seconds_since(t0);

    t0 = clock_type::now();
    {
      nvtx3::scoped_range range{nvtx + ":backward"};
      loss.backward();
      // Parameter gradients: sum of the CP ranks' partial gradients, in one flat buffer.
      std::vector<at::Tensor> grads;
      for (auto& [name, p] : params) grads.push_back(grad_or_zeros(p).flatten());
      at::Tensor flat = at::cat(grads);
      comm.all_reduce_sum(flat);
      int64_t off = 0;
      for (auto& [name, p] : params) {
        const int64_t n = p.numel();
        p.mutable_grad() = flat.narrow(0, off, n).view_as(p).clone();
        off += n;
      }
    }
    sync();
    t.backward = seconds_since(t0);

    t0 = clock_type::now();
    {
      nvtx3::scoped_range range{nvtx + ":gather"};
      at::Tensor full = all_gather_autograd(comm, out.logits.detach(), 1);
      at::Tensor logits = sharder.restore_gathered(full, 1, true, 0.0);
      if (check) {
        check->logits = logits;
        at::Tensor g = all_gather_autograd(comm, out.x0.grad().detach(), 1);
        check->x0_grad = sharder.restore_gathered(g, 1, true, 0.0);
        at::Tensor l = loss.detach().clone().contiguous();
        comm.all_reduce_sum(l);
        check->loss = l;
        for (auto& [name, p] : params) check->grads.push_back(p.grad().detach().clone());
        check->owner = input_owner(sharder, data);
      }
    }
    sync();
    t.gather = seconds_since(t0);
    t.total = seconds_since(t_step);
    t.attn = stats;
    return t;
  };

  // ---- check: the first step, compared with the reference ----
  Checked got;
  {
    (void)step(&got);
    nvtx3::scoped_range range{nvtx + ":check"};
    std::vector<TensorError> errs;
    if (cp_rank == 0) {
      // Logits at padding positions are not part of the model's contract (the shard may drop them).
      at::Tensor valid = data.batch.padding_mask->logical_not().unsqueeze(-1).to(at::kCPU);
      at::Tensor cp_logits = got.logits.to(at::kCPU) * valid, ref_logits = ref.logits.to(at::kCPU) * valid;
      errs.push_back(compare("loss", got.loss, ref.loss, tol, {}, nullptr));
      errs.push_back(compare("logits", cp_logits, ref_logits, tol, {"b", "s", "v"}, &got.owner));
      errs.push_back(compare(data.batch.inputs_embeds ? "grad:inputs_embeds" : "grad:embeddings_out", got.x0_grad,
                             ref.x0_grad, tol, {"b", "s", "h"}, &got.owner));
      for (size_t i = 0; i < params.size(); ++i)
        errs.push_back(compare("grad:" + params[i].first, got.grads[i], ref.grads[i], tol, {"i", "j"}, nullptr));
    }
    if (world_pg) {
      // Data-parallel replicas check their own batches; the report takes the worst of them.
      comm::Communicator world(world_pg->backend_ptr());
      const int64_t n = static_cast<int64_t>(params.size()) + 3;
      at::Tensor worst = at::zeros({n}, at::kDouble);
      for (size_t i = 0; i < errs.size(); ++i) worst[static_cast<int64_t>(i)] = errs[i].max_rel;
      world.all_reduce_max(worst);
      for (size_t i = 0; i < errs.size(); ++i) {
        const double w = worst[static_cast<int64_t>(i)].item<double>();
        if (w > errs[i].max_rel) {
          errs[i].max_rel = w;
          errs[i].ok = w <= tol;
          errs[i].worst += " (another data-parallel replica is worse: max_rel " + std::to_string(w) + ")";
        }
      }
    }
    res.errors = errs;
  }

  // ---- timing ----
  for (int64_t i = 0; i < s.measure.warmup; ++i) (void)step(nullptr);
  std::vector<double> total, shard, fwd, bwd, gath, attn_s, comm_s;
  double flops = 0, bytes = 0;
  int64_t pairs = 0;
  for (int64_t i = 0; i < s.measure.iters; ++i) {
    StepTimes t = step(nullptr);
    total.push_back(t.total);
    shard.push_back(t.shard);
    fwd.push_back(t.forward);
    bwd.push_back(t.backward);
    gath.push_back(t.gather);
    // Compute only: time blocked in the ring's exchanges waits for the slowest peer and would hide it.
    attn_s.push_back(t.attn.compute_seconds);
    comm_s.push_back(t.attn.comm_seconds);
    flops = t.attn.flops;
    bytes = static_cast<double>(t.attn.bytes_sent);
    pairs = t.attn.visible_pairs;
  }
  // Per-rank numbers, gathered to every CP rank.
  at::Tensor mine = at::tensor({median(attn_s), flops, bytes, median(comm_s), static_cast<double>(pairs)}, at::kDouble);
  at::Tensor per_rank = comm.all_gather(mine.to(device)).to(at::kCPU).view({c.cp, 5});

  if (rt.rank == 0) {
    bool all_ok = true;
    std::string first_bad;
    for (const auto& e : res.errors) {
      if (!e.ok && first_bad.empty()) first_bad = e.tensor + " " + e.worst;
      all_ok = all_ok && e.ok;
    }
    res.outcome = all_ok ? "match" : "mismatch";
    if (res.outcome == c.expect) {
      res.status = "ok";
    } else {
      res.status = "failed";
      res.reason = c.expect == "match"
                       ? "differs from the single-rank reference: " + first_bad
                       : "negative control: expected a mismatch with the reference, but every tensor matched";
    }
    const double step_s = median(total);
    const double tokens = static_cast<double>(data.real_tokens * c.dp);
    res.metrics.push_back({"tokens_per_s", step_s > 0 ? tokens / step_s : 0, "tokens/s", spread(total)});
    res.metrics.push_back({"step_time_s", step_s, "s", spread(total)});
    res.metrics.push_back({"phase_shard_s", median(shard), "s", spread(shard)});
    res.metrics.push_back({"phase_forward_s", median(fwd), "s", spread(fwd)});
    res.metrics.push_back({"phase_backward_s", median(bwd), "s", spread(bwd)});
    res.metrics.push_back({"phase_gather_s", median(gath), "s", spread(gath)});
    res.metrics.push_back({"phase_attention_comm_s", median(comm_s), "s", spread(comm_s)});
    if (cp_rank == 0) res.metrics.push_back({"reference_step_s", ref.seconds, "s", 0});
    double max_f = 0, sum_f = 0, max_t = 0, sum_t = 0, max_b = 0, max_comm = 0;
    for (int64_t r = 0; r < c.cp; ++r) {
      RankStats rs;
      rs.rank = static_cast<int>(r);
      rs.attention_s = per_rank[r][0].item<double>();
      rs.attention_flops = per_rank[r][1].item<double>();
      rs.bytes_sent = per_rank[r][2].item<double>();
      rs.comm_s = per_rank[r][3].item<double>();
      res.ranks.push_back(rs);
      max_f = std::max(max_f, rs.attention_flops);
      sum_f += rs.attention_flops;
      max_t = std::max(max_t, rs.attention_s);
      sum_t += rs.attention_s;
      max_b = std::max(max_b, rs.bytes_sent);
      max_comm = std::max(max_comm, rs.comm_s);
    }
    const double n = static_cast<double>(c.cp);
    res.metrics.push_back({"attention_flops_imbalance", sum_f > 0 ? max_f / (sum_f / n) : 1.0, "ratio", 0});
    res.metrics.push_back({"attention_time_imbalance", sum_t > 0 ? max_t / (sum_t / n) : 1.0, "ratio", 0});
    res.metrics.push_back({"bytes_sent_per_rank", max_b, "bytes", 0});
    res.metrics.push_back({"achieved_bandwidth", max_comm > 0 ? max_b / max_comm : 0, "B/s", 0});
    res.metrics.push_back({"peak_rss", static_cast<double>(peak_rss_bytes()), "bytes", 0});
    if (cuda) {
      const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
      res.metrics.push_back(
          {"peak_gpu_allocated",
           static_cast<double>(st.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak),
           "bytes", 0});
    }
    if (got.loss.defined()) res.metrics.push_back({"loss", got.loss.item<double>(), "nats", 0});
  }
  res.wall_s = seconds_since(start);
  return res;
}

}  // namespace cpbench
