#include "harness/planner/documents.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <sstream>

#include "harness/planner/format.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::plan {

namespace {

// splitmix64: a portable, seedable source for the document distributions.
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform01() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() {
    const double u1 = uniform01(), u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
};

// "key=value,key=value" -> map; every key must be in `allowed`.
std::map<std::string, double> parse_params(const std::string& spec, const std::string& params,
                                           const std::vector<std::string>& allowed) {
  std::map<std::string, double> out;
  std::stringstream ss(params);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    CP_CHECK_USAGE(eq != std::string::npos, "--doc-dist '", spec, "': expected key=value, got '", item, "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    CP_CHECK_USAGE(std::find(allowed.begin(), allowed.end(), key) != allowed.end(), "--doc-dist '", spec,
                   "': unknown parameter '", key, "' (known: ", join(allowed), ")");
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    CP_CHECK_USAGE(used == value.size() && !value.empty(), "--doc-dist '", spec, "': ", key, " must be a number, got '",
                   value, "'");
    out[key] = v;
  }
  return out;
}

}  // namespace

std::vector<int64_t> draw_documents(const std::string& spec, int64_t seq_len) {
  CP_CHECK_USAGE(seq_len >= 1, "--doc-dist needs --seq-len (the tokens the documents fill), got ", seq_len);
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string params = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::function<double(SplitMix&)> draw;
  uint64_t seed = 0;
  if (kind == "lognormal") {
    auto p = parse_params(spec, params, {"mean", "sigma", "seed"});
    CP_CHECK_USAGE(p.count("mean") && p["mean"] >= 1, "--doc-dist '", spec, "': lognormal needs mean >= 1");
    const double sigma = p.count("sigma") ? p["sigma"] : 1.0;
    CP_CHECK_USAGE(sigma >= 0, "--doc-dist '", spec, "': sigma must be >= 0");
    const double mu = std::log(p["mean"]) - sigma * sigma / 2;  // so that E[length] = mean
    seed = static_cast<uint64_t>(p.count("seed") ? p["seed"] : 0);
    draw = [mu, sigma](SplitMix& g) { return std::exp(mu + sigma * g.normal()); };
  } else if (kind == "uniform") {
    auto p = parse_params(spec, params, {"min", "max", "seed"});
    CP_CHECK_USAGE(p.count("min") && p.count("max") && p["min"] >= 1 && p["max"] >= p["min"], "--doc-dist '", spec,
                   "': uniform needs 1 <= min <= max");
    const auto lo = static_cast<int64_t>(p["min"]), hi = static_cast<int64_t>(p["max"]);
    seed = static_cast<uint64_t>(p.count("seed") ? p["seed"] : 0);
    draw = [lo, hi](SplitMix& g) {
      return static_cast<double>(lo + static_cast<int64_t>(g.next() % static_cast<uint64_t>(hi - lo + 1)));
    };
  } else {
    throw UsageError(detail::concat("--doc-dist '", spec,
                                    "': unknown distribution (known: lognormal:mean=M,sigma=S,seed=N, "
                                    "uniform:min=A,max=B,seed=N)"));
  }
  SplitMix gen{seed * 0x2545F4914F6CDD1DULL + 1};
  std::vector<int64_t> docs;
  int64_t total = 0;
  while (total < seq_len) {
    const int64_t len = std::clamp<int64_t>(std::llround(draw(gen)), 1, seq_len - total);
    docs.push_back(len);
    total += len;
  }
  return docs;
}

}  // namespace cpbench::plan
