#pragma once
// Starting the cpbench binary from multi-process tests: `cpbench run ARGS` in its own process group
// (as a shell job, so a test can signal the whole group), with this process's environment plus
// `extra_env` entries and OMP_NUM_THREADS=1 (two cores: ranks must not oversubscribe them).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <string>
#include <vector>
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

extern char** environ;

namespace cpbench::test {

// The pid of the started `cpbench run` (-1, with a test failure, when it could not start).
inline pid_t spawn_cpbench_run(const std::vector<std::string>& run_args, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> args = {CPBENCH_EXE, "run"};
  args.insert(args.end(), run_args.begin(), run_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.push_back(*e);
  for (const auto& e : extra_env)
    if (!e.empty()) env_s.push_back(e);
  env_s.push_back("OMP_NUM_THREADS=1");
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, CPBENCH_EXE, nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  EXPECT_EQ(rc, 0) << "could not start " << CPBENCH_EXE;
  return rc == 0 ? pid : -1;
}

// Waits for `pid`; its exit status as a shell reports it (128 + signal when killed), -1 for no pid.
inline int wait_exit_status(pid_t pid) {
  if (pid < 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace cpbench::test
