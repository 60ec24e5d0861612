#include "harness/planner/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include "harness/planner/format.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan {

Calibration calibrate(const Report& report) {
  Calibration cal;
  double sum_f = 0, sum_t = 0;
  std::vector<double> rates;
  struct CommSample {
    std::shared_ptr<const Transport> transport;
    int64_t cp;
    double fwd_bytes, bwd_bytes, c_fwd, exposed;
  };
  const std::vector<std::string> known = known_transports();
  std::vector<CommSample> comm;
  for (const auto& res : report.results) {
    if (res.status != "ok" || res.ranks.empty()) continue;
    ++cal.results;
    const RankStats* slowest = nullptr;
    for (const auto& rs : res.ranks) {
      const double t = rs.attention_s;  // attention maths only (reports/result.hpp)
      if (rs.attention_flops <= 0 || t <= 0) continue;
      sum_f += rs.attention_flops;
      sum_t += t;
      rates.push_back(kStepFactor * rs.attention_flops / t);
      ++cal.rank_samples;
      if (!slowest || t > slowest->attention_s) slowest = &rs;
    }
    const auto axis = [&](const char* k) {
      const auto it = res.axes.find(k);
      return it == res.axes.end() ? std::string() : it->second;
    };
    const std::string transport = axis("transport"), cp_text = axis("cp"), dtype = axis("dtype");
    if (!slowest || slowest->bytes_sent <= 0 || cp_text.empty() || dtype.empty()) continue;
    // Results of a transport this build does not register (an older or newer report) have no formula.
    if (std::find(known.begin(), known.end(), transport) == known.end()) continue;
    // hybrid's time formula needs the case's heads to split its bytes between all-to-all and ring,
    // which reports do not record; its results inform the FLOP/s fit only.
    if (takes_ulysses(transport)) continue;
    int64_t W = 0, e = 0;
    try {
      W = std::stoll(cp_text);
      e = dtype_size(dtype);
    } catch (const std::exception&) {
      continue;
    }
    if (W < 2) continue;
    // The measured bytes split as the transport's own formula splits them: its forward share.
    const auto t = make_transport(transport);
    // A unit call whose heads every transport can split over W (q_heads = kv_heads = W).
    const CallShape unit{W, 1, W, W, 1, 1, e};
    const double total_unit = static_cast<double>(t->bytes_per_call(unit));
    const double fwd_share = static_cast<double>(t->forward_bytes_per_call(unit)) / total_unit;
    comm.push_back({t, W, slowest->bytes_sent * fwd_share, slowest->bytes_sent * (1 - fwd_share),
                    slowest->attention_s / kStepFactor, slowest->comm_s});
  }
  if (sum_t > 0) {
    cal.notes.push_back(
        "reports hold per-rank attention time and FLOPs, not per-block times: the kernel model's constants "
        "(causal penalty, row overhead, launch, merge, contention) cannot be separated, so the fit is one "
        "effective FLOP/s and the calibrated plan prices visible pairs at it (kernel model neutral)");
    cal.attention_flops = kStepFactor * sum_f / sum_t;
    double var = 0;
    for (double x : rates) var += (x - cal.attention_flops) * (x - cal.attention_flops);
    cal.flops_spread = std::sqrt(var / static_cast<double>(rates.size())) / cal.attention_flops;
  } else {
    cal.notes.push_back("no ok result with attention FLOPs and compute time; FLOP/s not fitted");
  }
  cal.comm_samples = static_cast<int64_t>(comm.size());
  double sum_e = 0;
  for (const auto& c : comm) sum_e += c.exposed;
  if (comm.empty()) {
    cal.notes.push_back("no ok result with cp > 1 and bytes sent; bandwidth not fitted");
  } else if (sum_e <= 0) {
    cal.notes.push_back("communication was fully hidden in every measured case; bandwidth not fitted");
  } else {
    // Least squares over log10(bandwidth): a grid of 0.01 decades, then golden-section refinement.
    auto sse = [&](double log_b) {
      const double b = std::pow(10.0, log_b);
      double s = 0;
      for (const auto& c : comm) {
        CallCostInputs in;
        in.cp = c.cp;
        in.c_fwd_max = c.c_fwd;
        in.fwd_bytes = c.fwd_bytes;
        in.bwd_bytes = c.bwd_bytes;
        in.bandwidth = b;
        const double d = c.transport->time_per_call(in).exposed_s - c.exposed;
        s += d * d;
      }
      return s;
    };
    double best = 3, best_v = sse(3);
    for (int i = 1; i <= 1100; ++i) {
      const double x = 3 + 0.01 * i;
      const double v = sse(x);
      if (v < best_v) {
        best = x;
        best_v = v;
      }
    }
    if (best >= 14 - 1e-9 || best <= 3 + 1e-9) {
      cal.notes.push_back(detail::concat("the exposed communication fits no bandwidth between 1e3 and 1e14 B/s (",
                                         best > 10 ? "too little exposed" : "too much exposed",
                                         "); bandwidth not fitted"));
      return cal;
    }
    double lo = best - 0.01, hi = best + 0.01;
    const double g = (std::sqrt(5.0) - 1) / 2;
    for (int i = 0; i < 60; ++i) {
      const double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
      if (sse(a) < sse(b))
        hi = b;
      else
        lo = a;
    }
    cal.bandwidth = std::pow(10.0, (lo + hi) / 2);
    const double mean_e = sum_e / static_cast<double>(comm.size());
    cal.bandwidth_rms_error = std::sqrt(sse((lo + hi) / 2) / static_cast<double>(comm.size())) / mean_e;
  }
  return cal;
}

Cluster calibrated(const Cluster& c, const Calibration& cal) {
  Cluster out = c;
  out.name = c.name + "+calibrated";
  if (cal.attention_flops > 0) {
    // The measured rate already holds every overhead the kernel model would add on top of it.
    out.attention_flops = cal.attention_flops;
    out.kernel = neutral_kernel_model();
    out.kernel.source = "calibrated: one effective FLOP/s from a report (per-block times are not in reports)";
  }
  if (cal.bandwidth > 0) out.intra_bandwidth = out.inter_bandwidth = cal.bandwidth;
  return out;
}

nlohmann::json calibration_to_json(const Calibration& c) {
  return {{"attention_flops", c.attention_flops},
          {"bandwidth", c.bandwidth},
          {"flops_spread", c.flops_spread},
          {"bandwidth_rms_error", c.bandwidth_rms_error},
          {"results", c.results},
          {"rank_samples", c.rank_samples},
          {"comm_samples", c.comm_samples},
          {"notes", c.notes}};
}

std::string calibration_to_text(const Calibration& c) {
  std::ostringstream os;
  os << "calibration from " << c.results << " ok results (" << c.rank_samples << " rank samples, " << c.comm_samples
     << " with communication):\n";
  if (c.attention_flops > 0)
    os << "  attention " << fmt(c.attention_flops) << " FLOP/s (forward-equivalent; per-rank spread "
       << pct(c.flops_spread) << ")\n";
  if (c.bandwidth > 0)
    os << "  bandwidth " << fmt(c.bandwidth) << " B/s (exposed-communication fit, relative RMS error "
       << pct(c.bandwidth_rms_error) << ")\n";
  for (const auto& n : c.notes) os << "  note: " << n << "\n";
  return os.str();
}

}  // namespace cpbench::plan
