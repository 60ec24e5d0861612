#include "harness/runner/admission.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "harness/planner/plan.hpp"
#include "harness/runner/reference_check.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

// The scenario key whose value is the furthest above the tiny preset's (what a user most likely
// mistyped), among the keys a term grows with.
struct Driver {
  const char* key;
  double ratio;  // value / the tiny preset's value
};
std::string driver(std::initializer_list<Driver> drivers) {
  const Driver* best = drivers.begin();
  for (const auto& d : drivers)
    if (d.ratio > best->ratio) best = &d;
  return best->key;
}

std::string key_value(const ScenarioSpec& s, const std::string& key) {
  if (key == "batch.seq_len") return std::to_string(s.batch.seq_len);
  if (key == "batch.batch_size") return std::to_string(s.batch.batch_size);
  if (key == "model.vocab") return std::to_string(s.model.vocab);
  if (key == "model.hidden") return std::to_string(s.model.hidden);
  if (key == "model.layers") return std::to_string(s.model.layers);
  if (key == "model.ffn") return std::to_string(s.model.ffn);
  if (key == "model.heads") return std::to_string(s.model.heads);
  for (const auto& m : mixers()) {  // a mixer's own sizes: model.<config_key>.<field>
    ModelConfig sizes = s.model;
    for (const auto& f : m->config_fields(sizes))
      if (key == "model." + m->config_key() + "." + f.name) return std::to_string(*f.value);
  }
  return "?";
}

// The int64 formulas of the planner and the transports are only asked about sizes whose cruder terms
// already fit in memory, so their products cannot overflow.
constexpr double kSafeForIntegerFormulas = 1e15;

}  // namespace

const MemoryTerm* RankMemory::largest_keyed() const {
  const MemoryTerm* best = nullptr;
  for (const auto& t : terms)
    if (!t.key.empty() && (!best || t.bytes > best->bytes)) best = &t;
  return best;
}

namespace {
// The terms of a rank's tensors (the header's model, all but the runtime), added to `m`: host memory on
// the CPU, device memory on CUDA.
void add_tensor_terms(const ScenarioSpec& s, const CaseSpec& c, bool reference_rank, RankMemory& m) {
  auto add = [&](std::string what, std::string key, double bytes) {
    m.terms.push_back({std::move(what), std::move(key), bytes});
    m.total += bytes;
  };

  const auto& md = s.model;
  const double B = static_cast<double>(s.batch.batch_size), S = static_cast<double>(s.batch.seq_len);
  const double L = static_cast<double>(md.layers), H = static_cast<double>(md.hidden);
  // Attention terms count the attention layers only; the other mixers have their own terms below.
  const double La = static_cast<double>(count_layers(md.mixers, md.layers, kDefaultMixer));
  const double Hq = static_cast<double>(md.heads), Hkv = static_cast<double>(md.kv_heads);
  const double D = static_cast<double>(md.head_dim()), F = static_cast<double>(md.ffn);
  const double V = static_cast<double>(md.vocab), W = static_cast<double>(c.cp);
  const double e = static_cast<double>(c10::elementSize(c.dtype)), ge = std::max(4.0, e);
  size_t docs = 1;
  for (const auto& row : s.batch.documents) docs = std::max(docs, row.size());
  const double P = S + 2 * W * (static_cast<double>(docs) + 1);
  const double sl = std::ceil(P / W);

  const double rs = S / 128, rb = B, rl = L / 2, rh = H / 64, rf = F / 128, rv = V / 256, rq = Hq / 4;
  add("embedding and LM head (2 V H)", driver({{"model.vocab", rv}, {"model.hidden", rh}}), 3 * 2 * V * H * e);
  add("attention weights", driver({{"model.hidden", rh}, {"model.layers", rl}}),
      3 * (L * 2 * H + La * (2 * Hq * D * H + 2 * H * Hkv * D) + H) * e);
  add("MLP weights", driver({{"model.ffn", rf}, {"model.hidden", rh}, {"model.layers", rl}}), 3 * L * 3 * H * F * e);
  add("batch data", driver({{"batch.seq_len", rs}, {"batch.batch_size", rb}}),
      2 * B * S * (33 + (s.batch.mrope ? 16 : 0) + (s.batch.primary == "inputs_embeds" ? H * e : 0)));
  // The single-rank reference in element size `re`, and, for bfloat16 / float16 cases, the float64
  // one the precision rule also runs (harness/runner/case_runner.cpp run_references): its own model
  // copy (weights and gradients) and activations, while the low-precision reference's outputs are held.
  auto add_reference = [&](const std::string& label, double re) {
    add(label + "reference attention (S x S)",
        driver({{"batch.seq_len", rs * rs}, {"batch.batch_size", rb}, {"model.heads", rq}}),
        La * B * S * S * (1 + 2 * Hq * re) + (La > 0 ? B * Hq * S * S * re : 0.0));
    add(label + "reference activations",
        driver({{"batch.seq_len", rs}, {"batch.batch_size", rb}, {"model.ffn", rf}, {"model.hidden", rh}}),
        L * B * S * (4 * H + 3 * F) * re);
    add(label + "reference logits", driver({{"model.vocab", rv}, {"batch.seq_len", rs}, {"batch.batch_size", rb}}),
        3 * B * S * V * re);
  };
  if (reference_rank) {
    add_reference("", e);
    if (judged_by_precision(c.dtype, md.has_recurrent())) {
      constexpr double e64 = 8;
      add("float64 reference model (weights, gradients)", driver({{"model.vocab", rv}, {"model.hidden", rh}, {"model.layers", rl}}),
          2 * (2 * V * H + L * (2 * H + 3 * H * F) + La * (2 * Hq * D * H + 2 * H * Hkv * D) + H) * e64);
      add_reference("float64 ", e64);
    }
  }
  const std::string tokens = driver({{"batch.seq_len", rs}, {"batch.batch_size", rb}});
  if (La > 0)
    add("block scores", driver({{"batch.seq_len", rs * rs}, {"batch.batch_size", rb}, {"model.heads", rq}}),
        3 * B * Hq * sl * sl * ge);
  add("layer activations", driver({{"batch.seq_len", rs}, {"batch.batch_size", rb}, {"model.ffn", rf}, {"model.hidden", rh}}),
      L * B * sl * (3 * F + 4 * H) * e);
  add("logits", driver({{"model.vocab", rv}, {"batch.seq_len", rs}, {"batch.batch_size", rb}}),
      3 * B * sl * V * e + 2 * B * S * V * e);
  // The other mixers' layers: each mixer's own terms (Mixer::memory_terms: weights, its recurrence's
  // working set, what its layers keep under the case's strategy, the reference rank's over S).
  for (const Mixer* mixer : mixers_in(md.mixers)) {
    MemoryQuery q;
    q.layers = count_layers(md.mixers, md.layers, mixer->letter());
    q.hidden = H;
    q.batch = B;
    q.seq_len = S;
    q.local_len = sl;
    q.cp = W;
    q.elem_bytes = e;
    q.accum_bytes = ge;
    q.docs = static_cast<int64_t>(docs);
    q.reference_rank = reference_rank;
    q.strategy = c.mixer_strategy(*mixer);
    q.seq_ratio = rs;
    q.batch_ratio = rb;
    q.hidden_ratio = rh;
    q.layers_ratio = rl;
    for (auto& t : mixer->memory_terms(md, q)) add(std::move(t.what), std::move(t.key), t.bytes);
  }
  // The int64 formulas, once the sizes are known to be sane (see kSafeForIntegerFormulas).
  const double attention_guess = L * sl * (4 * H + 4 * Hkv * D + 4 * Hq) * e + W * 4 * Hkv * sl * D * ge;
  if (m.total < kSafeForIntegerFormulas && attention_guess * B < kSafeForIntegerFormulas) {
    plan::ModelShape shape;
    shape.layers = md.layers;
    shape.mixers = md.mixers;  // the attention activations count the attention layers only
    shape.hidden = md.hidden;
    shape.heads = md.heads;
    shape.kv_heads = md.kv_heads;
    shape.head_dim = md.head_dim();
    const auto sl_i = static_cast<int64_t>(sl), e_i = static_cast<int64_t>(e);
    const auto transport = make_transport(c.transport, c.transport_options());
    add("attention activations (planner)", tokens,
        B * static_cast<double>(plan::attention_activation_bytes(shape, sl_i, c.cp, e_i, *transport)));
    add("communication buffers", tokens,
        static_cast<double>(transport->bytes_per_call(
            CallShape{c.cp, s.batch.batch_size, md.heads, md.kv_heads, sl_i, md.head_dim(), e_i})));
  } else {
    add("attention activations and communication", tokens, B * attention_guess);
  }
}
}  // namespace

RankMemory estimate_rank_memory(const ScenarioSpec& s, const CaseSpec& c, double runtime_bytes, bool reference_rank) {
  RankMemory m;
  m.terms.push_back({"LibTorch runtime", "", runtime_bytes});
  m.total += runtime_bytes;
  if (s.device == DeviceKind::cuda) return m;  // its tensors live on the GPU: estimate_device_memory
  add_tensor_terms(s, c, reference_rank, m);
  return m;
}

RankMemory estimate_device_memory(const ScenarioSpec& s, const CaseSpec& c, bool reference_rank) {
  RankMemory m;
  m.terms.push_back({"CUDA context and library workspaces", "", kCudaRuntimeBytes});
  m.total += kCudaRuntimeBytes;
  add_tensor_terms(s, c, reference_rank, m);
  return m;
}

std::vector<double> gpu_bytes(const ScenarioSpec& s, const CaseSpec& c, int64_t gpus, int64_t local_ranks) {
  const bool joined = local_ranks > 0;
  const int64_t n = joined ? local_ranks : c.world_size();
  std::vector<double> need(static_cast<size_t>(std::max<int64_t>(1, gpus)), 0.0);
  const double ref = estimate_device_memory(s, c, true).total, other = estimate_device_memory(s, c, false).total;
  // device_choice.hpp: local rank r computes on GPU r % gpus; spawned, global rank r is cp-rank r % cp.
  // Joined, which local ranks are cp-rank 0 is not known here: each counts as one.
  for (int64_t r = 0; r < n; ++r)
    need[static_cast<size_t>(r % static_cast<int64_t>(need.size()))] += !joined && r % c.cp != 0 ? other : ref;
  return need;
}

double case_local_bytes(const ScenarioSpec& s, const CaseSpec& c, double runtime_bytes) {
  const double dp = static_cast<double>(c.dp), cp = static_cast<double>(c.cp);
  return dp * estimate_rank_memory(s, c, runtime_bytes, true).total +
         dp * (cp - 1) * estimate_rank_memory(s, c, runtime_bytes, false).total;
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  std::ostringstream os;
  if (b >= 1e4) os << std::scientific << std::setprecision(1) << b << " " << units[u];
  else os << std::fixed << std::setprecision(b < 10 && u > 0 ? 1 : 0) << b << " " << units[u];
  return os.str();
}

HostLimits host_limits(int64_t max_local_ranks, const std::string& origin) {
  HostLimits l;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") l.available_bytes = kib * 1024;
    if (key == "MemTotal:") l.total_bytes = kib * 1024;
  }
  // No /proc (not Linux): nothing to measure against; do not refuse on memory.
  if (l.total_bytes <= 0) l.total_bytes = l.available_bytes = std::numeric_limits<double>::infinity();

  cpu_set_t set;
  CPU_ZERO(&set);
  int64_t cores = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cores <= 0) cores = std::max<long>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
  if (max_local_ranks > 0) {
    l.max_local_ranks = max_local_ranks;
    l.cap_origin = origin;
  } else {
    l.max_local_ranks = kRanksPerCore * cores;
    l.cap_origin = std::to_string(kRanksPerCore) + " x " + std::to_string(cores) + " cores";
  }

  // LibTorch's own footprint: what this process (which has initialised LibTorch) holds privately, as
  // a rank will too; shared library text is shared between the ranks and not counted per rank.
  double anon = 0;
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(rollup, line))
    if (line.rfind("Anonymous:", 0) == 0) anon = std::stod(line.substr(10)) * 1024;
  l.runtime_bytes = std::max(kRankRuntimeFloorBytes, anon);
  return l;
}

void admit(const ScenarioSpec& s, const std::vector<CaseSpec>& cases, const HostLimits& l, int64_t local_ranks,
           int64_t job_world_size) {
  const bool joined = local_ranks > 0;
  const std::string across = "larger W runs under torchrun or SLURM across nodes (README: Limits)";
  std::string first;
  int64_t refused = 0;
  auto refuse = [&](const std::string& line) {
    if (first.empty()) first = line;
    ++refused;
  };
  // The largest cp of this case (same dp) that passes `fits`, or 0.
  auto largest_cp = [&](const CaseSpec& c, auto fits) {
    for (int64_t cp = std::min(c.cp - 1, l.max_local_ranks / c.dp); cp >= 1; --cp) {
      CaseSpec smaller = c;
      smaller.cp = cp;
      if (fits(smaller)) return cp;
    }
    return int64_t{0};
  };
  for (const auto& c : cases) {
    if (joined && job_world_size > 0 && c.world_size() != job_world_size) continue;  // skipped there
    const std::string head = s.file + ": case " + c.name() + ": ";
    // 1. The local-rank cap (first: a mistyped cp must be named as such) (spawned mode: the whole case runs here).
    // In double: cp x dp of a mistyped scenario may not fit in an int64.
    const double spawned = static_cast<double>(c.cp) * static_cast<double>(c.dp);
    const int64_t here = joined ? local_ranks : (spawned > 1e15 ? int64_t{1} << 50 : c.world_size());
    if (!joined && spawned > static_cast<double>(l.max_local_ranks)) {
      const int64_t fit = largest_cp(c, [&](const CaseSpec& x) { return x.world_size() <= l.max_local_ranks; });
      std::ostringstream count;
      count << std::setprecision(15) << spawned;
      refuse(head + "starts " + count.str() + " local rank processes (cp x dp), more than the cap of " +
             std::to_string(l.max_local_ranks) + " (" + l.cap_origin +
             "; --max-local-ranks or CPBENCH_MAX_LOCAL_RANKS changes it); " +
             (fit > 0 ? "cp <= " + std::to_string(fit) + " fits here; " : "") + across);
      continue;
    }
    // 2. Absurd sizes: one term alone beyond the machine's physical memory.
    const RankMemory rank = estimate_rank_memory(s, c, l.runtime_bytes, true);
    const MemoryTerm* big = rank.largest_keyed();
    if (big && big->bytes > l.total_bytes) {
      refuse(s.file + ": " + big->key + ": " + key_value(s, big->key) + " is too large for this machine: the " +
             big->what + " alone needs ~" + format_bytes(big->bytes) + " per rank, the machine has " +
             format_bytes(l.total_bytes) + " (MemTotal); " + across);
      continue;
    }
    // 3. Memory of the local ranks together.
    auto local_bytes = [&](const CaseSpec& x) {
      if (!joined) return case_local_bytes(s, x, l.runtime_bytes);
      // Joined: this machine holds `local_ranks` ranks of the job; count each as a reference rank (the
      // larger one) unless it is known that none is.
      return static_cast<double>(local_ranks) * estimate_rank_memory(s, x, l.runtime_bytes, true).total;
    };
    const double need = local_bytes(c);
    if (need > l.available_bytes) {
      const int64_t fit = joined ? 0 : largest_cp(c, [&](const CaseSpec& x) { return local_bytes(x) <= l.available_bytes; });
      std::string advice;
      if (fit > 0)
        advice = "cp <= " + std::to_string(fit) + " fits here; ";
      else if (big)
        advice = "no cp fits here: " + big->key + " = " + key_value(s, big->key) + " drives it (" + big->what + ": ~" +
                 format_bytes(big->bytes) + " per rank); ";
      refuse(head + "its " + std::to_string(here) + " local ranks need ~" + format_bytes(need) + " (~" +
             format_bytes(rank.total) + " for a rank running the reference, LibTorch " +
             format_bytes(l.runtime_bytes) + " of it), but only " + format_bytes(l.available_bytes) +
             " is available (MemAvailable); " + advice + across);
    }
  }
  if (refused > 1) first += " (and " + std::to_string(refused - 1) + " more case" + (refused > 2 ? "s" : "") + ")";
  if (refused > 0) throw UsageError("admission refused: " + first);
}

void admit_device(const ScenarioSpec& s, const std::vector<CaseSpec>& cases, const std::vector<GpuMemory>& gpus,
                  int64_t local_ranks, int64_t job_world_size) {
  if (s.device != DeviceKind::cuda || gpus.empty()) return;
  const bool joined = local_ranks > 0;
  const auto n = static_cast<int64_t>(gpus.size());
  std::string first;
  int64_t refused = 0;
  auto refuse = [&](const std::string& line) {
    if (first.empty()) first = line;
    ++refused;
  };
  // The GPU a case fills most, against its free memory: its index, or -1 when every one fits.
  auto worst_gpu = [&](const CaseSpec& x) {
    const std::vector<double> need = gpu_bytes(s, x, n, local_ranks);
    int64_t worst = -1;
    double worst_ratio = 1.0;
    for (int64_t g = 0; g < n; ++g) {
      const double ratio = need[static_cast<size_t>(g)] / std::max(1.0, gpus[static_cast<size_t>(g)].free_bytes);
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        worst = g;
      }
    }
    return worst;
  };
  for (const auto& c : cases) {
    if (joined && job_world_size > 0 && c.world_size() != job_world_size) continue;  // skipped there
    const RankMemory ref = estimate_device_memory(s, c, true);
    // Absurd sizes: one term alone beyond the largest GPU's memory.
    double largest = 0;
    for (const auto& g : gpus) largest = std::max(largest, g.total_bytes);
    const MemoryTerm* big = ref.largest_keyed();
    if (big && big->bytes > largest) {
      refuse(s.file + ": " + big->key + ": " + key_value(s, big->key) + " is too large for this GPU: the " + big->what +
             " alone needs ~" + format_bytes(big->bytes) + " on the rank running the reference, " + gpus.front().name +
             " has " + format_bytes(largest) + "; larger W runs under torchrun or SLURM across nodes (README: Limits)");
      continue;
    }
    const int64_t g = worst_gpu(c);
    if (g < 0) continue;
    const std::vector<double> need = gpu_bytes(s, c, n, local_ranks);
    int64_t fit = 0;
    if (!joined)
      for (int64_t cp = c.cp - 1; cp >= 1 && fit == 0; --cp) {
        CaseSpec smaller = c;
        smaller.cp = cp;
        if (worst_gpu(smaller) < 0) fit = cp;
      }
    const GpuMemory& gm = gpus[static_cast<size_t>(g)];
    std::string advice;
    if (fit > 0)
      advice = "cp <= " + std::to_string(fit) + " fits; ";
    else if (big)
      advice = big->key + " = " + key_value(s, big->key) + " drives it (" + big->what + ": ~" + format_bytes(big->bytes) +
               " on the rank running the reference); ";
    refuse(s.file + ": case " + c.name() + ": its ranks on GPU " + std::to_string(g) + " need ~" +
           format_bytes(need[static_cast<size_t>(g)]) + " of device memory (~" + format_bytes(ref.total) +
           " for the rank running the reference, CUDA context " + format_bytes(kCudaRuntimeBytes) + " of it), but " +
           gm.name + " " + std::to_string(g) + " has " + format_bytes(gm.free_bytes) + " free (cudaMemGetInfo); " +
           advice + "larger W runs under torchrun or SLURM across nodes (README: Limits)");
  }
  if (refused > 1) first += " (and " + std::to_string(refused - 1) + " more case" + (refused > 2 ? "s" : "") + ")";
  if (refused > 0) throw UsageError("admission refused: " + first);
}

}  // namespace cpbench
