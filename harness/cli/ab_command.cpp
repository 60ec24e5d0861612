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

#include "harness/fs_util.hpp"
#include "harness/runner/scenario.hpp"
#include "reports/ab_schedule.hpp"
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

namespace {

// One round's result into its side of a pair: its status and the median of its judged samples.
void record_round(const Report& rep, const std::string& metric, bool base_side, PairedRound& into) {
  std::string status = "failed", reason = "no result in the report";
  double median = 0;
  if (!rep.results.empty()) {
    const RunResult& r = rep.results.front();
    status = r.status;
    reason = r.reason;
    median = stats::median(metric == "cpu_s" ? r.measurement.cpu_s : r.measurement.step_s);
  }
  (base_side ? into.base_status : into.new_status) = status;
  (base_side ? into.base_reason : into.new_reason) = reason;
  (base_side ? into.base_s : into.new_s) = median;
}

}  // namespace

int run_ab_command(const AbOptions& o) {
  CP_CHECK_USAGE(o.rounds >= 2, "compare --ab: --rounds must be >= 2 (one ABBA block), got ", o.rounds);
  CP_CHECK_USAGE(fsu::exists(o.base_exe), "compare --ab: baseline executable ", o.base_exe, " does not exist");
  const std::string new_exe = o.new_exe.empty() ? self_exe() : o.new_exe;
  CP_CHECK_USAGE(fsu::exists(new_exe), "compare --ab: --new-exe ", new_exe, " does not exist");
  const ScenarioSpec spec = load_scenario(o.scenario, o.overrides);
  const std::vector<CaseSpec> cases = filter_cases(spec.cases, o.filter);
  CP_CHECK_USAGE(!cases.empty(), o.scenario, ": no case matches --filter '", o.filter, "'");
  fsu::make_dirs(o.out_dir + "/base");
  fsu::make_dirs(o.out_dir + "/new");
  const int64_t blocks = (o.rounds + 1) / 2;
  std::vector<PairedCase> paired(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    paired[i].name = cases[i].name();
    paired[i].pairs.resize(static_cast<size_t>(2 * blocks));
  }
  for (const AbRound& round : ab_schedule(static_cast<int64_t>(cases.size()), o.rounds, o.seed)) {
    const CaseSpec& c = cases[static_cast<size_t>(round.case_index)];
    PairedRound& pair = paired[static_cast<size_t>(round.case_index)].pairs[static_cast<size_t>(round.pair)];
    const std::string tag = std::to_string(c.index) + "-b" + std::to_string(round.block) + "-" +
                            std::to_string(round.pair - 2 * round.block);
    const std::string dir = o.out_dir + (round.base_side ? "/base/" : "/new/") + tag;
    std::cerr << "[ab] " << c.name() << " block " << round.block + 1 << "/" << blocks << ": "
              << (round.base_side ? "base" : "new") << std::endl;
    run_side(round.base_side ? o.base_exe : new_exe, o, c.name(), dir, dir + ".log");
    record_round(report_from_json(read_json_file(dir + "/report.json")), o.compare.metric, round.base_side, pair);
    pair.base_first = round.base_first;
  }
  PairedOptions po;
  po.threshold = o.compare.threshold;
  po.alpha = o.compare.alpha;
  std::vector<PairedVerdict> verdicts;
  for (const auto& pc : paired) verdicts.push_back(judge_paired(pc, po));
  const std::string table = paired_table(verdicts, po, o.compare.metric);
  std::cout << table;
  std::ofstream(o.out_dir + "/comparison.txt") << table;
  return paired_exit_status(verdicts);
}

}  // namespace cpbench
