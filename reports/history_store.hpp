#pragma once
// The run history: every run of a scenario that someone chose to keep, with what it measured, in a store
// behind a narrow interface (add a run in one transaction; read the runs back in the order they were
// added). Stores are registered by scheme; SQLite, an embedded file, is the default (sqlite_store.cpp);
// a server database is another file pair and one registration line.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reports/result.hpp"

namespace cpbench {

// One case of a stored run: its status, every metric (name -> value, unit) and its samples.
struct HistoryCase {
  std::string name, status;
  std::map<std::string, Metric> metrics;  // Metric::name repeated as the key
  std::vector<double> step_s;             // every timed step's time (s)
  std::vector<double> cpu_s;              // every timed step's CPU seconds (CPU ranks; else empty)
  bool busy = false;                      // measured on a busy machine (MachineState::busy)
};

// One stored run. `id` is the store's, increasing in the order runs were added (the series' order).
struct HistoryRun {
  int64_t id = 0;
  std::string commit, version, started_at, added_at, host, device, label, scenario;
  std::string environment_json;  // the report's "environment" object, verbatim
  std::vector<HistoryCase> cases;
};

// The canary's readings (CanaryReading, reports/result.hpp) as each stored case's metrics.
inline constexpr const char* kCanaryMemoryMetric = "canary_memory_s";
inline constexpr const char* kCanaryComputeMetric = "canary_compute_s";

// A run from a report (its environment, every case's metrics, the canary's readings as two of them, and
// its samples). Refuses a partial report.
[[nodiscard]] HistoryRun history_run_from_report(const Report& report, const std::string& label);

class HistoryStore {
 public:
  virtual ~HistoryStore() = default;
  // Adds the run and every case, metric and sample in one transaction (all or nothing); returns its id.
  // Concurrent adds from several processes serialise (the store's locking), never interleave.
  virtual int64_t add(const HistoryRun& run) = 0;
  // Every run, oldest first, with its cases.
  [[nodiscard]] virtual std::vector<HistoryRun> runs() const = 0;
  // "sqlite:cpbench-history.db" etc., for messages.
  [[nodiscard]] virtual std::string describe() const = 0;
};

// Opens the store at `where`: "SCHEME:REST", or a plain path for the default (SQLite). `create`: an
// absent store is created (history add); otherwise it is bad input (history check / show). Bad input (a
// file that is not ours, a schema newer than this build, an unknown scheme, which lists the known ones)
// throws std::invalid_argument naming the path; the CLI turns it into one line and exit 2.
[[nodiscard]] std::unique_ptr<HistoryStore> open_history_store(const std::string& where, bool create);

using HistoryStoreFactory = std::function<std::unique_ptr<HistoryStore>(const std::string& rest, bool create)>;
// Registers a scheme; returns true (for static registration).
bool register_history_store(const std::string& scheme, HistoryStoreFactory factory);
[[nodiscard]] std::vector<std::string> history_store_schemes();

// The database file `history add` and friends use without --db.
inline constexpr const char* kDefaultHistoryDb = "cpbench-history.db";

}  // namespace cpbench
