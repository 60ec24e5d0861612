#include "harness/runner/case_metrics.hpp"

#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <set>
#include <fstream>
#include <sstream>

#include "kernels/attention/fused_attention.hpp"
#include "reports/statistics.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {
namespace {

// The gathered summary: 12 timings / counts, the CPU seconds, 1 spare, then one block count per kernel route.
constexpr int kTimedFields = 13;

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

std::string sci(double v) {
  std::ostringstream os;
  os.precision(3);
  os << v;
  return os.str();
}

}  // namespace

std::vector<RankSummary> gather_rank_summaries(const CaseContext& x, const RankSummary& s) {
  std::vector<double> fields = {s.step_s, s.attention_compute_s, s.attention_wait_s, s.transfer_s, s.mixer_s,
                                s.flops_visible, s.flops_computed, s.bytes, s.shard_s, s.forward_s,
                                s.backward_s, s.cpu_s, 0.0};
  for (const auto route : kernels::kKernelRoutes) {
    const auto it = s.kernel_blocks.find(kernels::to_string(route));
    fields.push_back(it == s.kernel_blocks.end() ? 0.0 : static_cast<double>(it->second));
  }
  for (const auto& m : mixers()) {  // one field per registered mixer, registry order
    const auto it = s.mixer_bytes.find(m->letter());
    fields.push_back(it == s.mixer_bytes.end() ? 0.0 : it->second);
  }
  const int kSummaryFields = kTimedFields + static_cast<int>(kernels::kKernelRoutes.size() + mixers().size());
  CP_CHECK(static_cast<int>(fields.size()) == kSummaryFields, "gather_rank_summaries: ", fields.size(), " fields, not ",
           kSummaryFields);
  const at::Tensor mine = at::tensor(fields, at::kDouble);
  const at::Tensor all = x.comm.all_gather(mine.to(x.device)).to(at::kCPU).view({x.c.cp, kSummaryFields}).contiguous();
  std::vector<RankSummary> out;
  const double* p = all.data_ptr<double>();
  for (int64_t r = 0; r < x.c.cp; ++r, p += kSummaryFields) {
    RankSummary o{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], {}, p[11], {}};
    const size_t routes = kernels::kKernelRoutes.size();
    for (size_t i = 0; i < routes; ++i)
      if (const double n = p[kTimedFields + i]; n > 0) o.kernel_blocks[kernels::to_string(kernels::kKernelRoutes[i])] = static_cast<int64_t>(n);
    for (size_t i = 0; i < mixers().size(); ++i)
      if (const double n = p[kTimedFields + routes + i]; n > 0) o.mixer_bytes[mixers()[i]->letter()] = n;
    out.push_back(std::move(o));
  }
  return out;
}

double flops_utilization(double flops, double seconds, int64_t ranks, double peak_per_rank) {
  if (seconds <= 0 || ranks < 1 || peak_per_rank <= 0) return 0;
  return flops / seconds / (static_cast<double>(ranks) * peak_per_rank);
}

double model_matmul_params(const CaseContext& x) {
  double n = 0;
  for (const auto& [name, p] : x.params)
    if (p.dim() >= 2 && name.rfind("embed", 0) != 0) n += static_cast<double>(p.numel());
  return n;
}

double mixer_train_flops(const CaseContext& x, double tokens) {
  const ModelConfig& m = x.s.model;
  double flops = 0;
  for (const Mixer* mixer : mixers_in(m.mixers))
    flops += mixer->train_flops_per_token(m, x.s.batch.seq_len) * tokens *
             static_cast<double>(count_layers(m.mixers, m.layers, mixer->letter()));
  return flops;
}

std::string route_mismatch(const CaseSpec& c, const RunResult& res) {
  if (c.routes.empty()) return "";
  std::map<std::string, int64_t> ran;
  for (const RankStats& r : res.ranks)
    for (const auto& [route, n] : r.kernel_blocks)
      if (route != kernels::to_string(kernels::KernelRoute::skipped)) ran[route] += n;
  const std::set<std::string> want(c.routes.begin(), c.routes.end());
  std::set<std::string> got;
  for (const auto& [route, n] : ran) got.insert(route);
  if (got == want) return "";
  std::string ran_text, want_text;
  for (const auto& [route, n] : ran) ran_text += (ran_text.empty() ? "" : ", ") + route + " " + std::to_string(n);
  for (const auto& route : want) want_text += (want_text.empty() ? "" : ", ") + route;
  return "kernel routes: the attention blocks ran on {" + ran_text + "} (blocks per step, all ranks); the scenario's "
         "routes key expects exactly [" + want_text + "]";
}

void record_outcome(const CaseSpec& c, RunResult& res) {
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
}

void record_metrics(const CaseContext& x, const MeasurementRecord& m, const std::vector<RankSummary>& ranks,
                    const Outputs& got, double reference_s, RunResult& res) {
  const CaseSpec& c = x.c;
  const auto add = [&](const std::string& name, double v, const char* unit, double spread = 0) {
    res.metrics.push_back({name, v, unit, spread});
  };
  const double step_s = stats::median(m.step_s);
  const double spread = stats::range_spread(m.step_s);
  // tokens and model_flops are one replica's (this CP group's batch, every replica's is as large);
  // the rates count every replica, as a job's throughput does: at dp = 2 tokens_per_s is 2 x
  // tokens_per_step / step_s.
  const double tokens = static_cast<double>(x.data.real_tokens);
  const double replicas = static_cast<double>(c.dp);
  add("tokens_per_step", tokens, "tokens");
  add("tokens_per_s", step_s > 0 ? tokens * replicas / step_s : 0, "tokens/s", spread);
  add("step_s", step_s, "s", spread);
  add("step_noise", m.noise, "fraction");
  // CPU ranks: the CP group's CPU seconds per step (docs/measurement.md); CUDA keeps device time.
  if (!m.cpu_s.empty()) add("cpu_s", stats::median(m.cpu_s), "s", stats::range_spread(m.cpu_s));

  // The step's parts, on the slowest rank of each (per rank in `ranks` below).
  double attention_s = 0, attention_compute_s = 0, mixer_s = 0, max_f = 0, sum_f = 0, max_t = 0, sum_t = 0, max_b = 0,
         max_transfer = 0, sum_visible = 0, sum_computed = 0, rate_of_slowest = 0, max_computed_rate = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankSummary& s = ranks[r];
    RankStats rs;
    rs.rank = static_cast<int>(r);
    rs.attention_s = s.attention_compute_s;
    rs.attention_flops = s.flops_visible;
    rs.attention_flops_computed = s.flops_computed;
    rs.bytes_sent = s.bytes;
    rs.comm_s = s.attention_wait_s;
    rs.transfer_s = s.transfer_s;
    rs.step_s = s.step_s;
    rs.ssm_s = s.mixer_s;
    rs.cpu_s = s.cpu_s;
    rs.kernel_blocks = s.kernel_blocks;
    res.ranks.push_back(rs);
    const double visible_train = kStepFactor * s.flops_visible, computed_train = kStepFactor * s.flops_computed;
    if (s.attention_s() >= attention_s) {
      attention_s = s.attention_s();
      rate_of_slowest = attention_s > 0 ? visible_train / attention_s : 0;
    }
    attention_compute_s = std::max(attention_compute_s, s.attention_compute_s);
    if (s.attention_compute_s > 0) max_computed_rate = std::max(max_computed_rate, computed_train / s.attention_compute_s);
    mixer_s = std::max(mixer_s, s.mixer_s);
    max_f = std::max(max_f, s.flops_visible);
    sum_f += s.flops_visible;
    max_t = std::max(max_t, s.attention_compute_s);
    sum_t += s.attention_compute_s;
    max_b = std::max(max_b, s.bytes);
    max_transfer = std::max(max_transfer, s.transfer_s);
    sum_visible += visible_train;
    sum_computed += computed_train;
  }
  add("attention_s", attention_s, "s");
  add("attention_compute_s", attention_compute_s, "s");
  if (x.s.model.has_recurrent()) add("ssm_s", mixer_s, "s");  // the recurrent mixers' sections
  add("other_s", std::max(0.0, step_s - attention_s - mixer_s), "s");
  const RankSummary& r0 = ranks.front();
  add("phase_shard_s", r0.shard_s, "s");
  add("phase_forward_s", r0.forward_s, "s");
  add("phase_backward_s", r0.backward_s, "s");
  // Exposed: the time the compute waited for communication; transfer: the time it was in flight.
  add("attention_exposed_comm_s", r0.attention_wait_s, "s");
  add("attention_transfer_s", r0.transfer_s, "s");
  if (x.cp_rank == 0) add("reference_step_s", reference_s, "s");

  // Work and rate.
  const double n = static_cast<double>(c.cp);
  add("attention_flops_visible", sum_visible / n, "flop");  // per rank and training step (mean)
  add("attention_flops_computed", sum_computed / n, "flop");
  add("attention_kernel_efficiency", sum_computed > 0 ? sum_visible / sum_computed : 1.0, "ratio");
  add("attention_tflops_per_s", rate_of_slowest / 1e12, "TFLOP/s");
  add("attention_computed_tflops_per_s_max", max_computed_rate / 1e12, "TFLOP/s");
  const double model_flops = 6.0 * model_matmul_params(x) * tokens + sum_visible + mixer_train_flops(x, tokens);
  const double model_rate = step_s > 0 ? model_flops * replicas / step_s : 0;  // every replica's
  add("model_flops", model_flops, "flop");
  add("model_tflops_per_s", model_rate / 1e12, "TFLOP/s");
  add("model_tflops_per_s_per_rank", model_rate / (n * replicas) / 1e12, "TFLOP/s");
  if (res.peak.flops > 0)
    add("mfu", flops_utilization(model_flops * replicas, step_s, c.cp * c.dp, res.peak.flops), "ratio");
  if (res.peak.flops > 0)
    add("attention_mfu", flops_utilization(sum_visible, attention_s, c.cp, res.peak.flops), "ratio");
  for (const auto& cb : res.collectives)
    if (res.peak.link_bandwidth > 0)
      add("busbw_vs_nominal:" + cb.collective + ":" + std::to_string(cb.bytes), cb.busbw / res.peak.link_bandwidth,
          "ratio");

  add("attention_flops_imbalance", sum_f > 0 ? max_f / (sum_f / n) : 1.0, "ratio");
  add("attention_time_imbalance", sum_t > 0 ? max_t / (sum_t / n) : 1.0, "ratio");
  add("bytes_sent_per_rank", max_b, "bytes");
  // Bytes over the time they were in flight, overlapped or not: the transport's effective transfer rate
  // inside the step (not a link bandwidth: the collectives measured alone give algbw / busbw).
  add("attention_transfer_rate", max_transfer > 0 ? max_b / max_transfer : 0, "B/s");
  // What rank 0's mixer collectives sent per step, forward and backward, for each mixer that reports it
  // (every rank sends the same; each step checks it against the mixer's formula, train_step.cpp).
  for (const Mixer* mixer : mixers_in(x.s.model.mixers))
    if (!mixer->bytes_metric().empty()) {
      const auto it = r0.mixer_bytes.find(mixer->letter());
      add(mixer->bytes_metric(), it == r0.mixer_bytes.end() ? 0.0 : it->second, "bytes");
    }
  add("peak_rss", static_cast<double>(peak_rss_bytes()), "bytes");
  if (x.cuda) {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(x.device.index());
    add("peak_gpu_allocated",
        static_cast<double>(st.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak),
        "bytes");
  }
  if (got.loss.defined()) add("loss", got.loss.item<double>(), "nats");
}

namespace {
// Collectives whose busbw may exceed the link's per-direction rate on a correct run: NCCL's NVLS
// (NVSwitch in-switch reduction) sends each rank's data once and reduces it in the switch, so an
// all-reduce's busbw (nccl-tests' factor 2 (n-1)/n) reaches up to twice the per-direction link rate,
// and a reduce-scatter's can pass it. Above the link: a warning; above kInSwitchFactor x the link:
// impossible still.
bool in_switch_reducible(const std::string& collective) {
  return collective == "all_reduce" || collective == "reduce_scatter";
}
constexpr double kInSwitchFactor = 2.0;
}  // namespace

double attention_ceiling(const RunResult& res) {
  // The fastest route the ranks' blocks ran on bounds the rank's attention rate (its time is spent on
  // those routes only); ranks without route counts or a peak without per-route ceilings: `flops`.
  double ceiling = 0;
  for (const auto& rank : res.ranks)
    for (const auto& [route, blocks] : rank.kernel_blocks) {
      if (blocks <= 0 || route == "skipped") continue;
      const auto it = res.peak.route_flops.find(route);
      ceiling = std::max(ceiling, it == res.peak.route_flops.end() ? res.peak.flops : it->second);
    }
  return ceiling > 0 ? ceiling : res.peak.flops;
}

std::string impossible_rates(const RunResult& res) {
  const auto value = [&](const char* name) {
    const Metric* m = res.metric(name);
    return m ? m->value : 0.0;
  };
  if (res.peak.flops > 0) {
    const double attn = value("attention_computed_tflops_per_s_max") * 1e12;
    const double attn_peak = attention_ceiling(res);
    const std::string routes = attn_peak != res.peak.flops ? ", the fastest route its blocks ran on" : "";
    if (attn > attn_peak)
      return "impossible rate: attention computed " + sci(attn) + " FLOP/s on one rank, above the peak " +
             sci(attn_peak) + " FLOP/s (" + res.peak.flops_source + routes + "): the run measured something else";
    // The model's matrix products run at `flops`, its attention at up to the routes' ceiling.
    const double model = value("model_tflops_per_s_per_rank") * 1e12;
    const double model_peak = std::max(res.peak.flops, attn_peak);
    if (model > model_peak)
      return "impossible rate: model " + sci(model) + " FLOP/s per rank, above the peak " + sci(model_peak) +
             " FLOP/s (" + res.peak.flops_source + "): the run measured something else";
  }
  if (res.peak.link_bandwidth > 0)
    for (const auto& cb : res.collectives) {
      const double limit = res.peak.link_bandwidth * (in_switch_reducible(cb.collective) ? kInSwitchFactor : 1.0);
      if (cb.busbw > limit)
        return "impossible bandwidth: " + cb.collective + " of " + std::to_string(cb.bytes) + " B at busbw " +
               sci(cb.busbw) + " B/s, above " + (limit > res.peak.link_bandwidth ? "twice " : "") +
               "the link's nominal " + sci(res.peak.link_bandwidth) + " B/s (" + res.peak.link_source +
               "): the run measured something else";
    }
  return "";
}

std::vector<std::string> rate_warnings(const RunResult& res) {
  std::vector<std::string> out;
  if (res.peak.link_bandwidth > 0)
    for (const auto& cb : res.collectives)
      if (in_switch_reducible(cb.collective) && cb.busbw > res.peak.link_bandwidth &&
          cb.busbw <= kInSwitchFactor * res.peak.link_bandwidth)
        out.push_back(cb.collective + " of " + std::to_string(cb.bytes) + " B at busbw " + sci(cb.busbw) +
                      " B/s, above the link's per-direction " + sci(res.peak.link_bandwidth) + " B/s (" +
                      res.peak.link_source + "): possible only with in-switch reduction (NCCL NVLS on NVSwitch)");
  return out;
}

}  // namespace cpbench
