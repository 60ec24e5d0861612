#pragma once
// `cpbench run`: expands a scenario into cases, runs them on real ranks and writes the reports.
//
// Spawned mode (default): the cases are grouped by world size; for each group W rank processes of
// this executable are started (`cpbench _rank ...`) and run the group's cases in order, rank 0
// writing one result file per case. A case that throws or crashes ends its group's processes; the
// driver records it as failed (with each rank's message) and starts fresh processes for the rest.
// Joined mode: when RANK / WORLD_SIZE are set (torchrun --no-python, SLURM), this process is one rank
// of an existing job and runs every case of that world size in-process.
// The report is rewritten after every case (atomically: a reader never sees half a file), marked
// partial until the sweep ends. Before any rank starts, admission control (admission.hpp) refuses
// work that cannot fit on this machine.
//
// Signals (spawned mode): SIGINT and SIGTERM kill the ranks' process group at once, the sweep stops
// and writes its partial report; then SIGINT exits 130 and SIGTERM ends the process by SIGTERM.
// A launcher killed outright (SIGKILL) takes its ranks with it (launcher.hpp).
#include <string>
#include <vector>

namespace cpbench {

struct RunOptions {
  std::string scenario_file;
  std::string out_dir = "cpbench-out";
  std::string filter;                  // regex on case names
  std::vector<std::string> overrides;  // -a key=[v1,v2]
  bool allow_skips = false;            // a run where every case was skipped exits 0, not 3
  int64_t max_local_ranks = 0;         // admission cap on rank processes per case; 0 = default
};

// Process exit statuses of `cpbench run` (README "Exit codes"), spawned and joined alike.
inline constexpr int kExitOk = 0;           // every case met its expectation (some may be skipped)
inline constexpr int kExitFailed = 1;       // a case failed (or `compare` found a regression)
inline constexpr int kExitUsage = 2;        // bad input, or admission refused the scenario
inline constexpr int kExitNothingRan = 3;   // every case was skipped (unless allow_skips)
inline constexpr int kExitInterrupted = 130;  // SIGINT

// Returns the process exit status above. Throws UsageError for bad input or a refused admission.
int run_command(const RunOptions& options);

struct RankCommandOptions {
  std::string scenario_file;
  std::vector<std::string> overrides;
  std::vector<int64_t> cases;  // indices into the expanded case list
  std::string results_dir;
  int64_t progress_done = 0;   // cases finished before this group (for progress lines)
  int64_t progress_total = 0;
  double elapsed_before_s = 0;
};

// The hidden `_rank` subcommand: one rank of a spawned group.
int rank_command(const RankCommandOptions& options);

// The test hooks, CPBENCH_FAULT="KIND:CASE:RANK" with KIND crash (abort), hang (sleep an hour) or
// throw (an Error), CASE a case index and RANK a global rank: that rank does KIND when it reaches that
// case; or "slow:CASE:RANK:PERCENT": each timed step of that case on that rank is lengthened by PERCENT %
// of its own duration (PERCENT in (0, 1000], proving the regression gate), sleeping; "work:CASE:RANK:
// PERCENT" lengthens it by spinning until the rank's CPU clock advanced PERCENT % of the step's CPU
// seconds (more work: wall time and CPU time both grow); or "slowref:CASE:RANK:SECONDS": that rank, a
// cp-rank 0, sleeps SECONDS (in (0, 3600]) after its single-rank references (proving that the other
// ranks wait for them on the store, not on timeout_s). Unset or empty: no fault.
// Anything else: UsageError naming the variable.
struct FaultSpec {
  std::string kind;  // "" = none
  int64_t case_index = -1;
  int rank = -1;
  double slow_fraction = 0;  // slow, work: PERCENT / 100
  double slowref_s = 0;      // slowref: SECONDS
};
[[nodiscard]] FaultSpec parse_fault(const std::string& text);

}  // namespace cpbench
