#include "harness/launcher/launcher.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "harness/launcher/core_binding.hpp"
#include "sharders/core/check.hpp"

extern char** environ;

namespace cpbench::comm {

namespace {

// Process groups of the launches in progress, for kill_running_ranks() (a signal handler cannot take
// a lock, hence fixed slots of lock-free atomics; 0 = free).
std::array<std::atomic<pid_t>, 16> g_rank_groups{};
std::atomic<bool> g_stop{false};
static_assert(std::atomic<pid_t>::is_always_lock_free);

// Registers a launch's process group while it lives and kills whatever is left of it on destruction,
// so an exception or early return cannot leave ranks behind.
class RankGroup {
 public:
  RankGroup() = default;
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;
  ~RankGroup() {
    if (pgid_ > 0) ::killpg(pgid_, SIGKILL);
    release();
  }
  // Every rank was reaped: forget the group without signalling it (its id may be reused).
  void release() {
    if (slot_) slot_->store(0);
    slot_ = nullptr;
    pgid_ = 0;
  }
  [[nodiscard]] pid_t pgid() const { return pgid_; }
  void set(pid_t pgid) {
    pgid_ = pgid;
    for (auto& s : g_rank_groups) {
      pid_t expected = 0;
      if (s.compare_exchange_strong(expected, pgid)) {
        slot_ = &s;
        break;
      }
    }
    // No free slot (more than 16 launches at once in one process): the group is still killed on
    // every exit path of launch(), only not from a signal handler.
  }
  void kill() const {
    if (pgid_ > 0) ::killpg(pgid_, SIGKILL);
  }

 private:
  pid_t pgid_ = 0;
  std::atomic<pid_t>* slot_ = nullptr;
};

// fork + exec with the child tied to the launcher: everything here after fork() is async-signal-safe
// (the parent has LibTorch's threads). `pgid` 0 = lead a new group. Returns the pid, or -errno.
pid_t spawn_rank(const char* path, char* const argv[], char* const envp[], pid_t pgid, pid_t launcher) {
  const pid_t pid = ::fork();
  if (pid < 0) return -errno;
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher may have died before the request above: then we were already reparented.
    if (::getppid() != launcher) ::_exit(127);
    ::setpgid(0, pgid);
    ::execve(path, argv, envp);
    ::_exit(127);
  }
  // Also from the parent, so the group exists before fork() returns here either way (the usual
  // double setpgid; the loser of the race gets EACCES or ESRCH, which is fine).
  ::setpgid(pid, pgid == 0 ? pid : pgid);
  return pid;
}

}  // namespace

void kill_running_ranks() noexcept {
  g_stop.store(true);
  for (auto& s : g_rank_groups) {
    const pid_t g = s.load();
    if (g > 0) ::killpg(g, SIGKILL);
  }
}

std::string RankExit::describe() const {
  std::ostringstream os;
  os << "rank " << rank;
  if (killed_by_launcher)
    os << " was killed by the launcher after a peer failed or the deadline passed";
  else if (signaled)
    os << " was killed by signal " << signal << " (" << strsignal(signal) << ")";
  else
    os << " exited with status " << exit_code;
  return os.str();
}

bool RankExit::ok() const { return !killed_by_launcher && !signaled && exit_code == 0; }

bool LaunchResult::ok() const {
  for (const auto& r : ranks)
    if (!r.ok()) return false;
  return true;
}

std::string LaunchResult::describe_failures() const {
  std::ostringstream os;
  for (const auto& r : ranks)
    if (!r.ok()) os << r.describe() << "\n";
  return os.str();
}

int find_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  CP_CHECK(fd >= 0, "socket(): ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    throw Error(detail::concat("bind() on loopback: ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string self_executable() {
  // readlink(2), not std::filesystem: libtorch.so exports an incompatible std::filesystem (see
  // harness/fs_util.hpp).
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  CP_CHECK(n > 0, "readlink(/proc/self/exe): ", std::strerror(errno));
  return std::string(buf.data(), static_cast<size_t>(n));
}

LaunchResult launch(const LaunchOptions& o) {
  CP_CHECK(o.world_size >= 1, "world size must be positive, got ", o.world_size);
  LaunchResult result;
  result.master_port = o.master_port != 0 ? o.master_port : find_free_port();

  // fork() cannot report a failed exec; check the usual failure up front.
  if (::access(o.executable.c_str(), X_OK) != 0)
    throw Error(detail::concat("cannot start rank 0 (", o.executable, "): ", std::strerror(errno)));
  std::vector<pid_t> pids(o.world_size, -1);
  result.ranks.resize(o.world_size);
  RankGroup group;
  const pid_t launcher = ::getpid();
  std::vector<bool> done(o.world_size, false);
  int running = 0;
  const std::vector<int> cpus = affinity_cpus();
  for (int r = 0; r < o.world_size; ++r) {
    result.ranks[r].rank = r;
    if (g_stop.load()) {
      // Interrupted while starting: the rest never start; they count as stopped by the launcher.
      done[r] = true;
      result.ranks[r].killed_by_launcher = true;
      continue;
    }
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    // Each rank's share of the launcher's cores for its timed steps (core_binding.hpp); never one
    // inherited from a parent rank.
    if (const std::vector<int> share = rank_core_share(cpus, r, o.world_size); !share.empty())
      env["CPBENCH_RANK_CPUS"] = cpu_list_text(share);
    else
      env.erase("CPBENCH_RANK_CPUS");
    for (const auto& [k, v] : o.env) env[k] = v;
    env["RANK"] = std::to_string(r);
    env["LOCAL_RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(o.world_size);
    env["LOCAL_WORLD_SIZE"] = std::to_string(o.world_size);
    env["MASTER_ADDR"] = o.master_addr;
    env["MASTER_PORT"] = std::to_string(result.master_port);
    // Ranks share the machine's cores: an OpenMP thread that spin-waits steals a core from another rank
    // (or from anything else running), so waiting threads sleep unless the user chose otherwise.
    env.emplace("OMP_WAIT_POLICY", "PASSIVE");
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings{o.executable};
    argv_strings.insert(argv_strings.end(), o.args.begin(), o.args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    const pid_t pid = spawn_rank(o.executable.c_str(), argv.data(), envp.data(), group.pgid(), launcher);
    if (pid < 0) {
      group.kill();
      for (int k = 0; k < r; ++k)
        if (pids[k] > 0) ::waitpid(pids[k], nullptr, 0);
      throw Error(detail::concat("cannot start rank ", r, " (", o.executable, "): ", std::strerror(static_cast<int>(-pid))));
    }
    if (group.pgid() == 0) group.set(pid);
    // A stop requested before the group was registered missed it in the handler: act on it here.
    if (g_stop.load()) group.kill();
    pids[r] = pid;
    ++running;
  }

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  std::optional<clock::time_point> first_failure;
  while (running > 0) {
    bool progressed = false;
    for (int r = 0; r < o.world_size; ++r) {
      if (done[r]) continue;
      int status = 0;
      pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got == pids[r]) {
        done[r] = true;
        --running;
        progressed = true;
        auto& re = result.ranks[r];
        if (WIFSIGNALED(status)) {
          re.signaled = true;
          re.signal = WTERMSIG(status);
        } else {
          re.exit_code = WEXITSTATUS(status);
        }
        if (!re.ok() && !first_failure) first_failure = clock::now();
      }
    }
    const auto now = clock::now();
    const bool past_grace = first_failure && now - *first_failure > o.grace;
    const bool past_deadline = now - start > o.deadline;
    const bool stopping = g_stop.load();
    if (running > 0 && (past_grace || past_deadline || stopping)) {
      for (int r = 0; r < o.world_size; ++r)
        if (!done[r]) {
          ::kill(pids[r], SIGKILL);
          result.ranks[r].killed_by_launcher = true;
        }
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  group.release();
  return result;
}

namespace {
std::optional<std::string> getenv_str(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int parse_env_int(const char* name, const std::string& value) {
  try {
    size_t pos = 0;
    int v = std::stoi(value, &pos);
    if (pos == value.size()) return v;
  } catch (...) {
  }
  throw UsageError(detail::concat("environment variable ", name, "=\"", value, "\" is not an integer"));
}
}  // namespace

namespace {
// SLURM_NTASKS_PER_NODE: "8", or "8(x2)" for 2 nodes of 8; "8,4" (nodes with different counts) has
// no one local world size.
int parse_tasks_per_node(const std::string& v) {
  const std::string head = v.substr(0, v.find('('));
  CP_CHECK_USAGE(v.find(',') == std::string::npos && !head.empty(), "environment variable SLURM_NTASKS_PER_NODE=\"",
                 v, "\": cpbench needs the same number of tasks on every node");
  return parse_env_int("SLURM_NTASKS_PER_NODE", head);
}

std::optional<RankEnv> slurm_rank_env() {
  const auto procid = getenv_str("SLURM_PROCID");
  const auto ntasks = getenv_str("SLURM_NTASKS");
  if (!procid || !ntasks || parse_env_int("SLURM_NTASKS", *ntasks) <= 1) return std::nullopt;
  RankEnv env;
  env.from_slurm = true;
  env.rank = parse_env_int("SLURM_PROCID", *procid);
  env.world_size = parse_env_int("SLURM_NTASKS", *ntasks);
  const auto localid = getenv_str("SLURM_LOCALID");
  const auto per_node = getenv_str("SLURM_NTASKS_PER_NODE");
  CP_CHECK_USAGE(localid && per_node, "a SLURM task (SLURM_PROCID=", *procid, ", SLURM_NTASKS=", *ntasks,
                 ") needs SLURM_LOCALID and SLURM_NTASKS_PER_NODE (srun --ntasks-per-node N sets them); got "
                 "SLURM_LOCALID=", localid.value_or("<unset>"), ", SLURM_NTASKS_PER_NODE=",
                 per_node.value_or("<unset>"));
  env.local_rank = parse_env_int("SLURM_LOCALID", *localid);
  env.local_world_size = parse_tasks_per_node(*per_node);
  return env;
}
}  // namespace

std::optional<RankEnv> rank_env_from_environment() {
  auto rank = getenv_str("RANK");
  auto world = getenv_str("WORLD_SIZE");
  RankEnv env;
  if (!rank && !world) {
    const auto slurm = slurm_rank_env();
    if (!slurm) return std::nullopt;
    env = *slurm;
  } else {
    CP_CHECK_USAGE(rank && world, "RANK and WORLD_SIZE must be set together (RANK=", rank.value_or("<unset>"),
                   ", WORLD_SIZE=", world.value_or("<unset>"), ")");
    env.rank = parse_env_int("RANK", *rank);
    env.world_size = parse_env_int("WORLD_SIZE", *world);
    env.local_rank = getenv_str("LOCAL_RANK") ? parse_env_int("LOCAL_RANK", *getenv_str("LOCAL_RANK")) : env.rank;
    env.local_world_size = getenv_str("LOCAL_WORLD_SIZE")
                               ? parse_env_int("LOCAL_WORLD_SIZE", *getenv_str("LOCAL_WORLD_SIZE"))
                               : env.world_size;
  }
  // A SLURM task reads SLURM's node id only (a stray NODE_RANK in its environment is not its own).
  for (const char* name : {"NODE_RANK", "GROUP_RANK", "SLURM_NODEID"}) {
    if (env.from_slurm && std::string(name) != "SLURM_NODEID") continue;
    if (auto v = getenv_str(name)) {
      env.node_rank = parse_env_int(name, *v);
      break;
    }
  }
  CP_CHECK_USAGE(env.local_world_size >= 1 && env.local_world_size <= env.world_size && env.local_rank >= 0 &&
                     env.local_rank < env.local_world_size,
                 "LOCAL_RANK=", env.local_rank, " / LOCAL_WORLD_SIZE=", env.local_world_size,
                 " do not fit WORLD_SIZE=", env.world_size);
  env.master_addr = getenv_str("MASTER_ADDR").value_or("127.0.0.1");
  auto port = getenv_str("MASTER_PORT");
  CP_CHECK_USAGE(port || env.world_size == 1, "MASTER_PORT must be set when WORLD_SIZE=", env.world_size);
  env.master_port = port ? parse_env_int("MASTER_PORT", *port) : 0;
  CP_CHECK_USAGE(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "RANK=", env.rank,
                 " is outside WORLD_SIZE=", env.world_size);
  return env;
}

}  // namespace cpbench::comm
