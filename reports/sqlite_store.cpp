#include "reports/sqlite_store.hpp"

#include <SQLiteCpp/SQLiteCpp.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>
#include <stdexcept>

namespace cpbench {
namespace {

constexpr int kBusyTimeoutMs = 60000;

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

class SqliteStore final : public HistoryStore {
 public:
  SqliteStore(const std::string& path, bool create) : path_(path), db_(open(path, create)) { check_schema(create); }

  int64_t add(const HistoryRun& run) override {
    try {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      SQLite::Statement r(db_,
                          "INSERT INTO runs(added_at, started_at, commit_id, version, host, device, label, scenario, "
                          "environment) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
      r.bind(1, utc_now());
      r.bind(2, run.started_at);
      r.bind(3, run.commit);
      r.bind(4, run.version);
      r.bind(5, run.host);
      r.bind(6, run.device);
      r.bind(7, run.label);
      r.bind(8, run.scenario);
      r.bind(9, run.environment_json);
      r.exec();
      const int64_t id = db_.getLastInsertRowid();
      SQLite::Statement c(db_,
                          "INSERT INTO cases(run_id, name, status, busy, step_s, cpu_s) VALUES (?, ?, ?, ?, ?, ?)");
      SQLite::Statement m(
          db_, "INSERT INTO metrics(run_id, case_name, name, value, unit, spread) VALUES (?, ?, ?, ?, ?, ?)");
      for (const auto& hc : run.cases) {
        c.bind(1, id);
        c.bind(2, hc.name);
        c.bind(3, hc.status);
        c.bind(4, hc.busy ? 1 : 0);
        c.bind(5, nlohmann::json(hc.step_s).dump());
        c.bind(6, nlohmann::json(hc.cpu_s).dump());
        c.exec();
        c.reset();
        for (const auto& [name, metric] : hc.metrics) {
          m.bind(1, id);
          m.bind(2, hc.name);
          m.bind(3, name);
          m.bind(4, metric.value);
          m.bind(5, metric.unit);
          m.bind(6, metric.spread);
          m.exec();
          m.reset();
        }
      }
      tx.commit();
      return id;
    } catch (const SQLite::Exception& e) {
      throw std::runtime_error(path_ + ": adding the run failed, nothing was stored: " + e.what());
    }
  }

  std::vector<HistoryRun> runs() const override {
    std::vector<HistoryRun> out;
    std::map<int64_t, size_t> where;
    SQLite::Statement r(db_,
                        "SELECT id, added_at, started_at, commit_id, version, host, device, label, scenario, "
                        "environment FROM runs ORDER BY id");
    while (r.executeStep()) {
      HistoryRun run;
      run.id = r.getColumn(0).getInt64();
      run.added_at = r.getColumn(1).getString();
      run.started_at = r.getColumn(2).getString();
      run.commit = r.getColumn(3).getString();
      run.version = r.getColumn(4).getString();
      run.host = r.getColumn(5).getString();
      run.device = r.getColumn(6).getString();
      run.label = r.getColumn(7).getString();
      run.scenario = r.getColumn(8).getString();
      run.environment_json = r.getColumn(9).getString();
      where[run.id] = out.size();
      out.push_back(std::move(run));
    }
    std::map<std::pair<int64_t, std::string>, HistoryCase*> cases;
    SQLite::Statement c(db_, "SELECT run_id, name, status, busy, step_s, cpu_s FROM cases ORDER BY run_id, rowid");
    while (c.executeStep()) {
      const int64_t id = c.getColumn(0).getInt64();
      auto it = where.find(id);
      if (it == where.end()) continue;
      HistoryCase hc;
      hc.name = c.getColumn(1).getString();
      hc.status = c.getColumn(2).getString();
      hc.busy = c.getColumn(3).getInt() != 0;
      hc.step_s = nlohmann::json::parse(c.getColumn(4).getString()).get<std::vector<double>>();
      hc.cpu_s = nlohmann::json::parse(c.getColumn(5).getString()).get<std::vector<double>>();
      auto& list = out[it->second].cases;
      list.push_back(std::move(hc));
    }
    for (auto& run : out)
      for (auto& hc : run.cases) cases[{run.id, hc.name}] = &hc;
    SQLite::Statement m(db_, "SELECT run_id, case_name, name, value, unit, spread FROM metrics");
    while (m.executeStep()) {
      auto it = cases.find({m.getColumn(0).getInt64(), m.getColumn(1).getString()});
      if (it == cases.end()) continue;
      Metric metric{m.getColumn(2).getString(), m.getColumn(3).getDouble(), m.getColumn(4).getString(),
                    m.getColumn(5).getDouble()};
      it->second->metrics[metric.name] = metric;
    }
    return out;
  }

  std::string describe() const override { return "sqlite:" + path_; }

 private:
  static SQLite::Database open(const std::string& path, bool create) {
    if (!create && !file_exists(path))
      throw std::invalid_argument(path + ": no such history database (`cpbench history add` creates one)");
    try {
      return SQLite::Database(path, SQLite::OPEN_READWRITE | (create ? SQLite::OPEN_CREATE : 0), kBusyTimeoutMs);
    } catch (const SQLite::Exception& e) {
      throw std::invalid_argument(path + ": cannot open as an SQLite database: " + e.what());
    }
  }

  void check_schema(bool create) {
    try {
      int tables = 0;
      {
        SQLite::Statement q(db_, "SELECT count(*) FROM sqlite_master WHERE type = 'table'");
        q.executeStep();
        tables = q.getColumn(0).getInt();
      }
      if (tables == 0) {
        if (!create) throw std::invalid_argument(path_ + ": an empty database, no history in it");
        initialise();
        return;
      }
      if (!db_.tableExists("meta"))
        throw std::invalid_argument(path_ + ": an SQLite database, but not a cpbench history (no meta table)");
      SQLite::Statement q(db_, "SELECT key, value FROM meta");
      std::map<std::string, std::string> meta;
      while (q.executeStep()) meta[q.getColumn(0).getString()] = q.getColumn(1).getString();
      if (meta["schema"] != "cpbench-history")
        throw std::invalid_argument(path_ + ": an SQLite database, but not a cpbench history (meta.schema '" +
                                    meta["schema"] + "')");
      int version = 0;
      try {
        version = std::stoi(meta["version"]);
      } catch (const std::exception&) {
        throw std::invalid_argument(path_ + ": history meta.version '" + meta["version"] + "' is not a number");
      }
      if (version > kHistorySchemaVersion)
        throw std::invalid_argument(path_ + ": history schema version " + std::to_string(version) +
                                    " is newer than this cpbench (reads up to " +
                                    std::to_string(kHistorySchemaVersion) + "): use a newer build");
    } catch (const SQLite::Exception& e) {
      throw std::invalid_argument(path_ + ": not a usable SQLite database: " + e.what());
    }
  }

  // Two processes creating one new file at once: the IMMEDIATE transaction serialises them and the
  // IF NOT EXISTS / OR IGNORE forms make the second a no-op.
  void initialise() {
    SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
    db_.exec("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    db_.exec("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', 'cpbench-history'), ('version', '" +
             std::to_string(kHistorySchemaVersion) + "')");
    db_.exec(
        "CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY AUTOINCREMENT, added_at TEXT NOT NULL, "
        "started_at TEXT, commit_id TEXT, version TEXT, host TEXT, device TEXT, label TEXT, scenario TEXT, "
        "environment TEXT)");
    db_.exec(
        "CREATE TABLE IF NOT EXISTS cases(run_id INTEGER NOT NULL REFERENCES runs(id), name TEXT NOT NULL, "
        "status TEXT NOT NULL, busy INTEGER NOT NULL, step_s TEXT NOT NULL, cpu_s TEXT NOT NULL, "
        "PRIMARY KEY(run_id, name))");
    db_.exec(
        "CREATE TABLE IF NOT EXISTS metrics(run_id INTEGER NOT NULL, case_name TEXT NOT NULL, name TEXT NOT NULL, "
        "value REAL NOT NULL, unit TEXT, spread REAL, PRIMARY KEY(run_id, case_name, name))");
    tx.commit();
  }

  std::string path_;
  mutable SQLite::Database db_;
};

}  // namespace

std::unique_ptr<HistoryStore> make_sqlite_history_store(const std::string& path, bool create) {
  return std::make_unique<SqliteStore>(path, create);
}

}  // namespace cpbench
