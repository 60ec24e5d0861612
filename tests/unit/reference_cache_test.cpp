// One single-rank reference per problem (harness/runner/reference_cache.hpp): which cases share one
// (the problem key), and the cache's keeping rule. The end-to-end half, a sweep whose cases of two
// masks reuse only their own mask's reference and all match, is tests/multirank/reference_reuse_test.cpp.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "harness/runner/reference_cache.hpp"
#include "harness/runner/scenario.hpp"
#include "sharders/core/check.hpp"

using namespace cpbench;

namespace {

// Every axis a case can vary on, two values each where the scenario takes them.
const char* kSweep = R"(name: keys
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64}
dtype: float64
sweep:
  - sharder: [contiguous, load_balanced]
    transport: [allgather, ring]
    cp: [2, 4]
    mask: [causal, document, sliding_window:16, sliding_window:32]
    dtype: [float64, bfloat16]
  - sharder: local_only
    transport: allgather
    cp: 2
    mask: causal
    expect: mismatch
)";

std::string key_of(const ScenarioSpec& s, const CaseSpec& c, int64_t dp = 0, at::Device d = at::kCPU) {
  return reference_problem_key(s, c, dp, d);
}

}  // namespace

// Cases share a key exactly when mask, dtype, data replica and device agree: the sharder, transport,
// CP size and negative control never split a problem, and every mask (window sizes included) and
// dtype does.
TEST(ReferenceCache, CasesShareAKeyExactlyWhenMaskDtypeReplicaAndDeviceAgree) {
  const ScenarioSpec s = parse_scenario(kSweep, "keys.yaml");
  ASSERT_EQ(s.cases.size(), 2u * 2 * 2 * 4 * 2 + 1);
  std::set<std::string> keys;
  for (const CaseSpec& a : s.cases) {
    keys.insert(key_of(s, a));
    for (const CaseSpec& b : s.cases) {
      const bool same_problem = a.mask.to_string() == b.mask.to_string() && a.dtype == b.dtype;
      EXPECT_EQ(key_of(s, a) == key_of(s, b), same_problem) << a.name() << " vs " << b.name();
    }
  }
  EXPECT_EQ(keys.size(), 4u * 2);
  const CaseSpec& c = s.cases.front();
  EXPECT_NE(key_of(s, c, 0), key_of(s, c, 1)) << "data-parallel replicas hold different batches";
  EXPECT_NE(key_of(s, c, 0, at::kCPU), key_of(s, c, 0, at::Device(at::kCUDA, 0)));
  EXPECT_NE(key_of(s, c, 0, at::Device(at::kCUDA, 0)), key_of(s, c, 0, at::Device(at::kCUDA, 1)));
  ScenarioSpec flash = s;
  flash.kernels = AttentionKernels::flash_numerics;
  EXPECT_NE(key_of(s, c), key_of(flash, c)) << "the 16-bit single-rank run's kernels depend on the mode";
}

TEST(ReferenceCache, ComputesOncePerKeyAndKeepsOneProblemWhenAsked) {
  const ScenarioSpec s = parse_scenario(kSweep, "keys.yaml");
  int calls = 0;
  const auto compute = [&] {
    References r;
    r.seconds = ++calls;
    return r;
  };
  ReferenceCache cache(s);
  bool reused = true;
  const auto a = cache.get(s, "A", false, compute, reused);
  EXPECT_FALSE(reused);
  const auto b = cache.get(s, "B", false, compute, reused);
  EXPECT_FALSE(reused);
  EXPECT_EQ(cache.get(s, "A", false, compute, reused), a);  // the very tensors the first case checked with
  EXPECT_TRUE(reused);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.computed(), 2);
  EXPECT_EQ(cache.reused(), 1);
  // keep_one (device memory): B's references are dropped before C's are computed, so A and B come again.
  (void)cache.get(s, "C", true, compute, reused);
  EXPECT_FALSE(reused);
  (void)cache.get(s, "B", true, compute, reused);
  EXPECT_FALSE(reused);
  EXPECT_EQ(calls, 4);
  // A case of another scenario is refused: the key leaves out what a scenario fixes (model, batch).
  const ScenarioSpec other = parse_scenario(kSweep, "other.yaml");
  EXPECT_THROW((void)cache.get(other, "B", false, compute, reused), Error);
}
