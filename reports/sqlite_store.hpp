#pragma once
// The default history store: one SQLite file (SQLiteCpp over libsqlite3). Tables: meta (schema name and
// version), runs, cases (status, busy, samples as JSON arrays), metrics (value, unit, spread per run,
// case and metric). An add is one IMMEDIATE transaction: a crash or a failed insert leaves no part of
// the run, and concurrent adds from several processes queue on SQLite's write lock (busy timeout 60 s).
// A file that is not SQLite, an SQLite file without our meta table, or a newer schema version is
// refused with std::invalid_argument naming the file.
#include <memory>
#include <string>

#include "reports/history_store.hpp"

namespace cpbench {

inline constexpr int kHistorySchemaVersion = 1;

[[nodiscard]] std::unique_ptr<HistoryStore> make_sqlite_history_store(const std::string& path, bool create);

}  // namespace cpbench
