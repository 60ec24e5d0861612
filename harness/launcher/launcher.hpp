#pragma once
// Launcher: runs one process per rank on this machine and supervises them.
//
// Each child gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (the torchrun contract),
// plus any extra environment. If a rank exits non-zero or is killed, the others get `grace` to fail on
// their own (their collectives time out naming the missing peer) and are then killed; past `deadline`
// every rank is killed. No child outlives launch(): no orphans.
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
  bool killed_by_launcher = false;
  [[nodiscard]] bool ok() const { return !signaled && exit_code == 0; }
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

[[nodiscard]] LaunchResult launch(const LaunchOptions& options);

// This process's own executable path (/proc/self/exe).
[[nodiscard]] std::string self_executable();

// The torchrun-style environment of a rank started by launch() or by an external launcher.
struct RankEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};
// nullopt when RANK / WORLD_SIZE are not set; throws when they are set but malformed or incomplete.
[[nodiscard]] std::optional<RankEnv> rank_env_from_environment();

}  // namespace cpbench::comm
