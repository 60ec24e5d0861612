#pragma once
// Launcher: runs one process per rank on this machine and supervises them.
//
// Each child gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (the torchrun contract),
// plus any extra environment. If a rank exits non-zero or is killed, the others get `grace` to fail on
// their own (their collectives time out naming the missing peer) and are then killed; past `deadline`
// every rank is killed. No child outlives launch(): no orphans.
//
// Ranks also die with the launcher when it cannot clean up (SIGKILL, crash, OOM kill): each child
// asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG, then re-checks that the parent
// is still the launcher, closing the race with a parent that died before the request). The signal
// follows the launching *thread*, so launch() must run on a thread that outlives the ranks (it does:
// it blocks until they end). The ranks of one launch() share their own process group (not the
// caller's: a terminal's Ctrl-C reaches the launcher only), which launch() kills on every exit path
// and kill_running_ranks() kills from a signal handler.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cpbench::comm {

struct LaunchOptions {
  std::string executable;              // absolute path; argv[0] of each child
  std::vector<std::string> args;       // argv[1..]
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                 // 0: pick a free loopback port
  std::map<std::string, std::string> env;  // extra environment for every rank
  std::chrono::milliseconds grace{std::chrono::seconds(30)};
  std::chrono::milliseconds deadline{std::chrono::minutes(30)};
};

struct RankExit {
  int rank = 0;
  int exit_code = 0;        // valid when !signaled
  bool signaled = false;
  int signal = 0;
  bool killed_by_launcher = false;  // also set for a rank never started because a stop was requested
  [[nodiscard]] bool ok() const;
  [[nodiscard]] std::string describe() const;
};

struct LaunchResult {
  std::vector<RankExit> ranks;
  int master_port = 0;
  [[nodiscard]] bool ok() const;
  [[nodiscard]] std::string describe_failures() const;  // one line per failed rank
};

// A TCP port on loopback that was free a moment ago.
[[nodiscard]] int find_free_port();

// Throws cpbench::Error when a rank cannot be started (after killing the ones already started).
[[nodiscard]] LaunchResult launch(const LaunchOptions& options);

// SIGKILLs the process group of every launch() in progress and makes launches in progress or to come
// in this process stop starting ranks (they return with the ranks marked killed_by_launcher).
// Async-signal-safe: meant for SIGINT / SIGTERM handlers. Irreversible for the process's lifetime.
void kill_running_ranks() noexcept;

// This process's own executable path (/proc/self/exe).
[[nodiscard]] std::string self_executable();

// The torchrun-style environment of a rank started by launch() or by an external launcher.
struct RankEnv {
  int rank = 0;
  int local_rank = 0;        // LOCAL_RANK (default RANK): the GPU this rank binds
  int world_size = 1;
  int local_world_size = 1;  // LOCAL_WORLD_SIZE (default WORLD_SIZE: one node): ranks on this node
  int node_rank = 0;         // NODE_RANK or GROUP_RANK (torchrun), SLURM_NODEID; else 0
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool from_slurm = false;   // read from SLURM's variables (below)
};
// torchrun's RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE win. Without RANK and WORLD_SIZE, a
// task that `srun` started in a job step of more than one task reads SLURM's own: SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE ("8" or "8(x2)": the same count on every node;
// a list of different counts is refused), SLURM_NODEID; MASTER_ADDR and MASTER_PORT still come from
// the environment. A step of one task (an interactive salloc shell) is not a joined job: cpbench
// launches its own ranks there. nullopt when neither set is present; throws when one is set but
// malformed or incomplete.
[[nodiscard]] std::optional<RankEnv> rank_env_from_environment();

}  // namespace cpbench::comm
