// cpbench command line. Parses argv (CLI11) into plain option structs and calls the library; every
// error becomes one readable line on stderr. Exit statuses (README "Exit codes"): 0 ok, 1 a failed
// case or a regression, 2 bad input or refused admission, 3 nothing ran, 4 compare inconclusive,
// 130 SIGINT.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "sharders/core/version.hpp"
#include "harness/fs_util.hpp"
#include "harness/cli/ab_command.hpp"
#include "harness/cli/history_command.hpp"
#include "harness/cli/layout_command.hpp"
#include "harness/cli/plan_command.hpp"
#include "harness/runner/device_memory.hpp"
#include "harness/runner/sweep.hpp"
#include "reports/compare.hpp"
#include "reports/json_report.hpp"
#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"

namespace {

std::string version_text() {
  std::ostringstream os;
  os << "cpbench " << cpbench::version() << " (commit " << cpbench::git_commit() << "), torch " << TORCH_VERSION
     << ", CUDA " << (torch::cuda::is_available() ? "available (" + std::to_string(torch::cuda::device_count()) + " GPU)" : "not available");
  return os.str();
}

// scenarios/quickstart.yaml next to the executable's source tree, or in the working directory.
std::string default_scenario() {
  const std::string rel = "scenarios/quickstart.yaml";
  if (cpbench::fsu::exists(rel)) return rel;
  const std::string src = std::string(CPBENCH_SOURCE_DIR) + "/" + rel;
  return src;
}

cpbench::Report load_report(const std::string& path) {
  try {
    return cpbench::report_from_json(cpbench::read_json_file(path));
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    throw cpbench::UsageError(msg.rfind(path, 0) == 0 ? msg : path + ": " + msg);
  }
}

int run_compare(const std::string& base_path, const std::string& new_path, const cpbench::CompareOptions& options) {
  const cpbench::Report base = load_report(base_path), next = load_report(new_path);
  if (base.partial) std::cerr << "cpbench compare: warning: " << base_path << " is a partial report\n";
  if (next.partial) std::cerr << "cpbench compare: warning: " << new_path << " is a partial report\n";
  const auto c = cpbench::compare_reports(base, next, options);
  std::cout << cpbench::comparison_table(c);
  return c.exit_status();
}

// A rank joined under torchrun / SLURM computes in this process: OpenMP reads OMP_WAIT_POLICY when
// the runtime loads, before main, so it is set by running this executable again with it (once; spawned
// ranks get it from the launcher). Spinning waits on a shared machine collapse whenever anything else
// runs (docs/measurement.md).
void passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || !std::getenv("RANK") || argv[1] == nullptr || std::string(argv[1]) != "run")
    return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on with active waits
}

}  // namespace

int main(int argc, char** argv) {
  passive_openmp_waits(argv);
  CLI::App app{"cpbench: context-parallel sequence sharding, correctness and throughput"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text);

  cpbench::LayoutCommandOptions layout_opts;
  std::string doc_lens_text;
  auto* layout_cmd = app.add_subcommand("layout", "show which rank owns which token under a layout");
  layout_cmd->add_option("--sharder", layout_opts.sharder, "layout name: " + cpbench::known_layouts_text())->required();
  layout_cmd->add_option("--cp", layout_opts.cp, "CP world size W")->required();
  layout_cmd->add_option("--seq-len", layout_opts.seq_len, "sequence length S (tokens, before padding)");
  layout_cmd->add_option("--doc-lens", doc_lens_text,
                         "document lengths, e.g. 7,12,5; a batch's rows separated by '/' (workload_balanced, thd), "
                         "e.g. 300,500,200/999");
  layout_cmd->add_option("--format", layout_opts.format, "table or json")->check(CLI::IsMember({"table", "json"}));
  layout_cmd->add_option("--mask", layout_opts.mask, "mask a data-dependent layout balances for (workload_balanced)");
  layout_cmd->add_option("--chunk-size", layout_opts.chunk_size, "workload_balanced chunk (0 = default rule)");

  cpbench::PlanCommandOptions plan_opts;
  auto* plan_cmd = app.add_subcommand("plan", "predict cost per layout x transport x W for a model, and recommend one");
  cpbench::add_plan_options(*plan_cmd, plan_opts);

  cpbench::RunOptions run_opts;
  run_opts.scenario_file = default_scenario();
  auto* run_cmd = app.add_subcommand("run", "run a scenario on real ranks and write report.json/.md/.html");
  run_cmd->add_option("scenario", run_opts.scenario_file, "scenario YAML (default: scenarios/quickstart.yaml)");
  run_cmd->add_option("--out", run_opts.out_dir, "output directory for the reports")->envname("CPBENCH_OUT");
  run_cmd->add_option("--filter", run_opts.filter, "only cases whose name matches this regex")->envname("CPBENCH_FILTER");
  run_cmd->add_option("-a,--axis", run_opts.overrides, "override a sweep axis, e.g. -a cp=[2,4] -a sharder=thd");
  run_cmd->add_flag("--allow-skips", run_opts.allow_skips, "exit 0 (not 3) when every case was skipped");
  run_cmd->add_option("--max-local-ranks", run_opts.max_local_ranks,
                      "most rank processes one case may start on this machine (default 4 x cores)")
      ->envname("CPBENCH_MAX_LOCAL_RANKS")
      ->check(CLI::PositiveNumber);

  std::string compare_base, compare_new;
  cpbench::CompareOptions compare_opts;
  double compare_threshold = compare_opts.threshold * 100, compare_max_noise = compare_opts.max_noise * 100;
  cpbench::AbOptions ab_opts;
  auto* compare_cmd = app.add_subcommand(
      "compare", "compare two report.json files (or, with --ab, two builds on one scenario); exit 1 on a regression");
  compare_cmd->add_option("base", compare_base, "baseline report.json (with --ab: the scenario YAML)");
  compare_cmd->add_option("new", compare_new, "new report.json (not with --ab)");
  compare_cmd->add_option("--metric", compare_opts.metric,
                          "what is judged: tokens_per_s (wall time, the default) or cpu_s (CPU ranks' CPU seconds per step)")
      ->check(CLI::IsMember(cpbench::compare_metrics()));
  compare_cmd->add_option("--threshold", compare_threshold,
                          "throughput drop that counts, in percent (default 5): the effect size")
      ->check(CLI::Range(0.0, 100.0));
  compare_cmd->add_option("--alpha", compare_opts.alpha, "Mann-Whitney U significance level (default 0.05)")
      ->check(CLI::Range(1e-9, 0.5));
  compare_cmd->add_option("--min-samples", compare_opts.min_samples,
                          "timed samples a side needs (default 2); sizes whose exact Mann-Whitney p cannot reach "
                          "--alpha are inconclusive whatever this says")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  compare_cmd->add_option("--max-noise", compare_max_noise,
                          "median noise (half its 95% interval, in percent; default 10) above which a drop must "
                          "exceed the two sides' noise summed")
      ->check(CLI::Range(0.0, 1000.0));
  double compare_busy_floor = compare_opts.busy_floor * 100;
  compare_cmd->add_option("--busy-floor", compare_busy_floor,
                          "a run measured on a busy machine: the drop must exceed this, in percent (default 30, "
                          "about twice the spread between invocations measured beside a build on the 2-core VM)")
      ->check(CLI::Range(0.0, 100.0));
  compare_cmd->add_option("--ab", ab_opts.base_exe,
                          "A/B mode: BASELINE_CPBENCH runs the scenario interleaved with this build, case by case");
  compare_cmd->add_option("--new-exe", ab_opts.new_exe, "A/B mode: the new build (default: this executable)");
  compare_cmd->add_option("--rounds", ab_opts.rounds,
                          "A/B mode: rounds per case and side, in ABBA / BAAB blocks (default 8; even)");
  compare_cmd->add_option("--seed", ab_opts.seed, "A/B mode: the seed of the blocks' order (default 1)");
  compare_cmd->add_option("--out", ab_opts.out_dir, "A/B mode: where both sides' reports go (default cpbench-ab)");
  compare_cmd->add_option("--filter", ab_opts.filter, "A/B mode: only cases whose name matches this regex");
  compare_cmd->add_option("-a,--axis", ab_opts.overrides, "A/B mode: key=[v1,v2] axis override for both builds");

  cpbench::HistoryCommandOptions history_opts;
  auto* history_cmd = cpbench::add_history_options(app, history_opts);

  cpbench::RankCommandOptions rank_opts;
  auto* rank_cmd = app.add_subcommand("_rank", "internal: one rank of a spawned group");
  rank_cmd->group("");  // hidden
  rank_cmd->add_option("--scenario", rank_opts.scenario_file)->required();
  rank_cmd->add_option("--cases", rank_opts.cases)->delimiter(',')->required();
  rank_cmd->add_option("--results", rank_opts.results_dir)->required();
  rank_cmd->add_option("-a", rank_opts.overrides);
  rank_cmd->add_option("--progress-done", rank_opts.progress_done);
  rank_cmd->add_option("--progress-total", rank_opts.progress_total);
  rank_cmd->add_option("--elapsed-before", rank_opts.elapsed_before_s);

  auto* device_memory_cmd = app.add_subcommand("_device_memory", "internal: free / total memory of each visible GPU");
  device_memory_cmd->group("");  // hidden

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*layout_cmd) {
      if (!doc_lens_text.empty()) cpbench::parse_doc_lens(doc_lens_text, layout_opts);
      return cpbench::run_layout_command(layout_opts);
    }
    if (*plan_cmd) return cpbench::run_plan_command(plan_opts);
    if (*run_cmd) return cpbench::run_command(run_opts);
    if (*rank_cmd) return cpbench::rank_command(rank_opts);
    if (*device_memory_cmd) {
      std::cout << cpbench::format_gpu_memory(cpbench::query_gpu_memory());
      return 0;
    }
    if (*history_cmd) return cpbench::run_history_command(history_opts);
    if (*compare_cmd) {
      compare_opts.threshold = compare_threshold / 100.0;
      compare_opts.max_noise = compare_max_noise / 100.0;
      compare_opts.busy_floor = compare_busy_floor / 100.0;
      if (!ab_opts.base_exe.empty()) {
        if (compare_base.empty() || !compare_new.empty())
          throw cpbench::UsageError("compare --ab BASELINE_CPBENCH SCENARIO: give exactly one scenario file");
        ab_opts.scenario = compare_base;
        ab_opts.compare = compare_opts;
        return cpbench::run_ab_command(ab_opts);
      }
      if (compare_base.empty() || compare_new.empty())
        throw cpbench::UsageError("compare BASE.json NEW.json: give both reports (or --ab BASELINE_CPBENCH SCENARIO)");
      return run_compare(compare_base, compare_new, compare_opts);
    }
  } catch (const cpbench::UsageError& e) {
    std::cerr << "cpbench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cpbench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
