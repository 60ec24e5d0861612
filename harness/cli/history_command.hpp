#pragma once
// `cpbench history add|check|show`: command-line glue for the run history (reports/history_store.hpp,
// reports/history_check.hpp). main.cpp adds the subcommand with add_history_options and dispatches to
// run_history_command; bad input (an unreadable or foreign report, a database that is not ours or is
// newer than this build, a metric no run has) becomes a UsageError: one line, exit 2.
#include <string>

#include "reports/history_check.hpp"

namespace CLI {
class App;
}

namespace cpbench {

struct HistoryCommandOptions {
  std::string action;  // add | check | show (the sub-subcommand that ran)
  std::string db = kDefaultHistoryDb;
  std::string report;         // add: the report.json
  std::string label;          // add: a free-form tag stored with the run
  HistoryCheckOptions check;  // check, show
  double threshold_pct = 5, min_effect_pct = 5;
  std::string html;             // show: write the trend page here
  std::string format = "text";  // show: text | json (on stdout)
};

// Registers `history` and its three subcommands on `app`, writing into `options`; returns `history`.
CLI::App* add_history_options(CLI::App& app, HistoryCommandOptions& options);
// add: 0 (the run's id on stdout). check: HistoryCheck::exit_status(). show: 0.
int run_history_command(HistoryCommandOptions options);

}  // namespace cpbench
