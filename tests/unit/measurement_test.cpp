// The measurement room and the checks on its numbers: the stopping rule, the slow hook, the machine
// monitor (against a real competing process), the noise verdict, the ceilings (an impossible rate
// fails, naming both numbers), nccl-tests' bus factors, and the negative controls' registry.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <numeric>
#include <thread>

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/mixers/section_clock.hpp"
#include "harness/runner/case_metrics.hpp"
#include "harness/runner/comm_bench.hpp"
#include "harness/runner/device_peaks.hpp"
#include "harness/runner/machine_state.hpp"
#include "harness/runner/measurement.hpp"
#include "kernels/controls/control.hpp"
#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"

using namespace cpbench;

namespace {
const GroupMax kAlone = [](double v) { return v; };
}

TEST(Measurement, StopsOnNoiseAfterTheMinimumAndKeepsEverySample) {
  MeasureSpec spec;
  spec.warmup = 2;
  spec.iters = 3;
  spec.max_noise = 0.05;
  spec.max_time_s = 100;
  int64_t warm = 0, timed = 0;
  const MeasurementRecord m = measure_steps(
      spec, [&](int64_t i) { (i < 0 ? warm : timed)++; return 0.01; }, kAlone, {});
  EXPECT_EQ(warm, 2);
  EXPECT_EQ(timed, kMinSamplesForNoise) << "constant samples: quiet as soon as the rule may judge";
  EXPECT_EQ(m.step_s.size(), static_cast<size_t>(kMinSamplesForNoise));
  EXPECT_EQ(m.stopped_by, "noise");
  EXPECT_EQ(m.verdict, "quiet");
}

TEST(Measurement, NoisyStepsRunUntilTheTimeIsUpAndAreMarkedNoisy) {
  MeasureSpec spec;
  spec.iters = 2;
  spec.max_noise = 0.01;
  spec.max_time_s = 1.0;
  int64_t n = 0;
  // Alternating 0.05 / 0.15 s: the median's interval never narrows below 1%.
  const MeasurementRecord m = measure_steps(spec, [&](int64_t) { return (n++ % 2) ? 0.15 : 0.05; }, kAlone, {});
  EXPECT_EQ(m.stopped_by, "max_time");
  EXPECT_NEAR(std::accumulate(m.step_s.begin(), m.step_s.end(), 0.0), 1.0, 0.15 + 1e-9);
  EXPECT_EQ(m.verdict, "noisy");
  EXPECT_NE(m.verdict_reason.find("stayed above max_noise"), std::string::npos) << m.verdict_reason;
  spec.max_iters = 4;
  EXPECT_EQ(measure_steps(spec, [&](int64_t) { return (n++ % 2) ? 0.15 : 0.05; }, kAlone, {}).stopped_by, "max_iters");
}

TEST(Measurement, ATimedMeasurementKeepsEnoughSamplesToBeGated) {
  // Steps longer than the whole time budget: still kMinSamplesForGate samples, so two such runs can be
  // judged (5 against 5: exact Mann-Whitney p down to 0.008).
  MeasureSpec spec;
  spec.iters = 1;
  spec.max_time_s = 0.5;
  EXPECT_EQ(measure_steps(spec, [](int64_t) { return 0.7; }, kAlone, {}).step_s.size(),
            static_cast<size_t>(kMinSamplesForGate));
  spec.max_time_s = 0;  // a correctness sweep: exactly iters
  EXPECT_EQ(measure_steps(spec, [](int64_t) { return 0.7; }, kAlone, {}).step_s.size(), 1u);
}

TEST(Measurement, SamplesAreTheGroupsAndTheSlowHookLengthensEachStep) {
  MeasureSpec spec;
  spec.iters = 5;
  spec.max_time_s = 0;
  // The group's time is what the group reports, not this rank's.
  const MeasurementRecord g = measure_steps(spec, [](int64_t) { return 0.001; }, [](double v) { return v * 3; }, {});
  for (double s : g.step_s) EXPECT_DOUBLE_EQ(s, 0.003);
  MeasureHooks slow;
  slow.slowdown = 0.5;
  const MeasurementRecord m = measure_steps(
      spec,
      [](int64_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return 0.02;
      },
      kAlone, slow);
  for (double s : m.step_s) {
    EXPECT_GE(s, 0.02 * 1.5 - 1e-4);
    EXPECT_LT(s, 0.02 * 1.5 + 0.02);
  }
  EXPECT_DOUBLE_EQ(m.slowdown, 0.5);
}

TEST(MachineState, CountsACompetingProcessAndMarksTheMeasurementNoisy) {
  EXPECT_GE(usable_cores(), 1);
  EXPECT_EQ(threads_per_rank(1 << 20), 1);
  EXPECT_EQ(threads_per_rank(1), usable_cores());
  // The first rank of a CP group borrows the waiting ranks' cores for the references, never more
  // than the machine's (nor more than its group's share when several groups share the machine).
  for (int64_t local : {1, 2, 3, 4, 8, 16})
    for (int64_t cp : {1, 2, 4, 8, 16}) {
      SCOPED_TRACE(::testing::Message() << local << " local ranks, cp " << cp);
      EXPECT_LE(reference_threads(local, cp), usable_cores());
      EXPECT_GE(reference_threads(local, cp), threads_per_rank(local));
      EXPECT_EQ(reference_threads(local, cp),
                std::min(usable_cores(), threads_per_rank(local) * std::min(cp, local)));
    }
  EXPECT_EQ(reference_threads(4, 1), threads_per_rank(4)) << "dp = 4 groups of one rank: nobody waits";
  EXPECT_EQ(reference_threads(16, 16), usable_cores());
  {
    const int before = at::get_num_threads();
    {
      const ScopedIntraOpThreads t(1);
      EXPECT_EQ(at::get_num_threads(), 1);
    }
    EXPECT_EQ(at::get_num_threads(), before);
  }
  // A busy loop in its own process group: what `sha256sum /dev/zero` does to a measurement.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setpgid(0, 0);
    volatile uint64_t x = 0;
    for (;;) x = x + 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  MachineMonitor mon;
  for (int i = 0; i < 20; ++i) {
    mon.sample();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  MeasurementRecord m;
  m.machine = mon.finish();
  judge_noise(m);
  EXPECT_GE(m.machine.others_runnable_max, 1);
  EXPECT_GE(m.machine.others_runnable_mean, 0.5);
  EXPECT_EQ(m.verdict, "noisy");
  EXPECT_NE(m.verdict_reason.find("runnable threads outside this run"), std::string::npos) << m.verdict_reason;
}

TEST(Ceilings, AnImpossibleRateFailsNamingBothNumbers) {
  RunResult r;
  r.metrics = {{"attention_computed_tflops_per_s_max", 2e-3, "TFLOP/s", 0}, {"model_tflops_per_s_per_rank", 1e-3, "TFLOP/s", 0}};
  r.peak = {1e12, "probe: CPU Float GEMM, 1 thread(s)", 5e9, "probe: host memory copy", {}};
  EXPECT_EQ(impossible_rates(r), "");
  r.peak.flops = 1e6;  // measure.peak_flops: 1e6
  r.peak.flops_source = "measure.peak_flops";
  const std::string why = impossible_rates(r);
  EXPECT_NE(why.find("2e+09 FLOP/s"), std::string::npos) << why;
  EXPECT_NE(why.find("peak 1e+06 FLOP/s (measure.peak_flops)"), std::string::npos) << why;
  r.peak.flops = 1e12;
  r.collectives.push_back({"all_gather", 1 << 20, 2, 1e-5, 1e11, 5e10, 0.5});
  const std::string bw = impossible_rates(r);
  EXPECT_NE(bw.find("busbw 5e+10 B/s, above the link's nominal 5e+09 B/s"), std::string::npos) << bw;
}

TEST(Ceilings, DeviceTableAndRankPeaks) {
  ASSERT_TRUE(find_device_peak("NVIDIA H200").has_value());
  EXPECT_EQ(find_device_peak("NVIDIA H100 80GB HBM3")->name, "H100 SXM");
  EXPECT_EQ(find_device_peak("NVIDIA A100-SXM4-80GB")->name, "A100");
  EXPECT_FALSE(find_device_peak("Tesla T4").has_value());
  // A misconfigured run's 1 937 TFLOP/s on an H200 is twice its bf16 peak.
  EXPECT_LT(peak_flops(*find_device_peak("NVIDIA H200"), at::kBFloat16), 1937e12 / 1.9);
  const PeakRecord h200 = rank_peaks(at::kBFloat16, true, "NVIDIA H200", 2, false, 0);
  EXPECT_DOUBLE_EQ(h200.flops, 989.4e12 / 2);
  EXPECT_NE(h200.flops_source.find("/ 2 ranks sharing it"), std::string::npos) << h200.flops_source;
  EXPECT_EQ(h200.link_source, "probe: host memory copy") << "ranks sharing a GPU exchange over Gloo";
  EXPECT_DOUBLE_EQ(rank_peaks(at::kBFloat16, true, "NVIDIA H200", 1, true, 0).link_bandwidth, 450e9);
  EXPECT_EQ(rank_peaks(at::kFloat, true, "Tesla T4", 1, true, 0).flops, 0.0);
  const PeakRecord cpu = rank_peaks(at::kFloat, false, "", 1, false, 0);
  EXPECT_GT(cpu.flops, 1e8);
  EXPECT_GT(cpu.link_bandwidth, 1e8);
  EXPECT_EQ(rank_peaks(at::kFloat, false, "", 1, false, 123.0).flops, 123.0);
}

TEST(CommBench, BusFactorsAreNcclTestsAndCallsAreGrouped) {
  EXPECT_DOUBLE_EQ(bus_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("all_to_all", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor("sendrecv", 8), 1.0);
  EXPECT_THROW((void)bus_factor("broadcast", 2), Error);
  const comm::CallLog log = {{"sendrecv", 4096}, {"sendrecv", 4096}, {"all_reduce", 8}, {"all_gather", 65536},
                             {"sendrecv", 4096}, {"reduce_scatter", 2048}};
  const auto d = distinct_collectives(log, 2);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].collective, "all_gather");
  EXPECT_EQ(d[1].collective, "sendrecv");
  EXPECT_EQ(d[1].calls_per_step, 3);
}

TEST(Controls, RegisteredByNameAndDecorateOnlyTheRankTheyBreak) {
  EXPECT_EQ(known_controls(), (std::vector<std::string>{"local_only", "perturbed", "grad_dropped", "sink_per_step",
                                                        "sink_grad_unreduced", "dsa_buffer_order", "dsa_kl_per_rank",
                                                        "dsa_no_detach", "dsa_shared_recompute", "ssm_rank_order",
                                                        "ssm_state_dropped", "gdn_state_dropped", "kda_state_dropped"}));
  EXPECT_EQ(find_control("load_balanced"), nullptr);
  const Control* p = find_control("perturbed");
  ASSERT_NE(p, nullptr);
  const auto inner = make_transport("allgather", {});
  EXPECT_EQ(p->wrap(inner, {0, 2, at::kFloat}), inner) << "rank 0 of 2 is left alone";
  EXPECT_NE(p->wrap(inner, {1, 2, at::kFloat}), inner);
  EXPECT_EQ(p->wrap(inner, {1, 2, at::kFloat})->name(), "allgather") << "a decorator keeps the transport's name";
  // The Mamba controls plant their faults through the mixer's own context (every rank, or the last one).
  const ControlCase no_ssm{2, {}}, hidden{2, {{"mamba", "hidden_parallel"}}}, passing{2, {{"mamba", "state_passing"}}};
  const Control* rank_order = find_control("ssm_rank_order");
  EXPECT_EQ(rank_order->mixer_fault("mamba", {0, 2, at::kDouble}), "scans_rank_order");
  EXPECT_EQ(rank_order->mixer_fault("gdn", {0, 2, at::kDouble}), "") << "a fault reaches its own mixer only";
  EXPECT_FALSE(rank_order->cannot_show(no_ssm).empty());
  EXPECT_TRUE(rank_order->cannot_show(hidden).empty());
  EXPECT_FALSE(rank_order->cannot_show(passing).empty());
  EXPECT_FALSE(find_control("local_only")->cannot_show({1, {}}).empty());
  const Control* dropped = find_control("ssm_state_dropped");
  EXPECT_EQ(dropped->mixer_fault("mamba", {1, 2, at::kDouble}), "drops_incoming_state");
  EXPECT_EQ(dropped->mixer_fault("mamba", {0, 2, at::kDouble}), "") << "the last rank only";
  EXPECT_TRUE(dropped->cannot_show(passing).empty());
  EXPECT_FALSE(dropped->cannot_show(hidden).empty()) << "hidden-parallel has no incoming state to drop";
  EXPECT_FALSE(dropped->cannot_show({1, {{"mamba", "state_passing"}}}).empty());
  EXPECT_FALSE(dropped->cannot_show(no_ssm).empty());
  for (const auto& name : known_controls()) EXPECT_EQ(find_control(name)->layout(), "load_balanced") << name;
}

// A control's transport answers every question as the transport it wraps: MLA (both wires) and the
// layout, so a control on a2a / ring runs the MLA cases they run and ring_window's refusals stay.
TEST(Controls, WrappedTransportsAnswerMlaAndLayoutAsTheTransportTheyWrap) {
  const auto packed = make_layout("thd");
  for (const char* name : {"a2a", "ring", "ring_window"}) {
    const auto inner = make_transport(name, {});
    for (const char* control : {"perturbed", "grad_dropped", "local_only", "sink_per_step", "sink_grad_unreduced"}) {
      int decorated = 0;
      for (const int64_t rank : {0, 1}) {  // the rank of 2 the control breaks
        const auto wrapped = find_control(control)->wrap(inner, {rank, 2, at::kDouble});
        if (wrapped == inner) continue;
        ++decorated;
        for (const MlaWire wire : {MlaWire::expanded, MlaWire::latent})
          EXPECT_EQ(wrapped->unsupported_mla(wire), inner->unsupported_mla(wire)) << control << " on " << name;
        EXPECT_EQ(wrapped->unsupported_layout(*packed), inner->unsupported_layout(*packed)) << control << " on " << name;
      }
      EXPECT_GE(decorated, 1) << control << " decorates a rank of 2";
    }
  }
  const auto perturbed = [](const char* name) {
    return find_control("perturbed")->wrap(make_transport(name, {}), {1, 2, at::kDouble});
  };
  EXPECT_EQ(perturbed("a2a")->unsupported_mla(MlaWire::latent), "");
  EXPECT_NE(perturbed("ring_window")->unsupported_mla(MlaWire::latent), "");
  EXPECT_NE(perturbed("ring_window")->unsupported_layout(*packed), "");
}

namespace {
// Sleeps `ms` in its forward and 2 * `ms` in its backward: a section whose time is known from below.
class Sleepy : public torch::autograd::Function<Sleepy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x, int64_t ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return x * 2;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    return {g[0] * 2, at::Tensor()};
  }
};
}  // namespace

TEST(SectionClock, TimesTheSectionsForwardAndBackwardOnly) {
  SectionClock clock(at::kCPU);
  const at::Tensor x = at::ones({4}, at::kDouble).requires_grad_(true);
  const at::Tensor before = x * 3;  // outside the section
  const at::Tensor y = clock.leave(Sleepy::apply(clock.enter(before), int64_t{20}));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // outside the section
  y.sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), at::full({4}, 6.0, at::kDouble))) << "the marks are identities";
  // Forward >= 20 ms, backward >= 40 ms, and the 500 ms between them not counted (a bound far from any
  // sleep's overshoot: this checks what is counted, not how fast anything runs).
  EXPECT_GE(clock.seconds(), 0.060);
  EXPECT_LT(clock.seconds(), 0.500) << "the time between forward and backward leaked into the section";
}
