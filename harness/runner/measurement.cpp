#include "harness/runner/measurement.hpp"

#include <time.h>

#include <chrono>
#include <optional>
#include <thread>

#include "harness/runner/machine_state.hpp"
#include "reports/statistics.hpp"

namespace cpbench {

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

MeasurementRecord measure_steps(const MeasureSpec& spec, const TimedStep& step, const GroupMax& group_max,
                                const MeasureHooks& hooks) {
  MeasurementRecord m;
  m.warmup = spec.warmup;
  m.min_iters = spec.iters;
  m.max_noise = spec.max_noise;
  m.max_time_s = spec.max_time_s;
  m.slowdown = hooks.slowdown;
  for (int64_t i = 0; i < spec.warmup; ++i) (void)step(-1);
  std::optional<MachineMonitor> monitor;
  if (hooks.monitor) {
    monitor.emplace();
    monitor->sample();
  }
  double elapsed = 0;
  for (int64_t i = 0;; ++i) {
    double s = step(i);
    if (hooks.slowdown > 0) {
      // Inside this rank's step as far as every clock is concerned: the next step starts with a barrier.
      const auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(s * hooks.slowdown));
      s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const double g = group_max(s);
    m.step_s.push_back(g);
    elapsed += g;
    if (monitor) monitor->sample();
    const auto n = static_cast<int64_t>(m.step_s.size());
    m.noise = stats::median_noise(m.step_s);
    if (n >= spec.max_iters) {
      m.stopped_by = "max_iters";
      break;
    }
    if (n < spec.iters) continue;
    if (n >= kMinSamplesForNoise && m.noise <= spec.max_noise) {
      m.stopped_by = "noise";
      break;
    }
    if (elapsed >= spec.max_time_s && (spec.max_time_s == 0 || n >= kMinSamplesForGate)) {
      m.stopped_by = "max_time";
      break;
    }
  }
  if (monitor) m.machine = monitor->finish();
  judge_noise(m);
  return m;
}

}  // namespace cpbench
