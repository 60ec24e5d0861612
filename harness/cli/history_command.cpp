#include "harness/cli/history_command.hpp"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <stdexcept>

#include "reports/json_report.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {
namespace {

void add_db(CLI::App& cmd, HistoryCommandOptions& o) {
  cmd.add_option("--db", o.db, "the history: an SQLite file (default cpbench-history.db), or SCHEME:WHERE")
      ->envname("CPBENCH_HISTORY_DB");
}

void add_check_options(CLI::App& cmd, HistoryCommandOptions& o) {
  cmd.add_option("--metric", o.check.metric, "the metric judged per case (default tokens_per_s; any stored metric)");
  cmd.add_option("--filter", o.check.filter, "only cases whose name matches this regex");
  cmd.add_option("--threshold", o.threshold_pct,
                 "the newest change point fails when it slows the case by more than this, in percent (default 5)")
      ->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--min-effect", o.min_effect_pct,
                 "change points smaller than this, in percent, are dropped (default 5)")
      ->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--min-segment", o.check.change.min_segment, "runs on each side of a change point (default 3)")
      ->check(CLI::Range(int64_t{2}, int64_t{1000}));
  cmd.add_option("--alpha", o.check.change.alpha, "the permutation test's significance level (default 0.05)")
      ->check(CLI::Range(1e-6, 0.5));
  cmd.add_option("--permutations", o.check.change.permutations, "permutations per test (default 199)")
      ->check(CLI::Range(19, 100000));
}

std::unique_ptr<HistoryStore> open_store(const std::string& db, bool create) {
  try {
    return open_history_store(db, create);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

HistoryCheck judge(const HistoryCommandOptions& o) {
  const auto store = open_store(o.db, false);
  HistoryCheckOptions opts = o.check;
  opts.threshold = o.threshold_pct / 100;
  opts.min_effect = o.min_effect_pct / 100;
  try {
    return check_history(store->runs(), opts, store->describe());
  } catch (const std::invalid_argument& e) {
    throw UsageError(o.db + ": " + e.what());
  }
}

}  // namespace

CLI::App* add_history_options(CLI::App& app, HistoryCommandOptions& o) {
  auto* history = app.add_subcommand("history", "keep runs in a store and find where a case got slower");
  history->require_subcommand(1);
  auto* add = history->add_subcommand("add", "store a report.json's run (one transaction)");
  add->add_option("report", o.report, "the report.json to store")->required();
  add->add_option("--label", o.label, "a tag stored with the run (nightly, a branch, ...)");
  add_db(*add, o);
  add->callback([&o] { o.action = "add"; });
  auto* check = history->add_subcommand(
      "check", "change points per case (E-Divisive means); exit 1 when the newest is a slowdown beyond --threshold");
  add_db(*check, o);
  add_check_options(*check, o);
  check->callback([&o] { o.action = "check"; });
  auto* show =
      history->add_subcommand("show", "the series and change points: --html OUT (a trend page) or --format json");
  add_db(*show, o);
  add_check_options(*show, o);
  show->add_option("--html", o.html, "write the trend page here");
  show->add_option("--format", o.format, "text or json on stdout")->check(CLI::IsMember({"text", "json"}));
  show->callback([&o] { o.action = "show"; });
  return history;
}

int run_history_command(HistoryCommandOptions o) {
  if (o.action == "add") {
    Report report;
    try {
      report = report_from_json(read_json_file(o.report));
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      throw UsageError(msg.rfind(o.report, 0) == 0 ? msg : o.report + ": " + msg);
    }
    HistoryRun run;
    try {
      run = history_run_from_report(report, o.label);
    } catch (const std::invalid_argument& e) {
      throw UsageError(o.report + ": " + e.what());
    }
    const auto store = open_store(o.db, true);
    const int64_t id = store->add(run);
    std::cout << "run " << id << " (" << run.cases.size() << " cases, commit " << run.commit << ") added to "
              << store->describe() << "\n";
    return 0;
  }
  const HistoryCheck h = judge(o);
  if (o.action == "check") {
    std::cout << history_check_text(h);
    return h.exit_status();
  }
  if (!o.html.empty()) {
    std::ofstream out(o.html);
    CP_CHECK_USAGE(static_cast<bool>(out), "history show --html ", o.html, ": cannot write");
    out << history_html(h);
    CP_CHECK_USAGE(static_cast<bool>(out), "history show --html ", o.html, ": write failed");
    std::cerr << "wrote " << o.html << "\n";
  }
  if (o.format == "json")
    std::cout << history_json(h).dump(2) << "\n";
  else if (o.html.empty())
    std::cout << history_check_text(h);
  return 0;
}

}  // namespace cpbench
