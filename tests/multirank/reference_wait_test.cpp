// `cpbench run` with a cp-rank 0 whose single-rank references take longer than timeout_s (issue 28,
// item 5; the CPBENCH_FAULT=slowref hook sleeps after them): the other rank waits for them on the
// run's store with reference_timeout_s, not inside the step's first collective on timeout_s, so the
// case passes; with a reference_timeout_s shorter than the references it fails naming that key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "harness/fs_util.hpp"
#include "reports/json_report.hpp"
#include "spawn_cpbench.hpp"

using namespace cpbench;

namespace {

std::string scenario(const std::string& dir, const std::string& extra) {
  const std::string path = dir + "/slow_reference.yaml";
  std::ofstream(path) << "name: slow_reference\n"
                         "model: {preset: tiny}\n"
                         "batch: {batch_size: 1, seq_len: 64}\n"
                         "dtype: float64\n"
                         "timeout_s: 3\n"
                      << extra
                      << "measure: {warmup: 0, iters: 1, max_time_s: 0, collectives: false}\n"
                         "sweep: {sharder: load_balanced, transport: allgather, cp: 2}\n";
  return path;
}

Report run(const std::string& tag, const std::string& extra, int* rc) {
  const std::string dir = "/tmp/cpbench-refwait-" + tag + "-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  // Rank 0 (cp-rank 0 of case 0) sleeps 8 s after its references: well past timeout_s = 3.
  const pid_t pid = test::spawn_cpbench_run({scenario(dir, extra), "--out", dir + "/out"}, {"CPBENCH_FAULT=slowref:0:0:8"});
  *rc = test::wait_exit_status(pid);
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  fsu::remove_tree(dir);
  return r;
}

}  // namespace

TEST(ReferenceWait, ARankWaitsForReferencesLongerThanTimeoutOnTheStore) {
  int rc = -1;
  const Report r = run("ok", "", &rc);
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].status, "ok") << r.results[0].reason;
  EXPECT_EQ(rc, 0);
}

TEST(ReferenceWait, AReferenceBeyondReferenceTimeoutFailsNamingTheKey) {
  int rc = -1;
  const Report r = run("late", "reference_timeout_s: 2\n", &rc);
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].status, "failed");
  EXPECT_NE(r.results[0].reason.find("rank 1: "), std::string::npos) << r.results[0].reason;
  EXPECT_NE(r.results[0].reason.find("waited 2 s (reference_timeout_s) for cp-rank 0 to finish its single-rank "
                                     "references"),
            std::string::npos)
      << r.results[0].reason;
  EXPECT_EQ(rc, 1);
}
