// Admission control (harness/runner/admission.hpp): the memory estimate, the refusals and their one-line
// messages, and `cpbench run` refusing before it spawns anything. Also the CPBENCH_FAULT parser.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "harness/fs_util.hpp"
#include "harness/planner/mixer_cost.hpp"
#include "harness/planner/plan.hpp"
#include "harness/runner/admission.hpp"
#include "harness/runner/sweep.hpp"
#include "sharders/core/check.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

ScenarioSpec scenario(const std::string& batch, const std::string& sweep, const std::string& model = "{preset: tiny}") {
  return parse_scenario("name: t\nmodel: " + model + "\nbatch: " + batch + "\nsweep: " + sweep + "\n", "t.yaml");
}

HostLimits limits(double available_gib, double total_gib, int64_t cap) {
  HostLimits l;
  l.available_bytes = available_gib * kGiB;
  l.total_bytes = total_gib * kGiB;
  l.max_local_ranks = cap;
  l.cap_origin = "4 x 2 cores";
  l.runtime_bytes = kRankRuntimeFloorBytes;
  return l;
}

// The message of the UsageError admit() throws, or "" when it admits.
std::string refusal(const ScenarioSpec& s, const HostLimits& l, int64_t local = 0, int64_t world = 0) {
  try {
    admit(s, s.cases, l, local, world);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Admission, EstimateFollowsTheCase) {
  ScenarioSpec s = scenario("{seq_len: 4096}", "{sharder: load_balanced, transport: ring, cp: [1, 2, 4]}");
  const double rt = kRankRuntimeFloorBytes;
  const RankMemory w1 = estimate_rank_memory(s, s.cases[0], rt, true);
  const RankMemory w4 = estimate_rank_memory(s, s.cases[2], rt, false);
  EXPECT_GT(w1.total, rt);
  EXPECT_GT(w1.total, w4.total) << "a non-reference rank at W=4 holds less than the W=1 rank";
  EXPECT_EQ(w1.largest_keyed()->key, "batch.seq_len");
  EXPECT_NE(w1.largest_keyed()->what.find("reference attention"), std::string::npos);
  // The case total: one reference rank plus W-1 others, each with its runtime.
  const double total = case_local_bytes(s, s.cases[2], rt);
  EXPECT_NEAR(total, estimate_rank_memory(s, s.cases[2], rt, true).total + 3 * w4.total, 1.0);
  EXPECT_GT(total, 4 * rt);
  // The communication buffers are the transport's formula (ring sends (W-1) * (2 kv + dkv)).
  bool has_comm = false;
  for (const auto& t : w4.terms)
    if (t.what == "communication buffers") {
      has_comm = true;
      const double kv = 2.0 * 1 * 2 * 1028 * 16 * 8;  // B=1, Hkv=2, s=(4096+2*4*2)/4 (pad bound), D=16, float64
      EXPECT_NEAR(t.bytes, 3 * (2 * kv + kv), 1.0);
    }
  EXPECT_TRUE(has_comm);
  // device: cuda counts only the host runtime.
  ScenarioSpec g = parse_scenario("name: g\ndevice: cuda\nbatch: {seq_len: 100000}\nsweep: {cp: 2}\n", "g.yaml");
  EXPECT_DOUBLE_EQ(estimate_rank_memory(g, g.cases[0], rt, true).total, rt);
}

// A hybrid model's attention terms count its attention layers only; its Mamba layers have their own:
// the chunked scan (no S x S term) and the strategy's memory from the planner (mixer_activation_bytes).
TEST(Admission, HybridModelsCountAttentionAndSsmLayersApart) {
  const std::string hybrid = "{preset: tiny-hybrid, ssm: {heads: 4, head_dim: 16, state: 8, groups: 2}}";
  const std::string attention_only = "{preset: tiny, layers: 3}";
  ScenarioSpec h = scenario("{seq_len: 4096}", "{sharder: load_balanced, transport: ring, cp: [2]}", hybrid);
  ScenarioSpec a = scenario("{seq_len: 4096}", "{sharder: load_balanced, transport: ring, cp: [2]}", attention_only);
  const double rt = kRankRuntimeFloorBytes;
  const RankMemory hm = estimate_rank_memory(h, h.cases[0], rt, true);
  const RankMemory am = estimate_rank_memory(a, a.cases[0], rt, true);
  auto term = [](const RankMemory& m, const std::string& prefix) {
    for (const auto& t : m.terms)
      if (t.what.rfind(prefix, 0) == 0) return t.bytes;
    return -1.0;
  };
  // MAM: one attention layer of three, so a third of the S x S reference's per-layer terms.
  const double S = 4096, per_layer = S * S * (1 + 2 * 4 * 8.0), once = 4 * S * S * 8.0;
  EXPECT_NEAR(term(hm, "reference attention"), per_layer + once, 1.0);
  EXPECT_NEAR(term(am, "reference attention"), 3 * per_layer + once, 1.0);
  // The chunked scan's memory grows with S, not S^2: 4 tensors of [tokens, Q = 64, heads] per SSM layer,
  // over this rank's s = (4096 + 2W x 2) / W = 2052 tokens (the pad bound) and the reference's 4096.
  const double scan = term(hm, "SSM scan (chunked");
  EXPECT_NEAR(scan, 2 * (2052.0 * 4 * 64 * 4 * 8 + 4096.0 * 4 * 64 * 4 * 8), 1.0);
  plan::ModelShape shape;
  shape.layers = 3;
  shape.hidden = h.model.hidden;
  shape.mixers = "MAM";
  shape.ssm = h.model.ssm;
  const double layers = term(hm, "SSM layers (hidden_parallel)");
  EXPECT_NEAR(layers,
              static_cast<double>(plan::mixer_activation_bytes(shape, mixer_for('M'), "hidden_parallel", 1, 4104, 2, 8, 4) +
                                  plan::mixer_activation_bytes(shape, mixer_for('M'), "hidden_parallel", 1, 4096, 1, 8, 1)),
              1.0);
}

// A bfloat16 / float16 case's reference rank also runs the float64 reference the precision rule
// judges against: its S x S attention, activations and logits in 8-byte elements and a float64 model
// copy. Without them a bf16 case could pass admission and then run the machine out of memory.
TEST(Admission, PrecisionCasesCountTheirFloat64Reference) {
  ScenarioSpec s = scenario("{seq_len: 4096}", "{sharder: load_balanced, transport: ring, cp: 2, dtype: [float32, bfloat16]}");
  ASSERT_EQ(s.cases.size(), 2u);
  ASSERT_EQ(s.cases[1].dtype, at::kBFloat16);
  const double rt = kRankRuntimeFloorBytes;
  const RankMemory f32 = estimate_rank_memory(s, s.cases[0], rt, true);
  const RankMemory bf16 = estimate_rank_memory(s, s.cases[1], rt, true);
  const double S = 4096, L = 2, Hq = 4;  // tiny preset: 2 layers, 4 heads
  const double attention64 = L * S * S * (1 + 2 * Hq * 8) + Hq * S * S * 8;
  // bf16 elements are half of float32's, but the float64 reference comes on top.
  EXPECT_GT(bf16.total, f32.total);
  bool has64 = false;
  for (const auto& t : bf16.terms)
    if (t.what == "float64 reference attention (S x S)") {
      has64 = true;
      EXPECT_NEAR(t.bytes, attention64, 1.0);
      EXPECT_EQ(t.key, "batch.seq_len");
    }
  EXPECT_TRUE(has64);
  // Only the reference rank runs it.
  for (const auto& t : estimate_rank_memory(s, s.cases[1], rt, false).terms)
    EXPECT_EQ(t.what.find("reference"), std::string::npos) << t.what;
}

TEST(Admission, ShippedScenariosAreAdmittedOnAModestMachine) {
  for (const char* name : {"correctness", "quickstart", "variants", "perf_ci", "packed_documents", "gpu_throughput"}) {
    ScenarioSpec s = load_scenario(std::string(CPBENCH_SOURCE_DIR) + "/scenarios/" + name + ".yaml");
    EXPECT_EQ(refusal(s, limits(8, 16, 8)), "") << name;
  }
}

TEST(Admission, TooManyLocalRanksIsRefusedWithWhatFits) {
  ScenarioSpec s = scenario("{seq_len: 64}", "{sharder: load_balanced, transport: ring, cp: [2, 512]}");
  const std::string msg = refusal(s, limits(20, 24, 8));
  EXPECT_TRUE(contains(msg, "admission refused: t.yaml: case load_balanced/ring/cp512/causal/float64")) << msg;
  EXPECT_TRUE(contains(msg, "starts 512 local rank processes")) << msg;
  EXPECT_TRUE(contains(msg, "cap of 8 (4 x 2 cores; --max-local-ranks or CPBENCH_MAX_LOCAL_RANKS")) << msg;
  EXPECT_TRUE(contains(msg, "cp <= 8 fits here")) << msg;
  EXPECT_TRUE(contains(msg, "torchrun or SLURM across nodes")) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
  // dp counts too; a raised cap admits it.
  ScenarioSpec d = scenario("{seq_len: 64}", "{sharder: load_balanced, transport: ring, cp: 4, dp: 3}");
  EXPECT_TRUE(contains(refusal(d, limits(20, 24, 8)), "starts 12 local rank processes")) << refusal(d, limits(20, 24, 8));
  EXPECT_TRUE(contains(refusal(d, limits(20, 24, 8)), "cp <= 2 fits here"));
  EXPECT_EQ(refusal(d, limits(20, 24, 12)), "");
  // Joined mode: an external launcher started the ranks; the cap does not apply.
  EXPECT_EQ(refusal(s, limits(20, 24, 8), 1, 512), "");
  // cp x dp beyond int64 is refused, not overflowed.
  ScenarioSpec huge = scenario("{seq_len: 64}", "{sharder: contiguous, transport: ring, cp: 4611686018427387904, dp: 4}");
  EXPECT_TRUE(contains(refusal(huge, limits(20, 24, 8)), "cap of 8")) << refusal(huge, limits(20, 24, 8));
}

TEST(Admission, LocalRanksThatDoNotFitInMemoryAreRefused) {
  // float64 reference over 8192 tokens: several GiB for the reference rank.
  ScenarioSpec s = scenario("{seq_len: 8192}", "{sharder: load_balanced, transport: ring, cp: 8}");
  const double need8 = case_local_bytes(s, s.cases[0], kRankRuntimeFloorBytes);
  EXPECT_EQ(refusal(s, limits(need8 * 1.01 / kGiB, 64, 16)), "");
  const double avail = need8 * 0.99;
  const std::string msg = refusal(s, limits(avail / kGiB, 64, 16));
  EXPECT_TRUE(contains(msg, "case load_balanced/ring/cp8/causal/float64: its 8 local ranks need ~")) << msg;
  EXPECT_TRUE(contains(msg, "(MemAvailable)")) << msg;
  EXPECT_TRUE(contains(msg, "torchrun or SLURM across nodes")) << msg;
  int64_t fit = 0;
  for (int64_t cp = 7; cp >= 1 && fit == 0; --cp) {
    CaseSpec c = s.cases[0];
    c.cp = cp;
    if (case_local_bytes(s, c, kRankRuntimeFloorBytes) <= avail) fit = cp;
  }
  if (fit > 0) {
    EXPECT_TRUE(contains(msg, "cp <= " + std::to_string(fit) + " fits here")) << msg;
  }
  // Nothing fits: the advice names the key that drives the estimate.
  ScenarioSpec three = scenario("{seq_len: 8192}", "{sharder: load_balanced, transport: ring, cp: [1, 2, 8]}");
  const std::string none = refusal(three, limits(0.1, 64, 16));
  EXPECT_TRUE(contains(none, "no cp fits here: batch.seq_len = 8192 drives it")) << none;
  EXPECT_TRUE(contains(none, "(and 2 more cases)")) << none;
  EXPECT_EQ(none.find('\n'), std::string::npos);
  // Joined: LOCAL_WORLD_SIZE ranks of the job on this machine, each counted as a reference rank.
  EXPECT_NE(refusal(s, limits(avail / kGiB, 64, 16), 8, 8), "");
  EXPECT_EQ(refusal(s, limits(128, 128, 16), 8, 8), "");
}

TEST(Admission, AbsurdSizesNameTheKey) {
  struct Case {
    std::string batch, model, key;
  };
  for (const Case& c : std::vector<Case>{
           {"{seq_len: 1000000000000}", "{preset: tiny}", "batch.seq_len: 1000000000000 is too large for this machine"},
           {"{seq_len: 64}", "{preset: tiny, vocab: 1000000000000}", "model.vocab: 1000000000000 is too large"},
           {"{seq_len: 64}", "{preset: tiny, hidden: 4000000000, heads: 4, kv_heads: 2}", "model.hidden: 4000000000 is too large"},
           {"{seq_len: 64}", "{preset: tiny, ffn: 100000000000000}", "model.ffn: 100000000000000 is too large"},
           {"{seq_len: 64, batch_size: 1000000000000}", "{preset: tiny}", "batch.batch_size: 1000000000000 is too large"},
       }) {
    ScenarioSpec s = scenario(c.batch, "{sharder: thd, transport: allgather, cp: [1, 2]}", c.model);
    const std::string msg = refusal(s, limits(20, 24, 8));
    EXPECT_TRUE(contains(msg, "admission refused: t.yaml: " + c.key)) << msg;
    EXPECT_TRUE(contains(msg, "(MemTotal)")) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
}

TEST(Admission, HostLimitsReadThisMachine) {
  const HostLimits l = host_limits();
  EXPECT_GT(l.total_bytes, 0);
  EXPECT_GT(l.available_bytes, 0);
  EXPECT_LE(l.available_bytes, l.total_bytes);
  EXPECT_GE(l.max_local_ranks, kRanksPerCore);
  EXPECT_NE(l.cap_origin.find("cores"), std::string::npos);
  EXPECT_GE(l.runtime_bytes, kRankRuntimeFloorBytes);
  EXPECT_EQ(host_limits(3, "CPBENCH_MAX_LOCAL_RANKS").max_local_ranks, 3);
}

TEST(FaultHook, ParsesValidAndRefusesBadValues) {
  EXPECT_EQ(parse_fault("").kind, "");
  const FaultSpec f = parse_fault("hang:2:1");
  EXPECT_EQ(f.kind, "hang");
  EXPECT_EQ(f.case_index, 2);
  EXPECT_EQ(f.rank, 1);
  const FaultSpec slow = parse_fault("slow:3:0:25");
  EXPECT_EQ(slow.kind, "slow");
  EXPECT_EQ(slow.case_index, 3);
  EXPECT_EQ(slow.rank, 0);
  EXPECT_DOUBLE_EQ(slow.slow_fraction, 0.25);
  EXPECT_DOUBLE_EQ(parse_fault("slow:0:1:2.5").slow_fraction, 0.025);
  const FaultSpec slowref = parse_fault("slowref:0:0:8");
  EXPECT_EQ(slowref.kind, "slowref");
  EXPECT_DOUBLE_EQ(slowref.slowref_s, 8.0);
  EXPECT_DOUBLE_EQ(slowref.slow_fraction, 0.0);
  const FaultSpec work = parse_fault("work:1:0:50");  // the same hook as CPU work (measurement.md)
  EXPECT_EQ(work.kind, "work");
  EXPECT_DOUBLE_EQ(work.slow_fraction, 0.5);
  for (const char* bad : {"bogus", "crash", "crash:1", "explode:1:0", "hang:x:1", "hang:1:y", "hang::1", "hang:1:",
                          "hang:-1:0", "throw:99999999999999999999999:0", "throw:1:99999999999", ":1:2", "hang:1:2:3",
                          "slow:1:0", "slow:1:0:", "slow:1:0:x", "slow:1:0:0", "slow:1:0:-5", "slow:1:0:1001",
                          "slow:1:0:25:1", "slow:a:0:25", "slow:1:0:25%", "slowref:1:0", "slowref:1:0:0",
                          "slowref:1:0:3601", "work:1:0", "work:1:0:0"}) {
    try {
      (void)parse_fault(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_TRUE(contains(e.what(), "CPBENCH_FAULT=\"" + std::string(bad) + "\"")) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << bad << ": not a UsageError: " << e.what();
    }
  }
}

// `cpbench run` refuses before spawning anything: exit 2 within seconds, one line naming the case or
// key, and no report written.
TEST(AdmissionCli, RefusesBeforeSpawning) {
  const std::string dir = "/tmp/cpbench-admission-cli-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  auto run = [&](const std::string& yaml, const std::string& env, std::string* err) {
    const std::string path = dir + "/s.yaml";
    std::ofstream(path) << yaml;
    const std::string errf = dir + "/err.txt";
    const int st = std::system((env + " " + std::string(CPBENCH_EXE) + " run " + path + " --out " + dir + "/out > /dev/null 2> " + errf).c_str());
    std::ifstream in(errf);
    std::stringstream ss;
    ss << in.rdbuf();
    *err = ss.str();
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  std::string err;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run("name: big\nmodel: {preset: tiny}\nbatch: {seq_len: 64}\nsweep: {sharder: load_balanced, transport: ring, cp: 512}\n", "", &err), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_TRUE(contains(err, "cpbench: admission refused: ")) << err;
  EXPECT_TRUE(contains(err, "starts 512 local rank processes")) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(fsu::exists(dir + "/out")) << "nothing may be written or started before admission";
  // The cap follows the environment variable and the flag.
  EXPECT_EQ(run("name: big\nmodel: {preset: tiny}\nbatch: {seq_len: 64}\nsweep: {sharder: load_balanced, transport: ring, cp: 3}\n",
                "CPBENCH_MAX_LOCAL_RANKS=2", &err), 2);
  EXPECT_TRUE(contains(err, "cap of 2 (--max-local-ranks")) << err;
  EXPECT_EQ(run("name: s\nmodel: {preset: tiny}\nbatch: {seq_len: 1000000000000}\nsweep: {sharder: load_balanced, transport: ring, cp: 2}\n", "", &err), 2);
  EXPECT_TRUE(contains(err, "batch.seq_len: 1000000000000 is too large for this machine")) << err;
  EXPECT_FALSE(fsu::exists(dir + "/out"));
  // A bad fault hook value is bad input, found before any rank starts.
  EXPECT_EQ(run("name: f\nmodel: {preset: tiny}\nbatch: {seq_len: 64}\nsweep: {cp: 2}\n", "CPBENCH_FAULT=hang:one:1", &err), 2);
  EXPECT_TRUE(contains(err, "CPBENCH_FAULT=\"hang:one:1\"")) << err;
  fsu::remove_tree(dir);
}
