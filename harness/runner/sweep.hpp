#pragma once
// `cpbench run`: expands a scenario into cases, runs them on real ranks and writes the reports.
//
// Spawned mode (default): the cases are grouped by world size; for each group W rank processes of
// this executable are started (`cpbench _rank ...`) and run the group's cases in order, rank 0
// writing one result file per case. A case that throws or crashes ends its group's processes; the
// driver records it as failed (with each rank's message) and starts fresh processes for the rest.
// Joined mode: when RANK / WORLD_SIZE are set (torchrun --no-python, SLURM), this process is one rank
// of an existing job and runs every case of that world size in-process.
// The report is rewritten after every case, marked partial until the sweep ends.
#include <string>
#include <vector>

namespace cpbench {

struct RunOptions {
  std::string scenario_file;
  std::string out_dir = "cpbench-out";
  std::string filter;                  // regex on case names
  std::vector<std::string> overrides;  // -a key=[v1,v2]
};

// Returns the process exit status: 0 iff every case met its expectation (skips allowed).
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

}  // namespace cpbench
