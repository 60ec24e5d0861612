#include "harness/runner/sweep.hpp"

#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

#include "harness/launcher/core_binding.hpp"
#include "harness/fs_util.hpp"
#include "harness/launcher/launcher.hpp"
#include "harness/runner/device_memory.hpp"
#include "harness/runner/admission.hpp"
#include "harness/runner/case_runner.hpp"
#include "harness/runner/machine_state.hpp"
#include "harness/runner/platform.hpp"
#include "harness/runner/reference_cache.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/comm/process_group.hpp"
#include "reports/json_report.hpp"
#include "reports/text_report.hpp"
#include "reports/trace_report.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/version.hpp"

namespace cpbench {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};
// The ranks are in their own process group (a terminal's Ctrl-C does not reach them), so the
// launcher stops them itself, at once; the sweep then writes its partial report.
void on_signal(int sig) {
  g_signal = sig;
  g_interrupted = true;
  comm::kill_running_ranks();
}

std::string result_path(const std::string& dir, int64_t index) { return dir + "/" + std::to_string(index) + ".json"; }
std::string error_path(const std::string& dir, int64_t index, int rank) {
  return dir + "/" + std::to_string(index) + ".rank" + std::to_string(rank) + ".err";
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

Environment environment(const ScenarioSpec& s, const std::string& launcher) {
  Environment e;
  e.cpbench_version = version();
  e.git_commit = git_commit();
  e.torch_version = TORCH_VERSION;
  e.cuda_available = torch::cuda::is_available();
  e.device = to_string(s.device);
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  e.host = host;
  e.started_at = now_iso();
  e.launcher = launcher;
  return e;
}

void write_reports(const Report& report, const std::string& out_dir) {
  write_json_file(out_dir + "/report.json", to_json(report));
  write_text_file(out_dir + "/report.md", markdown_report(report));
  write_text_file(out_dir + "/report.html", html_report(report));
  write_json_file(out_dir + "/trace.json", chrome_trace(report));
}

std::string fmt_seconds(double s) {
  std::ostringstream os;
  if (s >= 90)
    os << static_cast<int>(s / 60) << "m" << std::setw(2) << std::setfill('0') << static_cast<int>(s) % 60 << "s";
  else
    os << std::fixed << std::setprecision(1) << s << "s";
  return os.str();
}

void progress_line(int64_t done, int64_t total, const RunResult& r, double elapsed) {
  std::ostringstream os;
  os << "[" << done << "/" << total << "] " << r.name << "  " << r.status;
  if (r.status == "ok" && !r.outcome.empty() && r.expect == "mismatch") os << " (mismatch caught)";
  if (const Metric* m = r.metric("tokens_per_s"); m && r.status == "ok")
    os << "  " << std::fixed << std::setprecision(0) << m->value << " tokens/s";
  if (r.status != "ok" && !r.reason.empty()) os << ": " << r.reason.substr(0, 300);
  if (done < total && done > 0) os << "  (ETA " << fmt_seconds(elapsed / static_cast<double>(done) * static_cast<double>(total - done)) << ")";
  for (const auto& w : r.warnings) os << "\n  warning: " << w;
  std::cerr << os.str() << std::endl;
}

// Runs the given cases as one rank; rank 0 writes a result file per case. Returns non-zero after a
// case threw (the other ranks' collectives may be out of step, so the rank stops there).
int run_cases_as_rank(const ScenarioSpec& spec, const std::vector<CaseSpec>& cases, const comm::RankEnv& env,
                      const std::string& results_dir, int64_t done_before, int64_t total, double elapsed_before,
                      int64_t* skipped = nullptr) {
  // Ranks share this node's cores (LOCAL_WORLD_SIZE of them here, whatever the job's size): never
  // oversubscribe, or the intra-op threads' waits collapse whenever anything else runs.
  at::set_num_threads(static_cast<int>(threads_per_rank(env.local_world_size)));
  comm::RendezvousOptions ro;
  ro.master_addr = env.master_addr;
  ro.master_port = static_cast<std::uint16_t>(env.master_port);
  ro.rank = env.rank;
  ro.world_size = env.world_size;
  ro.timeout = std::chrono::milliseconds(spec.timeout_s * 1000);
  RankRuntime rt;
  rt.rank = env.rank;
  rt.world_size = env.world_size;
  rt.local_rank = env.local_rank;
  rt.local_world_size = env.local_world_size;
  rt.store = comm::connect_store(ro);
  rt.references = std::make_shared<ReferenceCache>(spec);
  if (const char* cpus = std::getenv("CPBENCH_RANK_CPUS"); cpus && *cpus) {
    try {
      rt.timed_cpus = parse_cpu_list(cpus);
    } catch (const std::invalid_argument& e) {
      CP_CHECK_USAGE(false, "CPBENCH_RANK_CPUS (rank ", env.rank, "): ", e.what());
    }
  }
  const char* fault_env = std::getenv("CPBENCH_FAULT");
  const FaultSpec fault = parse_fault(fault_env ? fault_env : "");
  if (fault.kind == "slow" || fault.kind == "work") {
    rt.slow_case = fault.case_index;
    rt.slow_rank = fault.rank;
    rt.slow_fraction = fault.slow_fraction;
    rt.slow_spins = fault.kind == "work";
  }
  if (fault.kind == "slowref") {
    rt.slowref_case = fault.case_index;
    rt.slowref_rank = fault.rank;
    rt.slowref_s = fault.slowref_s;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = done_before;
  const std::string& fault_kind = fault.kind;
  const int64_t fault_case = fault.case_index;
  const int fault_rank = fault.rank;
  for (const auto& c : cases) {
    RunResult r;
    if (c.index == fault_case && env.rank == fault_rank) {
      if (fault_kind == "crash") std::abort();
      if (fault_kind == "hang") std::this_thread::sleep_for(std::chrono::hours(1));
    }
    try {
      if (c.index == fault_case && env.rank == fault_rank && fault_kind == "throw")
        throw Error(detail::concat("injected fault in case ", c.index, " on rank ", env.rank));
      const std::string why = skip_reason(spec, c, env.world_size);
      if (!why.empty()) {
        r = result_skeleton(spec, c);
        r.status = "skipped";
        r.reason = why;
        if (skipped) ++*skipped;
      } else {
        r = run_case(spec, c, rt);
      }
    } catch (const c10::Error& e) {
      // c10 errors carry a C++ backtrace in what(); the report wants the message.
      std::string msg = e.what_without_backtrace();
      if (msg.find("timeout") != std::string::npos || msg.find("Timeout") != std::string::npos ||
          msg.find("Timed out") != std::string::npos)
        msg += detail::concat(" (a peer rank did not take part within timeout_s=", spec.timeout_s,
                              ": it died, hung, or is out of step)");
      std::ofstream(error_path(results_dir, c.index, env.rank)) << msg;
      return 1;
    } catch (const std::exception& e) {
      std::ofstream(error_path(results_dir, c.index, env.rank)) << e.what();
      return 1;
    }
    ++done;
    if (env.rank == 0) {
      write_json_file(result_path(results_dir, c.index), to_json(r));
      const double elapsed = elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      progress_line(done, total, r, elapsed);
    }
  }
  return 0;
}

RunResult failed_result(const ScenarioSpec& spec, const CaseSpec& c, const std::string& dir, int world,
                        const std::string& launcher_msg) {
  RunResult r = result_skeleton(spec, c);
  r.status = "failed";
  std::string msg;
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(error_path(dir, c.index, rank));
    if (!in) continue;
    std::stringstream ss;
    ss << in.rdbuf();
    msg += (msg.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + ": " + ss.str();
  }
  if (msg.empty()) msg = launcher_msg.empty() ? "the ranks ended without a result" : launcher_msg;
  else if (!launcher_msg.empty()) msg += " [" + launcher_msg + "]";
  r.reason = msg;
  return r;
}

int exit_status(const Report& report, bool allow_skips) {
  if (g_signal == SIGINT) return kExitInterrupted;
  int64_t failed = 0, skipped = 0;
  for (const auto& r : report.results) {
    failed += r.status == "failed";
    skipped += r.status == "skipped";
  }
  if (failed > 0 || report.partial) return kExitFailed;
  if (!allow_skips && skipped == static_cast<int64_t>(report.results.size())) return kExitNothingRan;
  return kExitOk;
}

}  // namespace

FaultSpec parse_fault(const std::string& text) {
  FaultSpec f;
  if (text.empty()) return f;
  const std::string what = "CPBENCH_FAULT=\"" + text +
                           "\": expected KIND:CASE:RANK with KIND crash, hang or throw, slow:CASE:RANK:PERCENT or "
                           "work:CASE:RANK:PERCENT with PERCENT in (0, 1000], or slowref:CASE:RANK:SECONDS with SECONDS "
                           "in (0, 3600], CASE a case index and RANK a rank (a test hook, docs/scenarios.md)";
  std::vector<std::string> parts;
  for (size_t from = 0;;) {
    const size_t colon = text.find(':', from);
    parts.push_back(text.substr(from, colon == std::string::npos ? std::string::npos : colon - from));
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  f.kind = parts[0];
  const bool slow = f.kind == "slow" || f.kind == "work" || f.kind == "slowref";
  CP_CHECK_USAGE(f.kind == "crash" || f.kind == "hang" || f.kind == "throw" || slow, what);
  CP_CHECK_USAGE(parts.size() == (slow ? 4u : 3u), what);
  auto number = [&](const std::string& t, int64_t max) {
    int64_t v = -1;
    const bool digits = !t.empty() && t.size() <= 18 && std::all_of(t.begin(), t.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (digits) v = std::stoll(t);
    CP_CHECK_USAGE(digits && v <= max, what);
    return v;
  };
  f.case_index = number(parts[1], std::numeric_limits<int64_t>::max());
  f.rank = static_cast<int>(number(parts[2], std::numeric_limits<int>::max()));
  if (slow) {
    double pct = 0;
    size_t pos = 0;
    try {
      pct = std::stod(parts[3], &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (f.kind == "slowref") {
      CP_CHECK_USAGE(pos == parts[3].size() && pos > 0 && pct > 0 && pct <= 3600, what);
      f.slowref_s = pct;
    } else {
      CP_CHECK_USAGE(pos == parts[3].size() && pos > 0 && pct > 0 && pct <= 1000, what);
      f.slow_fraction = pct / 100.0;
    }
  }
  return f;
}

int rank_command(const RankCommandOptions& o) {
  auto env = comm::rank_env_from_environment();
  CP_CHECK_USAGE(env.has_value(), "_rank needs RANK / WORLD_SIZE in the environment (it is started by cpbench run)");
  ScenarioSpec spec = load_scenario(o.scenario_file, o.overrides);
  std::vector<CaseSpec> cases;
  for (auto i : o.cases) {
    CP_CHECK_USAGE(i >= 0 && i < static_cast<int64_t>(spec.cases.size()), "_rank: case index ", i, " is out of range");
    cases.push_back(spec.cases[static_cast<size_t>(i)]);
  }
  return run_cases_as_rank(spec, cases, *env, o.results_dir, o.progress_done, o.progress_total, o.elapsed_before_s);
}

int run_command(const RunOptions& o) {
  ScenarioSpec spec = load_scenario(o.scenario_file, o.overrides);
  std::vector<CaseSpec> cases = filter_cases(spec.cases, o.filter);
  CP_CHECK_USAGE(!cases.empty(), o.scenario_file, ": no case matches --filter '", o.filter, "' (", spec.cases.size(),
                 " cases in the scenario, e.g. ", spec.cases.empty() ? "none" : spec.cases.front().name(), ")");
  const auto env = comm::rank_env_from_environment();
  if (const char* f = std::getenv("CPBENCH_FAULT")) (void)parse_fault(f);  // bad values: exit 2 here, not in a rank

  // Admission before anything is started or written (admission.hpp).
  // device: cuda: the same memory terms against each GPU's free memory, asked of a child process.
  const auto gpus = [&] {
    return spec.device == DeviceKind::cuda && torch::cuda::is_available() ? gpu_memory_from_child(comm::self_executable())
                                                                          : std::vector<GpuMemory>{};
  };
  if (env) {
    // The local world size the environment gave (torchrun's LOCAL_WORLD_SIZE or SLURM's tasks per node).
    const int local = env->from_slurm || std::getenv("LOCAL_WORLD_SIZE") ? std::max(1, env->local_world_size) : 1;
    admit(spec, cases, host_limits(), local, env->world_size);
    admit_device(spec, cases, gpus(), local, env->world_size);
  } else {
    admit(spec, cases, host_limits(o.max_local_ranks));
    admit_device(spec, cases, gpus());
  }

  try {
    fsu::make_dirs(o.out_dir);
  } catch (const Error& e) {
    throw UsageError(detail::concat("--out ", o.out_dir, ": ", e.what()));
  }
  const std::string results_dir = o.out_dir + "/.cases";

  Report report;
  report.scenario_name = spec.name;
  report.scenario_file = o.scenario_file;
  report.env = environment(spec, env ? "joined" : "spawned");
  report.total_cases = static_cast<int64_t>(cases.size());
  report.partial = true;
  report.partial_reason = "running";
  int max_world = 0;
  for (const auto& c : cases) max_world = std::max<int>(max_world, static_cast<int>(c.world_size()));
  report.env.world_size = env ? env->world_size : max_world;
  report.env.platform = platform_info(report.env.world_size, env ? env->local_world_size : max_world);

  if (env) {
    // Joined: every rank runs the cases; rank 0 reports.
    if (env->rank == 0) {
      fsu::remove_tree(results_dir);
      fsu::make_dirs(results_dir);
    }
    int64_t skipped = 0;
    const int rc =
        run_cases_as_rank(spec, cases, *env, results_dir, 0, static_cast<int64_t>(cases.size()), 0, &skipped);
    // Ranks other than 0 know whether their cases ran or were skipped, not whether they passed.
    if (env->rank != 0)
      return rc != 0 ? kExitFailed
                     : (!o.allow_skips && skipped == static_cast<int64_t>(cases.size()) ? kExitNothingRan : kExitOk);
    for (const auto& c : cases) {
      if (fsu::exists(result_path(results_dir, c.index)))
        report.results.push_back(run_result_from_json(read_json_file(result_path(results_dir, c.index))));
      else
        report.results.push_back(failed_result(spec, c, results_dir, env->world_size, ""));
      if (rc != 0 && report.results.back().status == "failed") break;
    }
    report.partial = report.results.size() < cases.size();
    report.partial_reason = report.partial ? "a case failed and ended this job's ranks" : "";
  } else {
    fsu::remove_tree(results_dir);
    fsu::make_dirs(results_dir);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    // Group by world size, keeping the scenario's order within a group.
    std::map<int64_t, std::vector<CaseSpec>> groups;
    std::vector<int64_t> order;
    for (const auto& c : cases) {
      if (!groups.count(c.world_size())) order.push_back(c.world_size());
      groups[c.world_size()].push_back(c);
    }
    std::map<int64_t, RunResult> by_index;
    const auto t0 = std::chrono::steady_clock::now();
    auto flush = [&]() {
      report.results.clear();
      for (const auto& [i, r] : by_index) report.results.push_back(r);
      write_reports(report, o.out_dir);
    };
    flush();
    for (int64_t world : order) {
      std::vector<CaseSpec> remaining = groups[world];
      while (!remaining.empty() && !g_interrupted) {
        comm::LaunchOptions lo;
        lo.executable = comm::self_executable();
        lo.world_size = static_cast<int>(world);
        lo.args = {"_rank", "--scenario", o.scenario_file, "--results", results_dir, "--progress-done",
                   std::to_string(by_index.size()), "--progress-total", std::to_string(cases.size()),
                   "--elapsed-before",
                   std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())};
        std::string idx;
        for (const auto& c : remaining) idx += (idx.empty() ? "" : ",") + std::to_string(c.index);
        lo.args.push_back("--cases");
        lo.args.push_back(idx);
        for (const auto& a : o.overrides) {
          lo.args.push_back("-a");
          lo.args.push_back(a);
        }
        lo.env["OMP_NUM_THREADS"] = std::to_string(std::max<unsigned>(1, std::thread::hardware_concurrency() / world));
        // After one rank fails, give the others a moment to report their own view, then stop them.
        lo.grace = std::chrono::seconds(5);
        // Each case may also wait for its references (reference_timeout_s) before its collectives.
        lo.deadline = std::chrono::seconds((spec.timeout_s + spec.reference_timeout_s) *
                                               static_cast<int64_t>(remaining.size()) + 60);
        comm::LaunchResult lr;
        try {
          lr = comm::launch(lo);
        } catch (const Error& e) {
          // Could not start the ranks at all: every remaining case of the group fails with the reason.
          for (const auto& c : remaining) by_index[c.index] = failed_result(spec, c, results_dir, 0, e.what());
          flush();
          remaining.clear();
          break;
        }
        std::vector<CaseSpec> next;
        bool failed_one = false;
        for (const auto& c : remaining) {
          if (failed_one) {
            next.push_back(c);
          } else if (fsu::exists(result_path(results_dir, c.index))) {
            by_index[c.index] = run_result_from_json(read_json_file(result_path(results_dir, c.index)));
          } else {
            std::string msg = lr.ok() ? "" : lr.describe_failures();
            while (!msg.empty() && msg.back() == '\n') msg.pop_back();
            for (auto& ch : msg)
              if (ch == '\n') ch = ';';
            if (g_interrupted) msg = "interrupted";
            by_index[c.index] = failed_result(spec, c, results_dir, static_cast<int>(world), msg);
            progress_line(static_cast<int64_t>(by_index.size()), static_cast<int64_t>(cases.size()), by_index[c.index],
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            failed_one = true;
          }
        }
        flush();
        remaining = next;
      }
      if (g_interrupted) break;
    }
    report.partial = g_interrupted || by_index.size() < cases.size();
    report.partial_reason = report.partial ? (g_interrupted ? "interrupted" : "incomplete") : "";
    flush();
  }
  write_reports(report, o.out_dir);

  std::cout << summary_table(report);
  std::cout << "reports: " << o.out_dir << "/report.json, " << o.out_dir << "/report.md, " << o.out_dir
            << "/report.html, " << o.out_dir << "/trace.json\n";
  if (g_signal == SIGTERM) {
    // Report written and ranks gone: now end the way SIGTERM ends a process.
    std::cout.flush();
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  }
  const int status = exit_status(report, o.allow_skips);
  if (status == kExitNothingRan)
    std::cerr << "cpbench: nothing ran: every case was skipped (see the reasons above); --allow-skips makes this exit 0\n";
  return status;
}

}  // namespace cpbench
