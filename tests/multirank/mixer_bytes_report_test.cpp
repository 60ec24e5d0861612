// Every linear mixer's collective bytes reach report.json under its own metric (Mixer::bytes_metric:
// ssm_bytes_per_rank, gdn_bytes_per_rank), as a user reads them: a real `cpbench run` of a model with
// one Mamba, one attention and one Gated DeltaNet layer (mixers MAG) at cp 2, each linear mixer on both
// CP strategies, at two sequence lengths. What the numbers must show without any formula: both metrics
// present on every case and positive; state passing's bytes the same at S and 2S (one state per rank,
// set by the layer's sizes), the channel-parallel strategies' exactly doubled (all-to-alls of the
// rank's tokens); and a mixer's bytes independent of the other mixer's strategy (no bytes booked to the
// wrong letter).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "harness/fs_util.hpp"
#include "reports/json_report.hpp"
#include "spawn_cpbench.hpp"

using namespace cpbench;

namespace {

std::string scenario(int64_t seq_len) {
  return R"(name: mixer_bytes
measure: {max_time_s: 0, collectives: false}
model: {preset: tiny, layers: 3, mixers: MAG}
batch: {batch_size: 1, seq_len: )" +
         std::to_string(seq_len) + R"(}
dtype: float64
device: cpu
timeout_s: 120
sweep:
  - sharder: contiguous
    transport: allgather
    cp: 2
    mask: causal
    ssm_cp: [hidden_parallel, state_passing]
    gdn_cp: [head_parallel, state_passing]
)";
}

// case (ssm strategy, gdn strategy) -> {ssm bytes, gdn bytes}, from one run's report.json.
using Bytes = std::map<std::pair<std::string, std::string>, std::pair<double, double>>;

Bytes run(int64_t seq_len) {
  const std::string dir =
      "/tmp/cpbench-mixer-bytes-test-" + std::to_string(::getpid()) + "-" + std::to_string(seq_len);
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  std::ofstream(dir + "/s.yaml") << scenario(seq_len);
  const pid_t pid = test::spawn_cpbench_run({dir + "/s.yaml", "--out", dir + "/out"});
  EXPECT_EQ(test::wait_exit_status(pid), 0) << "see " << dir << "/out/report.md";
  const Report report = report_from_json(read_json_file(dir + "/out/report.json"));
  Bytes out;
  for (const RunResult& r : report.results) {
    const Metric* ssm = r.metric("ssm_bytes_per_rank");
    const Metric* gdn = r.metric("gdn_bytes_per_rank");
    EXPECT_NE(ssm, nullptr) << r.name << ": no ssm_bytes_per_rank";
    EXPECT_NE(gdn, nullptr) << r.name << ": no gdn_bytes_per_rank";
    if (ssm == nullptr || gdn == nullptr) continue;
    EXPECT_GT(ssm->value, 0) << r.name;
    EXPECT_GT(gdn->value, 0) << r.name;
    // Case names carry a non-default strategy as /state_passing (Mamba) and /gdn_state_passing.
    const std::string s = r.name.find("/state_passing") != std::string::npos ? "state_passing" : "hidden_parallel";
    const std::string g = r.name.find("/gdn_state_passing") != std::string::npos ? "state_passing" : "head_parallel";
    EXPECT_TRUE(out.emplace(std::make_pair(s, g), std::make_pair(ssm->value, gdn->value)).second)
        << r.name << ": two cases with the same strategies";
  }
  EXPECT_EQ(out.size(), 4u) << "cases: " << report.results.size();
  return out;
}

}  // namespace

TEST(MixerBytesReport, EachLinearMixerReportsItsOwnBytesFlatForStatePassing) {
  const Bytes a = run(64), b = run(128);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (const auto& [key, va] : a) {
    const auto& [s, g] = key;
    const auto& vb = b.at(key);
    const std::string what = "ssm_cp=" + s + " gdn_cp=" + g;
    EXPECT_EQ(vb.first, (s == "state_passing" ? 1.0 : 2.0) * va.first) << what << ": ssm bytes at S=64 vs 128";
    EXPECT_EQ(vb.second, (g == "state_passing" ? 1.0 : 2.0) * va.second) << what << ": gdn bytes at S=64 vs 128";
    // A mixer's bytes do not move with the other mixer's strategy.
    for (const auto& [other, vo] : a) {
      if (other.first == s) {
        EXPECT_EQ(vo.first, va.first) << what << " vs gdn_cp=" << other.second;
      }
      if (other.second == g) {
        EXPECT_EQ(vo.second, va.second) << what << " vs ssm_cp=" << other.first;
      }
    }
  }
}
