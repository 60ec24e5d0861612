#include "harness/runner/case_runner.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "harness/launcher/core_binding.hpp"
#include "harness/runner/canary.hpp"
#include "harness/runner/case_metrics.hpp"
#include "harness/runner/comm_bench.hpp"
#include "harness/runner/device_peaks.hpp"
#include "harness/runner/machine_state.hpp"
#include "harness/runner/measurement.hpp"
#include "harness/runner/reference_cache.hpp"
#include "harness/runner/reference_run.hpp"
#include "harness/runner/step_check.hpp"
#include "harness/runner/train_step.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "reports/json_report.hpp"
#include "reports/statistics.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"
#include "sharders/registry.hpp"

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
  if (!c.sliding_transport.empty()) r.axes["transport_sliding"] = c.sliding_transport;
  for (const Mixer* m : mixers_in(s.model.mixers))
    if (!m->strategy_axis().empty()) r.axes[m->strategy_axis()] = c.mixer_strategy(*m);
  return r;
}

std::string skip_reason(const ScenarioSpec& s, const CaseSpec& c, int job_world_size) {
  if (job_world_size > 0 && c.world_size() != job_world_size)
    return detail::concat("needs world size cp x dp = ", c.world_size(), ", the job has ", job_world_size);
  if (s.device == DeviceKind::cuda && !torch::cuda::is_available())
    return "device: cuda requested, but CUDA is not available here";
  if (const Control* control = case_control(c); control && c.expect == Expect::mismatch) {
    ControlCase where{c.cp, {}};
    for (const Mixer* m : mixers_in(s.model.mixers))
      if (!m->strategy_axis().empty()) where.mixer_strategies[m->name()] = c.mixer_strategy(*m);
    where.model = &s.model;
    where.key_blocks = c.cp / make_transport(c.transport, c.transport_options())->head_parallel_degree(c.cp);
    const std::string why = control->cannot_show(where);
    if (!why.empty()) return why;
  }
  auto opts = at::TensorOptions().dtype(c.dtype).device(s.device == DeviceKind::cuda ? at::kCUDA : at::kCPU);
  const std::string why = make_transport(c.transport, c.transport_options())->unsupported_reason(c.mask, opts, c.cp);
  if (!why.empty()) return c.transport + ": " + why;
  if (s.model.attention.is_mla()) {
    // MLA (model.attention.mla): the transports that move its K/V or its latent (Transport::unsupported_mla),
    // on the transport routing.
    const Control* control = case_control(c);
    const std::string layout = control ? control->layout() : c.sharder;
    if (attention_routing(layout) == AttentionRouting::sdpa_hook)
      return c.sharder + ": MLA (model.attention.mla) runs on the transport routing only (not run through the SDPA hook)";
    const std::string mla_why = make_transport(c.transport, c.transport_options())->unsupported_mla(s.model.attention.mla_wire);
    if (!mla_why.empty()) return c.transport + " (model.attention.mla_wire " + to_string(s.model.attention.mla_wire) + "): " + mla_why;
    if (!c.sliding_transport.empty()) {
      const std::string sw = make_transport(c.sliding_transport)->unsupported_mla(s.model.attention.mla_wire);
      if (!sw.empty()) return c.sliding_transport + " (sliding layers, MLA): " + sw;
    }
  }
  if (s.model.attention.dsa.enabled()) {
    // DSA (model.attention.dsa): the transports that carry it; refused here, before any rank starts, never
    // run dense.
    const Control* control = case_control(c);
    const std::string layout = control ? control->layout() : c.sharder;
    const std::string dsa_why = dsa_unsupported_reason(s.model.attention, c.transport, c.mask,
                                                       attention_routing(layout) == AttentionRouting::sdpa_hook);
    if (!dsa_why.empty()) return dsa_why;
  }
  if (s.model.attention.has_sliding()) {
    // The sliding_attention layers: their transport, their mask, the layout it must read.
    const Control* control = case_control(c);
    const std::string layout = control ? control->layout() : c.sharder;
    if (attention_routing(layout) == AttentionRouting::sdpa_hook)
      return c.sharder + ": the SDPA hook carries one attention for every layer; sliding_attention layers "
                         "(model.attention.layer_types) need the transport routing";
    const auto t = c.sliding_transport.empty() ? make_transport(c.transport, c.transport_options())
                                               : make_transport(c.sliding_transport);
    std::string sliding_why = t->unsupported_reason(c.sliding_mask, opts, c.cp);
    if (sliding_why.empty()) sliding_why = t->unsupported_layout(*make_layout(layout));
    if (!sliding_why.empty()) return c.transport_of_sliding() + " (sliding layers): " + sliding_why;
  }
  return "";
}

namespace {

// This rank's per-step samples of the timed steps (the measurement keeps the group's step times).
struct RankSamples {
  std::vector<double> step, shard, forward, backward, compute, wait, transfer, mixer, cpu;
  AttentionStats last;  // the work of a step (the same every step)
  std::map<char, int64_t> mixer_bytes;
  std::vector<RankTimeline> timelines;  // one per timed step
};

RankSummary summarize(const RankSamples& s) {
  RankSummary r;
  r.step_s = stats::median(s.step);
  r.attention_compute_s = stats::median(s.compute);
  r.attention_wait_s = stats::median(s.wait);
  r.transfer_s = stats::median(s.transfer);
  r.mixer_s = stats::median(s.mixer);
  r.flops_visible = s.last.flops;
  r.flops_computed = s.last.flops_computed;
  r.bytes = static_cast<double>(s.last.bytes_sent);
  for (const auto& [letter, bytes] : s.mixer_bytes) r.mixer_bytes[letter] = static_cast<double>(bytes);
  r.shard_s = stats::median(s.shard);
  r.forward_s = stats::median(s.forward);
  r.backward_s = stats::median(s.backward);
  r.kernel_blocks = s.last.kernel_blocks;
  r.cpu_s = stats::median(s.cpu);
  return r;
}

// A checked step: the training step, then (outside it) what the reference check compares.
Outputs checked_step(CaseContext& x, AttentionStats& stats) {
  StepState kept;
  (void)run_step(x, stats, nullptr, &kept);
  return gather_outputs(x, kept);
}

// The ranks sharing this rank's GPU (1 on the CPU and with a GPU per rank).
int64_t ranks_per_gpu(const CaseContext& x, const RankRuntime& rt) {
  if (!x.cuda || !x.shared_gpu) return 1;
  const int64_t gpus = std::max<int64_t>(1, torch::cuda::device_count());
  return (rt.local_world_size + gpus - 1) / gpus;
}

}  // namespace

std::string reference_key(int64_t case_index, int64_t dp_index, const char* what) {
  return detail::concat("reference/case", case_index, "/dp", dp_index, "/", what);
}

void signal_reference(RankRuntime& rt, const CaseSpec& c, int64_t dp_index, const char* what, const std::string& value) {
  rt.store->set(reference_key(c.index, dp_index, what), std::vector<uint8_t>(value.begin(), value.end()));
}

void wait_for_reference(RankRuntime& rt, const ScenarioSpec& s, const CaseSpec& c, int64_t dp_index, int64_t cp_rank) {
  // Two waits: that cp-rank 0 reached its references within timeout_s (a rank that died or hung before
  // them fails the case as fast as a collective would), then that it finished them within
  // reference_timeout_s. Only then does this rank enqueue the step's first collective, whose own
  // timeout (and NCCL's watchdog, which times a collective from its enqueue) is timeout_s.
  const auto wait = [&](const char* what, int64_t seconds, const char* key_name) {
    const std::string key = reference_key(c.index, dp_index, what);
    try {
      rt.store->wait({key}, std::chrono::milliseconds(seconds * 1000));
    } catch (const std::exception& e) {
      throw Error(detail::concat(c.name(), ": cp-rank ", cp_rank, " (rank ", rt.rank, ") waited ", seconds, " s (",
                                 key_name, ") for cp-rank 0 to ",
                                 std::string(what) == kReferenceStarted ? "start" : "finish",
                                 " its single-rank references: it died, hung, or needs a larger ", key_name));
    }
    return rt.store->get(key);
  };
  (void)wait(kReferenceStarted, s.timeout_s, "timeout_s");
  const std::vector<uint8_t> done = wait(kReferenceDone, s.reference_timeout_s, "reference_timeout_s");
  const std::string status(done.begin(), done.end());
  CP_CHECK(status == "ok", c.name(), ": cp-rank 0's single-rank references ", status, " (seen on cp-rank ", cp_rank,
           ", rank ", rt.rank, ")");
}

RunResult run_case(const ScenarioSpec& s, const CaseSpec& c, RankRuntime& rt) {
  const auto start = std::chrono::steady_clock::now();
  ScopedRankContext rank_context(rt.rank, rt.world_size);
  RunResult res = result_skeleton(s, c);
  CP_CHECK(c.world_size() == rt.world_size, c.name(), ": needs world size ", c.world_size(), ", the job has ",
           rt.world_size);
  CaseContext x(s, c);
  setup_case(x, rt);
  res.axes["backend"] = comm::to_string(x.cp_pg->kind());
  if (x.shared_gpu) res.axes["shared_gpu"] = "true";

  std::shared_ptr<const References> kept;  // cp-rank 0: this case's references, computed or reused
  bool reused = false;
  if (x.cp_rank == 0) {
    if (c.cp > 1) signal_reference(rt, c, x.dp_index, kReferenceStarted, "1");
    try {
      const auto compute = [&] {
        // The group's other ranks only wait for this rank's reference: it may use their cores meanwhile.
        const ScopedIntraOpThreads threads(reference_threads(rt.local_world_size, c.cp));
        return run_references(x);
      };
      // One range per case, computed or reused (docs/timeline.md: a reused reference's is short).
      const nvtx::Range range{x.nvtx, "reference"};
      if (rt.references)
        kept = rt.references->get(s, reference_problem_key(s, c, x.dp_index, x.device), x.cuda, compute, reused);
      else
        kept = std::make_shared<const References>(compute());
      if (c.index == rt.slowref_case && rt.rank == rt.slowref_rank)
        std::this_thread::sleep_for(std::chrono::duration<double>(rt.slowref_s));
    } catch (const std::exception& e) {
      // The others stop waiting at once, naming why, instead of after reference_timeout_s.
      if (c.cp > 1) signal_reference(rt, c, x.dp_index, kReferenceDone, std::string("failed: ") + e.what());
      throw;
    }
    if (c.cp > 1) signal_reference(rt, c, x.dp_index, kReferenceDone, "ok");
  } else {
    wait_for_reference(rt, s, c, x.dp_index, x.cp_rank);
  }
  const References none;  // the other cp-ranks check nothing against a reference
  const References& ref = kept ? *kept : none;
  if (x.cuda) c10::cuda::CUDACachingAllocator::resetPeakStats(x.device.index());

  // The first step and the one after the timed steps are checked: state that leaks across steps (a
  // hook left installed, a cached plan or index map reused with stale metadata) fails the second. The
  // first also records which collectives a step issues, for the communication measurement.
  AttentionStats stats;
  auto call_log = std::make_shared<comm::CallLog>();
  x.comm.set_call_log(call_log);
  const Outputs got = checked_step(x, stats);
  x.comm.set_call_log(nullptr);
  const std::vector<TensorError> first = check_outputs(x, got, ref, "first");

  RankSamples samples;
  // CPBENCH_FAULT=work on this case and rank: each timed step spins until this process's CPU clock
  // advanced by that fraction of the step's own CPU seconds (inside the step, as the slow hook sleeps).
  const double spin = rt.slow_spins && c.index == rt.slow_case && rt.rank == rt.slow_rank ? rt.slow_fraction : 0.0;
  const TimedStep step = [&](int64_t i) {
    if (i < 0) return run_step(x, stats).total;
    RankTimeline& trace = samples.timelines.emplace_back();
    trace.rank = x.cp_rank;
    const double cpu0 = process_cpu_seconds();
    StepTimes t = run_step(x, stats, &trace);
    if (spin > 0) {
      const auto w0 = std::chrono::steady_clock::now();
      const double until = process_cpu_seconds() + spin * (process_cpu_seconds() - cpu0);
      volatile double sink = 0;
      while (process_cpu_seconds() < until)
        for (int k = 0; k < 4096; ++k) sink = sink + k * 0.5;
      t.total += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    }
    if (!x.cuda) samples.cpu.push_back(process_cpu_seconds() - cpu0);
    samples.step.push_back(t.total);
    samples.shard.push_back(t.shard);
    samples.forward.push_back(t.forward);
    samples.backward.push_back(t.backward);
    // Compute and waits apart: time blocked in the ring's exchanges waits for the slowest peer.
    samples.compute.push_back(t.attn.compute_seconds);
    samples.wait.push_back(t.attn.comm_seconds);
    samples.transfer.push_back(t.attn.transfer_seconds);
    samples.mixer.push_back(t.mixer_s);
    samples.last = t.attn;
    samples.mixer_bytes = t.mixer_bytes;
    return t.total;
  };
  const GroupMax group_max = [&](double v) {
    at::Tensor t = at::tensor({v}, at::kDouble).to(x.device);
    x.comm.all_reduce_max(t);
    return t.to(at::kCPU).item<double>();
  };
  MeasureHooks hooks;
  hooks.slowdown = !rt.slow_spins && c.index == rt.slow_case && rt.rank == rt.slow_rank ? rt.slow_fraction : 0.0;
  hooks.monitor = rt.rank == 0;
  MeasurementRecord m;
  {
    // Each rank on its own share of the cores while it is timed (why: core_binding.hpp); the
    // references and checks before ran on every core.
    const ThreadBinding bound(rt.timed_cpus);
    m = measure_steps(s.measure, step, group_max, hooks);
    if (bound.bound()) m.rank_cpus = cpu_list_text(bound.cpus());
    m.canary = read_canary();  // every rank at once, as the steps ran: the machine the case saw
  }
  if (!x.cuda) {
    // Per step, the CP group's CPU seconds: every rank's, summed (one all-gather, outside the steps).
    const at::Tensor mine = at::tensor(samples.cpu, at::kDouble);
    const at::Tensor all = x.comm.all_gather(mine).view({c.cp, mine.numel()}).sum(0).contiguous();
    m.cpu_s.assign(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
  }
  m.threads_per_rank = at::get_num_threads();
  m.omp_wait_policy = omp_wait_policy();
  if (c.index == rt.slow_case) m.slowdown = rt.slow_fraction;

  const Outputs last = checked_step(x, stats);
  res.errors = worse_of(first, check_outputs(x, last, ref, "last"));

  // The step's collectives alone, nccl-tests style, then the ceilings the rates are checked against.
  if (c.cp > 1 && s.measure.collectives) {
    res.collectives = distinct_collectives(*call_log, 4);
    measure_collectives(x.comm, x.comm.device().value_or(at::Device(at::kCPU)), res.collectives);
  }
  const std::string gpu = x.cuda ? std::string(at::cuda::getDeviceProperties(x.device.index())->name) : "";
  const double gpu_memory =
      x.cuda ? static_cast<double>(at::cuda::getDeviceProperties(x.device.index())->totalGlobalMem) : 0.0;
  const auto peaks = [&](bool again) {
    return rank_peaks(c.dtype, x.cuda, gpu, ranks_per_gpu(x, rt), x.cp_pg->kind() == comm::BackendKind::nccl,
                      s.measure.peak_flops, again, gpu_memory);
  };
  res.peak = peaks(false);

  const std::vector<RankSummary> ranks = gather_rank_summaries(x, summarize(samples));
  if (rt.rank == 0) {
    res.measurement = m;
    record_outcome(c, res);
    record_metrics(x, m, ranks, got, reused ? 0.0 : ref.seconds, res);
    std::string why = impossible_rates(res);
    if (!why.empty() && !x.cuda && s.measure.peak_flops == 0) {
      // A CPU probe that ran while the machine was busy reads low: measure it again before calling a
      // rate impossible (the larger reading stands).
      res.peak = peaks(true);
      res.metrics.clear();
      res.ranks.clear();
      record_metrics(x, m, ranks, got, reused ? 0.0 : ref.seconds, res);
      why = impossible_rates(res);
    }
    if (kept) res.reference = reused ? "reused" : "computed";
    res.warnings = rate_warnings(res);
    const std::string routes = route_mismatch(c, res);
    if (!routes.empty()) why += (why.empty() ? "" : "; ") + routes;
    if (!why.empty()) {
      // A case the reference check already failed keeps its reason first.
      res.reason = res.status == "failed" && !res.reason.empty() ? res.reason + "; " + why : why;
      res.status = "failed";
    }
  }

  // The timeline shown is the step whose group time is the median (the lower one for an even count):
  // every rank holds the same samples, so every rank keeps the same step.
  std::vector<size_t> order(m.step_s.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return m.step_s[a] < m.step_s[b]; });
  const RankTimeline median_step = samples.timelines.at(order[(order.size() - 1) / 2]);
  // The first data-parallel replica's CP ranks send theirs to global rank 0 through the store.
  const std::string key = detail::concat("timeline/case", c.index, "/rank");
  if (x.dp_index == 0 && x.cp_rank != 0) {
    const std::string bytes = to_json(median_step).dump();
    rt.store->set(key + std::to_string(x.cp_rank), std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  if (rt.rank == 0) {
    res.timeline.clock = x.cuda ? "steady+cuda_events" : "steady";
    res.timeline.ranks.push_back(median_step);
    for (int64_t r = 1; r < c.cp; ++r) {
      const std::vector<uint8_t> bytes = rt.store->get(key + std::to_string(r));
      res.timeline.ranks.push_back(rank_timeline_from_json(nlohmann::json::parse(bytes.begin(), bytes.end())));
    }
  }
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace cpbench
