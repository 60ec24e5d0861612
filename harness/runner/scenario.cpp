#include "harness/runner/scenario.hpp"

#include "kernels/attention/fused_attention.hpp"
#include "kernels/controls/control.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "harness/runner/scenario_model.hpp"
#include "harness/runner/yaml_read.hpp"
#include "sharders/mask.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"

namespace cpbench {

const char* to_string(Expect expect) { return expect == Expect::match ? "match" : "mismatch"; }
const char* to_string(DeviceKind device) { return device == DeviceKind::cuda ? "cuda" : "cpu"; }
const char* to_string(AttentionKernels kernels) {
  switch (kernels) {
    case AttentionKernels::fused: return "fused";
    case AttentionKernels::tiled: return "tiled";
    case AttentionKernels::flash_numerics: return "flash_numerics";
  }
  return "?";
}

namespace {
const std::vector<std::pair<std::string, at::ScalarType>> kDtypeNames = {
    {"float64", at::kDouble}, {"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}};
}  // namespace

at::ScalarType parse_dtype(const std::string& name) {
  for (const auto& [n, t] : kDtypeNames)
    if (n == name) return t;
  throw UsageError("unknown dtype '" + name + "'; known: float64, float32, bfloat16, float16");
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& [n, t] : kDtypeNames)
    if (t == dtype) return n;
  return c10::toString(dtype);
}

std::string CaseSpec::name() const {
  const std::string t = ulysses > 0 ? transport + "-u" + std::to_string(ulysses) : transport;
  std::string n =
      sharder + "/" + t + "/cp" + std::to_string(cp) + "/" + mask.to_string() + "/" + dtype_name(dtype);
  if (dp > 1) n += "/dp" + std::to_string(dp);
  if (!sliding_transport.empty()) n += "/sliding-" + sliding_transport;
  for (const auto& m : mixers())
    if (!m->strategy_axis().empty()) n += m->case_suffix(mixer_strategy(*m));
  return n;
}

std::string CaseSpec::mixer_strategy(const Mixer& mixer) const {
  if (mixer.strategy_axis().empty()) return "";  // attention: the case's transport is its strategy
  const auto it = mixer_cp.find(mixer.strategy_axis());
  return it != mixer_cp.end() ? it->second : mixer.strategies().front();
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  auto dist = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& k : known) {
    size_t d = dist(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

namespace {

using namespace yaml_read;

struct Axes {
  std::vector<std::string> sharder, transport, mask, dtype, expect;
  std::vector<std::string> transport_sliding{""};  // "": the sliding layers run `transport`
  std::map<std::string, std::vector<std::string>> mixer_cp;  // by a mixer's strategy axis
  std::vector<int64_t> cp, dp, ulysses;  // ulysses empty: not given
  std::vector<std::string> routes;       // not an axis: every case of the block gets the list
};

// Every combination of the mixers' strategy axes, the first axis (registry order) outermost.
std::vector<std::map<std::string, std::string>> strategy_combinations(
    const std::map<std::string, std::vector<std::string>>& axes) {
  std::vector<std::map<std::string, std::string>> out{{}};
  for (const auto& m : mixers()) {
    const auto it = axes.find(m->strategy_axis());
    if (it == axes.end()) continue;
    std::vector<std::map<std::string, std::string>> next;
    for (const auto& partial : out)
      for (const auto& v : it->second) {
        next.push_back(partial);
        next.back()[it->first] = v;
      }
    out = std::move(next);
  }
  return out;
}

Axes read_axes(const Ctx& c, const YAML::Node& n, const std::string& path, const Axes& defaults) {
  std::vector<std::string> keys{"sharder", "transport", "transport_sliding", "ulysses", "cp", "dp",
                                "mask",    "dtype",     "expect",            "routes"};
  for (const auto& m : mixers())
    if (!m->strategy_axis().empty()) keys.push_back(m->strategy_axis());
  check_keys(c, n, path, keys);
  Axes a = defaults;
  auto sub = [&](const char* k) { return path.empty() ? std::string(k) : path + "." + k; };
  auto sharder_ok = [&](const std::string& p, const std::string& v) {
    if (find_control(v)) return;
    try {
      (void)make_layout(v);
    } catch (const UsageError& e) {
      std::string controls;
      for (const auto& n : known_controls()) controls += (controls.empty() ? "" : ", ") + n;
      c.fail(p, std::string(e.what()) + "; negative controls: " + controls);
    }
  };
  auto transport_ok = [&](const std::string& p, const std::string& v) {
    try {
      (void)takes_ulysses(v);  // UsageError listing the known transports
    } catch (const UsageError& e) {
      c.fail(p, e.what());
    }
  };
  auto mask_ok = [&](const std::string& p, const std::string& v) {
    try {
      (void)MaskSpec::parse(v);
    } catch (const UsageError& e) {
      c.fail(p, e.what());
    }
  };
  auto dtype_ok = [&](const std::string& p, const std::string& v) {
    try {
      (void)parse_dtype(v);
    } catch (const UsageError& e) {
      c.fail(p, e.what());
    }
  };
  auto expect_ok = [&](const std::string& p, const std::string& v) {
    if (v != "match" && v != "mismatch") c.fail(p, "expected match or mismatch, got \"" + v + "\"");
  };
  auto route_ok = [&](const std::string& p, const std::string& v) {
    std::string known;
    for (const auto r : kernels::kKernelRoutes) {
      if (r == kernels::KernelRoute::skipped) continue;
      if (v == kernels::to_string(r)) return;
      known += (known.empty() ? "" : ", ") + std::string(kernels::to_string(r));
    }
    c.fail(p, "unknown kernel route \"" + v + "\"; known: " + known);
  };
  if (n["sharder"]) a.sharder = read_str_list(c, n["sharder"], sub("sharder"), sharder_ok);
  if (n["routes"]) a.routes = read_str_list(c, n["routes"], sub("routes"), route_ok);
  for (const auto& m : mixers()) {
    const std::string axis = m->strategy_axis();
    if (axis.empty() || !n[axis]) continue;
    const auto strategy_ok = [&](const std::string& p, const std::string& v) {
      const auto known = m->strategies();
      if (std::find(known.begin(), known.end(), v) != known.end()) return;
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      c.fail(p, "unknown " + m->label() + " CP strategy \"" + v + "\"; known: " + list);
    };
    a.mixer_cp[axis] = read_str_list(c, n[axis], sub(axis.c_str()), strategy_ok);
  }
  if (n["transport"]) a.transport = read_str_list(c, n["transport"], sub("transport"), transport_ok);
  if (n["transport_sliding"]) {
    a.transport_sliding = read_str_list(c, n["transport_sliding"], sub("transport_sliding"), transport_ok);
    for (const auto& t : a.transport_sliding)
      if (takes_ulysses(t))
        c.fail(sub("transport_sliding"), t + " takes a Ulysses degree; the sliding layers run a transport without one");
  }
  if (n["mask"]) a.mask = read_str_list(c, n["mask"], sub("mask"), mask_ok);
  if (n["dtype"]) a.dtype = read_str_list(c, n["dtype"], sub("dtype"), dtype_ok);
  if (n["expect"]) a.expect = read_str_list(c, n["expect"], sub("expect"), expect_ok);
  if (n["cp"]) a.cp = read_int_list(c, n["cp"], sub("cp"), 1);
  if (n["dp"]) a.dp = read_int_list(c, n["dp"], sub("dp"), 1);
  if (n["ulysses"]) a.ulysses = read_int_list(c, n["ulysses"], sub("ulysses"), 1);
  return a;
}

// A model with sliding_attention layers: their mask is the causal window (the case's mask is the full
// layers'), within each document too under a document mask (layer_mask); a full mask has no windowed
// twin. A transport_sliding needs such layers.
void check_sliding(const Ctx& c, const std::string& where, const ModelConfig& model, CaseSpec& cs) {
  if (!model.attention.has_sliding()) {
    if (!cs.sliding_transport.empty())
      c.fail(where + ".transport_sliding", "the model has no sliding_attention layers (model.attention.layer_types)");
    return;
  }
  if (cs.mask.kind != MaskSpec::Kind::causal && cs.mask.kind != MaskSpec::Kind::document)
    c.fail(where + ".mask", "the model has sliding_attention layers (model.attention.layer_types): their mask is "
                            "sliding_window:" + std::to_string(model.attention.window) +
                            " (causal, within documents under mask: document); the full layers' mask must be causal "
                            "or document, got " + cs.mask.to_string());
  cs.sliding_mask = layer_mask(AttentionKind::sliding, cs.mask, model.attention.window);
}

}  // namespace

ScenarioSpec parse_scenario(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  Ctx c{file};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UsageError(detail::concat(file, ": line ", e.mark.line + 1, ", column ", e.mark.column + 1,
                                    ": malformed YAML: ", e.msg));
  }
  if (!root || root.IsNull()) c.fail("(top level)", "the scenario is empty");
  std::vector<std::string> root_keys{"name",    "description", "model",      "batch",     "mask",
                                     "dtype",   "device",      "sweep",      "expect",    "measure",
                                     "timeout_s", "reference_timeout_s", "seed", "share_gpu", "routes", "kernels"};
  for (const auto& m : mixers())
    if (!m->strategy_axis().empty()) root_keys.push_back(m->strategy_axis());
  check_keys(c, root, "", root_keys);
  ScenarioSpec s;
  s.file = file;
  s.name = root["name"] ? read_str(c, root["name"], "name") : file;
  if (root["description"]) s.description = read_str(c, root["description"], "description");

  if (const auto m = root["model"]) s.model = read_model(c, m);
  try {
    s.model.validate();
  } catch (const UsageError& e) {
    throw UsageError(file + ": " + e.what());
  }

  if (const auto b = root["batch"]) {
    check_keys(c, b, "batch", {"batch_size", "seq_len", "documents", "padding_token_id", "primary", "loss_mask", "mrope", "seed"});
    if (b["batch_size"]) s.batch.batch_size = read_int(c, b["batch_size"], "batch.batch_size", 1);
    if (b["seq_len"]) s.batch.seq_len = read_int(c, b["seq_len"], "batch.seq_len", 1);
    if (b["padding_token_id"]) s.batch.padding_token_id = read_int(c, b["padding_token_id"], "batch.padding_token_id", 0);
    if (b["seed"]) s.batch.seed = static_cast<uint64_t>(read_int(c, b["seed"], "batch.seed", 0));
    if (b["loss_mask"]) s.batch.loss_mask = read_bool(c, b["loss_mask"], "batch.loss_mask");
    if (b["mrope"]) s.batch.mrope = read_bool(c, b["mrope"], "batch.mrope");
    if (b["primary"]) {
      s.batch.primary = read_str(c, b["primary"], "batch.primary");
      if (s.batch.primary != "input_ids" && s.batch.primary != "inputs_embeds")
        c.fail("batch.primary", "expected input_ids or inputs_embeds, got \"" + s.batch.primary + "\"");
    }
    if (const auto d = b["documents"]) {
      if (!d.IsSequence()) c.fail("batch.documents", "expected a list of document lengths, got " + scalar_text(d));
      const bool nested = d.size() > 0 && d[0].IsSequence();
      if (nested) {
        if (static_cast<int64_t>(d.size()) != s.batch.batch_size)
          c.fail("batch.documents", "has " + std::to_string(d.size()) + " rows, but batch.batch_size is " +
                                        std::to_string(s.batch.batch_size));
        for (size_t r = 0; r < d.size(); ++r)
          s.batch.documents.push_back(read_int_list(c, d[r], "batch.documents[" + std::to_string(r) + "]", 1));
      } else if (d.size() > 0) {
        s.batch.documents.push_back(read_int_list(c, d, "batch.documents", 1));
      }
      for (size_t r = 0; r < s.batch.documents.size(); ++r) {
        int64_t total = 0;
        for (auto x : s.batch.documents[r]) total += x;
        if (total > s.batch.seq_len)
          c.fail(nested ? "batch.documents[" + std::to_string(r) + "]" : "batch.documents",
                 "documents sum to " + std::to_string(total) + " tokens, longer than batch.seq_len " +
                     std::to_string(s.batch.seq_len));
      }
    }
  }
  if (s.batch.mrope && s.model.mrope_sections.empty()) {
    const int64_t half = s.model.head_dim() / 2;
    s.model.mrope_sections = {half - 2 * (half / 4), half / 4, half / 4};
  }

  if (root["device"]) {
    const std::string device = read_str(c, root["device"], "device");
    if (device != "cpu" && device != "cuda") c.fail("device", "expected cpu or cuda, got \"" + device + "\"");
    s.device = device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  }
  if (root["timeout_s"]) s.timeout_s = read_int(c, root["timeout_s"], "timeout_s", 1);
  if (root["reference_timeout_s"])
    s.reference_timeout_s = read_int(c, root["reference_timeout_s"], "reference_timeout_s", 1);
  if (root["share_gpu"]) s.share_gpu = read_bool(c, root["share_gpu"], "share_gpu");
  if (root["kernels"]) {
    const std::string k = read_str(c, root["kernels"], "kernels");
    bool found = false;
    for (const auto v : {AttentionKernels::fused, AttentionKernels::tiled, AttentionKernels::flash_numerics})
      if (k == to_string(v)) {
        s.kernels = v;
        found = true;
      }
    if (!found) c.fail("kernels", "expected fused, tiled or flash_numerics, got \"" + k + "\"");
  }
  if (root["seed"]) {
    const auto seed = static_cast<uint64_t>(read_int(c, root["seed"], "seed", 0));
    if (!(root["model"] && root["model"]["seed"])) s.model.seed = seed;
    if (!(root["batch"] && root["batch"]["seed"])) s.batch.seed = seed + 1;
  }
  if (const auto m = root["measure"]) {
    check_keys(c, m, "measure", {"warmup", "iters", "max_noise", "max_time_s", "max_iters", "peak_flops", "collectives"});
    if (m["warmup"]) s.measure.warmup = read_int(c, m["warmup"], "measure.warmup", 0);
    if (m["iters"]) s.measure.iters = read_int(c, m["iters"], "measure.iters", 1);
    if (m["max_noise"]) s.measure.max_noise = read_positive(c, m["max_noise"], "measure.max_noise", 1.0);
    if (m["max_time_s"]) {
      // 0 is allowed: time exactly `iters` steps.
      const bool zero = m["max_time_s"].IsScalar() && (m["max_time_s"].Scalar() == "0" || m["max_time_s"].Scalar() == "0.0");
      s.measure.max_time_s = zero ? 0.0 : read_positive(c, m["max_time_s"], "measure.max_time_s");
    }
    if (m["max_iters"]) s.measure.max_iters = read_int(c, m["max_iters"], "measure.max_iters", 1);
    if (s.measure.max_iters < s.measure.iters)
      c.fail("measure.max_iters", "must be >= measure.iters (" + std::to_string(s.measure.iters) + "), got " +
                                      std::to_string(s.measure.max_iters));
    if (m["peak_flops"]) s.measure.peak_flops = read_positive(c, m["peak_flops"], "measure.peak_flops");
    if (m["collectives"]) s.measure.collectives = read_bool(c, m["collectives"], "measure.collectives");
  }

  // Top-level axis defaults, then each sweep block.
  Axes defaults;
  defaults.sharder = {"load_balanced"};
  defaults.transport = {"allgather"};
  defaults.cp = {1};
  defaults.dp = {1};
  defaults.mask = {"causal"};
  defaults.dtype = {"float64"};
  defaults.expect = {"match"};
  std::vector<std::string> top_keys{"mask", "dtype", "expect", "routes", "transport_sliding"};
  for (const auto& m : mixers())
    if (!m->strategy_axis().empty()) {
      defaults.mixer_cp[m->strategy_axis()] = {m->strategies().front()};
      top_keys.push_back(m->strategy_axis());
    }
  {
    YAML::Node top;
    for (const auto& k : top_keys)
      if (root[k]) top[k] = root[k];
    if (top.size() > 0) defaults = read_axes(c, top, "", defaults);
  }
  std::vector<Axes> blocks;
  if (const auto sw = root["sweep"]) {
    if (sw.IsSequence()) {
      if (sw.size() == 0) c.fail("sweep", "expected at least one sweep block, got an empty list");
      for (size_t i = 0; i < sw.size(); ++i) blocks.push_back(read_axes(c, sw[i], "sweep[" + std::to_string(i) + "]", defaults));
    } else {
      blocks.push_back(read_axes(c, sw, "sweep", defaults));
    }
  } else {
    blocks.push_back(defaults);
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("-a " + o + ": expected key=value or key=[v1,v2]");
    const std::string key = o.substr(0, eq);
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw UsageError("-a " + o + ": malformed value: " + e.msg);
    }
    YAML::Node wrapper;
    wrapper[key] = value;
    Ctx oc{"-a " + o};
    for (auto& blk : blocks) blk = read_axes(oc, wrapper, "", blk);
  }

  std::set<std::string> seen;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const Axes& a = blocks[bi];
    const std::string where = root["sweep"] && root["sweep"].IsSequence() ? "sweep[" + std::to_string(bi) + "]" : "sweep";
    for (const auto& sh : a.sharder)
      for (const auto& tr : a.transport) {
        // Only hybrid takes a Ulysses degree; the axis is ignored for the others (one case each).
        std::vector<int64_t> uls{0};
        if (takes_ulysses(tr)) {
          if (a.ulysses.empty())
            c.fail(where + ".ulysses", "transport " + tr + " needs the Ulysses degree (ulysses: N, N divides cp)");
          uls = a.ulysses;
        }
        for (auto ul : uls)
        for (auto cp : a.cp) {
          // Head-parallel transports split the heads: a combination that cannot is a scenario error.
          const std::string why =
              make_transport(tr, TransportOptions{ul})->unsupported_heads(cp, s.model.heads, s.model.kv_heads);
          if (!why.empty()) c.fail(where, "cp " + std::to_string(cp) + ": " + why + " (model.heads " +
                                              std::to_string(s.model.heads) + ", model.kv_heads " +
                                              std::to_string(s.model.kv_heads) + ")");
          for (auto dp : a.dp)
            for (const auto& mk : a.mask)
              for (const auto& ts : a.transport_sliding)
              for (const auto& dt : a.dtype)
                for (const auto& ex : a.expect)
                for (const auto& strategies : strategy_combinations(a.mixer_cp)) {
                  CaseSpec cs;
                  cs.sharder = find_control(sh) ? sh : make_layout(sh)->name();  // aliases resolve to the canonical name
                  cs.transport = tr;
                  cs.sliding_transport = ts;
                  cs.ulysses = ul;
                  cs.cp = cp;
                  cs.dp = dp;
                  cs.mask = MaskSpec::parse(mk);
                  check_sliding(c, where, s.model, cs);
                  cs.dtype = parse_dtype(dt);
                  cs.expect = ex == "mismatch" ? Expect::mismatch : Expect::match;
                  cs.mixer_cp = strategies;
                  cs.routes = a.routes;
                  for (const auto& m : mixers()) {
                    const std::string axis = m->strategy_axis();
                    if (!axis.empty() && !s.model.has(*m) && cs.mixer_strategy(*m) != m->strategies().front())
                      c.fail(where + "." + axis, cs.mixer_strategy(*m) + " needs a model with " + m->description() +
                                                     " layers (model.mixers with " + std::string(1, m->letter()) + ")");
                  }
                  if (!seen.insert(cs.name() + "/" + ex).second) continue;
                  // Refused before any rank starts: a strategy that cannot split a mixer's sizes at cp, or
                  // cannot run on the case's layout (state passing needs ranks that own contiguous chunks).
                  for (const Mixer* m : mixers_in(s.model.mixers)) {
                    if (m->strategy_axis().empty()) continue;
                    const Control* control = find_control(cs.sharder);
                    const std::string why = m->unsupported_reason(
                        s.model, cs.mixer_strategy(*m), *make_layout(control ? control->layout() : cs.sharder), cp);
                    if (!why.empty()) throw UsageError(file + ": " + cs.name() + ": " + why);
                  }
                  cs.index = static_cast<int64_t>(s.cases.size());
                  s.cases.push_back(cs);
                }
        }
      }
  }
  return s;
}

ScenarioSpec load_scenario(const std::string& file, const std::vector<std::string>& overrides) {
  std::ifstream in(file);
  CP_CHECK_USAGE(in.good(), file, ": cannot open the scenario file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_scenario(ss.str(), file, overrides);
}

std::vector<CaseSpec> filter_cases(const std::vector<CaseSpec>& cases, const std::string& regex) {
  if (regex.empty()) return cases;
  std::regex re;
  try {
    re = std::regex(regex);
  } catch (const std::regex_error& e) {
    throw UsageError("--filter '" + regex + "': not a valid regular expression: " + e.what());
  }
  std::vector<CaseSpec> out;
  for (const auto& c : cases)
    if (std::regex_search(c.name(), re)) out.push_back(c);
  return out;
}

}  // namespace cpbench
