#include "harness/cli/ab_command.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include "harness/fs_util.hpp"
#include "harness/runner/scenario.hpp"
#include "reports/json_report.hpp"
#include "reports/statistics.hpp"
#include "sharders/core/check.hpp"

extern char** environ;

namespace cpbench {

std::string exact_name_regex(const std::string& name) {
  std::string out = "^";
  for (char ch : name) {
    if (std::string(".^$|()[]{}*+?\\").find(ch) != std::string::npos) out += '\\';
    out += ch;
  }
  return out + "$";
}

namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  CP_CHECK(n > 0, "compare --ab: cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

// Runs `exe run ...` for one case; its output goes to `log`. Exit 0 or 1 (a failed case) both leave a
// report; anything else is an error naming the log.
void run_side(const std::string& exe, const AbOptions& o, const std::string& case_name, const std::string& out,
              const std::string& log) {
  std::vector<std::string> args = {exe, "run", o.scenario, "--filter", exact_name_regex(case_name), "--out", out};
  for (const auto& a : o.overrides) {
    args.push_back("-a");
    args.push_back(a);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  CP_CHECK_USAGE(rc == 0, "compare --ab: cannot start ", exe, ": ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  CP_CHECK(code == 0 || code == 1, "compare --ab: ", exe, " run for case ", case_name, " exited with status ", code,
           " (log: ", log, ")");
}

}  // namespace

int run_ab_command(const AbOptions& o) {
  CP_CHECK_USAGE(o.rounds >= 1, "compare --ab: --rounds must be >= 1, got ", o.rounds);
  CP_CHECK_USAGE(fsu::exists(o.base_exe), "compare --ab: baseline executable ", o.base_exe, " does not exist");
  const std::string new_exe = o.new_exe.empty() ? self_exe() : o.new_exe;
  CP_CHECK_USAGE(fsu::exists(new_exe), "compare --ab: --new-exe ", new_exe, " does not exist");
  const ScenarioSpec spec = load_scenario(o.scenario, o.overrides);
  const std::vector<CaseSpec> cases = filter_cases(spec.cases, o.filter);
  CP_CHECK_USAGE(!cases.empty(), o.scenario, ": no case matches --filter '", o.filter, "'");
  fsu::make_dirs(o.out_dir + "/base");
  fsu::make_dirs(o.out_dir + "/new");
  std::vector<Report> base_runs, new_runs;
  // Per case, each round's (base, new) median step time: a regression must show in every round.
  std::map<std::string, std::vector<std::pair<double, double>>> rounds;
  const auto median_step = [](const Report& rep) {
    return rep.results.empty() ? 0.0 : stats::median(rep.results.front().measurement.step_s);
  };
  for (const auto& c : cases) {
    for (int r = 0; r < o.rounds; ++r) {
      const std::string tag = std::to_string(c.index) + "-r" + std::to_string(r);
      // ABBA: the side that goes first alternates, so a drift in the machine's load cancels.
      for (int k = 0; k < 2; ++k) {
        const bool base_side = (k == 0) == (r % 2 == 0);
        const std::string dir = o.out_dir + (base_side ? "/base/" : "/new/") + tag;
        std::cerr << "[ab] " << c.name() << " round " << r + 1 << "/" << o.rounds << ": "
                  << (base_side ? "base" : "new") << std::endl;
        run_side(base_side ? o.base_exe : new_exe, o, c.name(), dir, dir + ".log");
        (base_side ? base_runs : new_runs).push_back(report_from_json(read_json_file(dir + "/report.json")));
      }
      rounds[c.name()].emplace_back(median_step(base_runs.back()), median_step(new_runs.back()));
    }
  }
  CompareOptions opts = o.compare;
  opts.ignore_noisy_verdict = true;  // the machine's load is in both sides' samples alike
  Comparison cmp = compare_reports(pool_runs(base_runs), pool_runs(new_runs), opts);
  for (auto& d : cmp.cases) {
    if (!d.regression || d.new_status != "ok") continue;
    // Pooled samples can be swayed by one disturbed round: the drop must appear in each round's pair
    // (new slower than base by at least half the threshold), else the rounds disagree.
    for (const auto& [b, n] : rounds[d.name])
      if (!(b > 0 && n > 0 && b / n - 1.0 < -opts.threshold / 2)) {
        d.regression = false;
        d.inconclusive = true;
        d.why += ", but the rounds disagree (a round's new median is within half the threshold of its base)";
        break;
      }
  }
  const std::string table = comparison_table(cmp);
  std::cout << table;
  std::ofstream(o.out_dir + "/comparison.txt") << table;
  return cmp.exit_status();
}

}  // namespace cpbench
