#include "harness/planner/recommendation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include "harness/planner/format.hpp"

namespace cpbench::plan {

namespace {

// "sharder/transport", and "/ssm_strategy" for a model with SSM layers: what a recommendation names.
std::string label(const PlanCase& c) {
  return c.sharder + "/" + c.transport + (c.ssm.strategy.empty() ? "" : "/" + c.ssm.strategy);
}

// Why `b` ranks above `u`: which part of the step makes the difference.
std::string versus(const PlanCase& b, const PlanCase& u) {
  const double gap = u.predicted_step_s / b.predicted_step_s - 1;
  std::string s = label(u) + " ";
  if (b.fits_memory && !u.fits_memory)
    return s + "does not fit in device memory (" + fmt_bytes(static_cast<double>(u.peak_activation_bytes)) + ")";
  if (gap < 0.01) {
    s += "is within 1% (" + fmt_time(u.predicted_step_s) + ")";
    if (u.max_segments > b.max_segments)
      return s + " but cuts a rank's tokens into " + std::to_string(u.max_segments) + " segments vs " +
             std::to_string(b.max_segments) + " (smaller, less efficient kernel calls; not in the time model)";
    if (u.peak_activation_bytes > b.peak_activation_bytes)
      return s + " but needs more activation memory (" + fmt_bytes(static_cast<double>(u.peak_activation_bytes)) +
             " vs " + fmt_bytes(static_cast<double>(b.peak_activation_bytes)) + ")";
    return s + "; the simpler layout is preferred";
  }
  s += "is " + pct(gap) + " slower: ";
  if (u.ssm.strategy != b.ssm.strategy && u.sharder == b.sharder && u.transport == b.transport)
    return s + "its " + u.ssm.mixer + " layers (" + u.ssm.strategy + ") take " + fmt_time(u.ssm.step_s) + " vs " +
           fmt_time(b.ssm.step_s) + " (" + fmt_time(u.ssm.comm_s) + " vs " + fmt_time(b.ssm.comm_s) +
           " of communication, " + fmt_bytes(static_cast<double>(u.ssm.bytes_per_rank)) + " vs " +
           fmt_bytes(static_cast<double>(b.ssm.bytes_per_rank)) + " sent per rank)";
  const double d_compute = u.compute_s - b.compute_s, d_exposed = u.exposed_comm_s - b.exposed_comm_s;
  if (d_compute >= d_exposed)
    return s + "its slowest rank computes " + fmt_time(u.compute_s) + " vs " + fmt_time(b.compute_s) + " (imbalance " +
           fmt_fixed(u.imbalance, 3) + " vs " + fmt_fixed(b.imbalance, 3) +
           (u.padded_seq_len > b.padded_seq_len ? ", padding to " + std::to_string(u.padded_seq_len) + " tokens" : "") +
           ")";
  return s + "it exposes " + fmt_time(u.exposed_comm_s) + " of communication vs " + fmt_time(b.exposed_comm_s);
}

}  // namespace

void rank_and_recommend(Plan& plan) {
  const auto& req = plan.request;
  auto order_of = [&](const PlanCase& c) {
    const auto it = std::find(req.sharders.begin(), req.sharders.end(), c.sharder);
    const auto jt = std::find(req.transports.begin(), req.transports.end(), c.transport);
    const auto kt = std::find(req.ssm_strategies.begin(), req.ssm_strategies.end(), c.ssm.strategy);
    return std::tuple(it - req.sharders.begin(), jt - req.transports.begin(), kt - req.ssm_strategies.begin());
  };
  std::map<std::string, std::vector<double>> rel;  // label -> step / best step, per cp
  for (int64_t W : req.cps) {
    std::vector<PlanCase*> ok;
    for (auto& c : plan.cases)
      if (c.cp == W) ok.push_back(&c);
    if (ok.empty()) continue;
    // Cases that fit first; then step time in 1% buckets (so near-ties fall to fragmentation, which
    // the time model does not price, then to memory, then to request order), which keeps the
    // ordering a strict weak order.
    bool any_fits = false;
    for (auto* c : ok) any_fits |= c->fits_memory;
    double best = std::numeric_limits<double>::infinity();
    for (auto* c : ok)
      if (c->fits_memory || !any_fits) best = std::min(best, c->predicted_step_s);
    auto key = [&](const PlanCase* c) {
      const auto bucket = static_cast<int64_t>(std::floor((c->predicted_step_s / best - 1) * 100 + 1e-9));
      return std::tuple(!(c->fits_memory || !any_fits), bucket, c->max_segments, c->peak_activation_bytes,
                        order_of(*c));
    };
    std::stable_sort(ok.begin(), ok.end(), [&](const PlanCase* a, const PlanCase* b) { return key(a) < key(b); });
    CpRecommendation cr;
    cr.cp = W;
    for (size_t i = 0; i < ok.size(); ++i) {
      ok[i]->rank = static_cast<int>(i + 1);
      cr.ranking.push_back(label(*ok[i]));
      rel[label(*ok[i])].push_back(ok[i]->predicted_step_s / best);
    }
    const PlanCase& b = *ok[0];
    cr.sharder = b.sharder;
    cr.transport = b.transport;
    cr.ssm_strategy = b.ssm.strategy;
    cr.predicted_step_s = b.predicted_step_s;
    cr.efficiency = b.efficiency;
    cr.reason = label(b) + " at cp=" + std::to_string(W) + ": " + fmt_time(b.predicted_step_s) +
                (b.ssm.strategy.empty() ? " of attention per step, "
                                        : " of attention and " + b.ssm.mixer + " layers per step (" + b.ssm.mixer +
                                              " " + fmt_time(b.ssm.step_s) +
                                              ", " + b.ssm.strategy + ": " + fmt_time(b.ssm.comm_s) +
                                              " of communication, " +
                                              fmt_bytes(static_cast<double>(b.ssm.bytes_per_rank)) +
                                              " sent per rank), ") +
                pct(b.efficiency) + " parallel efficiency; imbalance " + fmt_fixed(b.imbalance, 3) +
                " (max/mean attention FLOPs), " + fmt_time(b.exposed_comm_s) + " of communication exposed (" +
                fmt_bytes(static_cast<double>(b.bytes_per_rank)) + " of attention sent per rank)";
    if (!b.fits_memory) cr.reason += "; WARNING: no case fits in device memory";
    if (ok.size() > 1) cr.reason += "; " + versus(b, *ok[1]);
    // The same layout and transport under the other SSM strategy, when it is not the runner-up.
    for (size_t i = 2; i < ok.size(); ++i)
      if (ok[i]->ssm.strategy != b.ssm.strategy && ok[i]->sharder == b.sharder && ok[i]->transport == b.transport) {
        cr.reason += "; " + versus(b, *ok[i]);
        break;
      }
    // The best case of a different layout, when the runner-up only differs in transport.
    for (size_t i = 1; i < ok.size(); ++i)
      if (ok[i]->sharder != b.sharder) {
        if (i > 1) cr.reason += "; " + versus(b, *ok[i]);
        break;
      }
    const PlanCase* worst = *std::max_element(
        ok.begin(), ok.end(), [](const PlanCase* x, const PlanCase* y) { return x->imbalance < y->imbalance; });
    if (worst->imbalance > 1.05 && worst->sharder != b.sharder)
      cr.reason += "; least balanced: " + worst->sharder + " (imbalance " + fmt_fixed(worst->imbalance, 3) + ")";
    plan.recommendation.per_cp.push_back(cr);
  }
  if (plan.recommendation.per_cp.empty()) {
    plan.recommendation.reason = "no case could be planned";
    return;
  }
  // Overall: the sharder/transport pair with the lowest mean (step / best step) over the CP sizes it
  // was planned at (pairs missing at some cp are ranked after complete ones).
  const size_t n_cp = plan.recommendation.per_cp.size();
  std::string best_label;
  std::pair<bool, double> best_score{true, 0};
  for (const auto& cr : plan.recommendation.per_cp)
    for (const auto& l : cr.ranking) {
      const auto& v = rel[l];
      const std::pair<bool, double> score{v.size() != n_cp,
                                          std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size())};
      if (best_label.empty() || score < best_score) {
        best_label = l;
        best_score = score;
      }
    }
  Recommendation& rec = plan.recommendation;
  const auto slash = best_label.find('/');
  rec.sharder = best_label.substr(0, slash);
  rec.transport = best_label.substr(slash + 1);
  if (const auto second = rec.transport.find('/'); second != std::string::npos) {
    rec.ssm_strategy = rec.transport.substr(second + 1);
    rec.transport = rec.transport.substr(0, second);
  }
  // The CP size: the largest W at which this pair keeps >= 80% parallel efficiency, else its most
  // efficient W.
  const PlanCase* chosen = nullptr;
  const PlanCase* most_efficient = nullptr;
  for (const auto& c : plan.cases) {
    if (label(c) != best_label) continue;
    if (!most_efficient || c.efficiency > most_efficient->efficiency) most_efficient = &c;
    if (c.efficiency >= 0.8 && c.fits_memory && (!chosen || c.cp > chosen->cp)) chosen = &c;
  }
  const bool kept = chosen != nullptr;
  if (!chosen) chosen = most_efficient;
  rec.cp = chosen->cp;
  rec.predicted_step_s = chosen->predicted_step_s;
  rec.efficiency = chosen->efficiency;
  std::vector<std::string> wins, behind;
  for (const auto& cr : rec.per_cp) {
    if (cr.sharder == rec.sharder && cr.transport == rec.transport && cr.ssm_strategy == rec.ssm_strategy) {
      wins.push_back(std::to_string(cr.cp));
    } else {
      for (const auto& c : plan.cases)
        if (c.cp == cr.cp && label(c) == best_label)
          behind.push_back("cp=" + std::to_string(cr.cp) + " " + pct(c.predicted_step_s / cr.predicted_step_s - 1) +
                           " behind " + cr.sharder + "/" + cr.transport +
                           (cr.ssm_strategy.empty() ? "" : "/" + cr.ssm_strategy));
    }
  }
  rec.reason =
      best_label + (wins.empty() ? "" : " is the best choice at cp " + join(wins)) +
      (behind.empty() ? "" : std::string(wins.empty() ? " ranks best on average; at " : "; at ") + join(behind)) +
      "; cp=" + std::to_string(rec.cp) +
      (kept ? " is the largest CP size that keeps >= 80% parallel efficiency (" + pct(rec.efficiency) + ")"
            : " is its most efficient CP size (" + pct(rec.efficiency) + "; none reaches 80%)");
  for (const auto& cr : rec.per_cp)
    if (cr.cp == rec.cp && cr.sharder == rec.sharder && cr.transport == rec.transport &&
        cr.ssm_strategy == rec.ssm_strategy)
      rec.reason += ". " + cr.reason;
}

}  // namespace cpbench::plan
