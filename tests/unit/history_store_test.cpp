// The run history's SQLite store (reports/sqlite_store.hpp) on real files: a run reads back whole and in
// order, an add that fails halfway leaves nothing, two processes adding at once both land intact, and
// files that are not ours (text, another SQLite database, a newer schema) are refused by name.
#include <SQLiteCpp/SQLiteCpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "reports/history_store.hpp"
#include "reports/sqlite_store.hpp"

using namespace cpbench;

namespace {
std::string temp_path(const std::string& tag) {
  return "/tmp/cpbench-history-" + tag + "-" + std::to_string(::getpid()) + ".db";
}

HistoryRun make_run(const std::string& commit, int cases, double value) {
  HistoryRun run;
  run.commit = commit;
  run.started_at = "2026-12-02T04:00:00Z";
  run.host = "vm";
  run.scenario = "s";
  run.environment_json = "{}";
  for (int i = 0; i < cases; ++i) {
    HistoryCase c;
    c.name = "case" + std::to_string(i);
    c.status = "ok";
    c.metrics["tokens_per_s"] = {"tokens_per_s", value + i, "tokens/s", 0.01};
    c.metrics["step_s"] = {"step_s", 1 / (value + i), "s", 0.01};
    c.step_s = {0.1, 0.11, 0.12};
    c.cpu_s = {0.2, 0.21};
    run.cases.push_back(c);
  }
  return run;
}
}  // namespace

TEST(HistoryStore, RunsReadBackWholeAndInOrder) {
  const std::string path = temp_path("order");
  std::remove(path.c_str());
  {
    auto store = open_history_store(path, true);
    EXPECT_EQ(store->describe(), "sqlite:" + path);
    EXPECT_EQ(store->add(make_run("aaa", 3, 100)), 1);
    EXPECT_EQ(store->add(make_run("bbb", 2, 200)), 2);
  }
  const auto runs = open_history_store("sqlite:" + path, false)->runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].commit, "aaa");
  EXPECT_EQ(runs[1].commit, "bbb");
  ASSERT_EQ(runs[0].cases.size(), 3u);
  EXPECT_EQ(runs[0].cases[2].name, "case2");
  EXPECT_DOUBLE_EQ(runs[0].cases[2].metrics.at("tokens_per_s").value, 102);
  EXPECT_EQ(runs[0].cases[2].metrics.at("tokens_per_s").unit, "tokens/s");
  EXPECT_EQ(runs[1].cases[1].step_s, (std::vector<double>{0.1, 0.11, 0.12}));
  EXPECT_EQ(runs[1].cases[1].cpu_s, (std::vector<double>{0.2, 0.21}));
  EXPECT_FALSE(runs[0].added_at.empty());
  std::remove(path.c_str());
}

TEST(HistoryStore, AnAddThatFailsHalfwayLeavesNothing) {
  const std::string path = temp_path("atomic");
  std::remove(path.c_str());
  auto store = open_history_store(path, true);
  ASSERT_EQ(store->add(make_run("good", 2, 100)), 1);
  HistoryRun bad = make_run("bad", 3, 100);
  bad.cases[2].name = bad.cases[0].name;  // the third case collides with the first: the insert fails late
  EXPECT_THROW((void)store->add(bad), std::runtime_error);
  const auto runs = store->runs();
  ASSERT_EQ(runs.size(), 1u) << "the failed run's row and its first cases were rolled back";
  EXPECT_EQ(runs[0].commit, "good");
  SQLite::Database db(path);
  SQLite::Statement q(db, "SELECT count(*) FROM cases");
  q.executeStep();
  EXPECT_EQ(q.getColumn(0).getInt(), 2);
  std::remove(path.c_str());
}

TEST(HistoryStore, TwoProcessesAddingAtOnceBothLandIntact) {
  const std::string path = temp_path("concurrent");
  std::remove(path.c_str());
  // Both processes create the file and add 20 runs of 40 cases each, interleaving on SQLite's lock.
  std::vector<pid_t> kids;
  for (int k = 0; k < 2; ++k) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        auto store = open_history_store(path, true);
        for (int i = 0; i < 20; ++i) (void)store->add(make_run("p" + std::to_string(k), 40, 100 * (k + 1)));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", k, e.what());
        code = 1;
      }
      std::_Exit(code);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "a child failed to add";
  }
  const auto runs = open_history_store(path, false)->runs();
  ASSERT_EQ(runs.size(), 40u);
  int from[2] = {0, 0};
  for (const auto& r : runs) {
    ASSERT_EQ(r.cases.size(), 40u) << "run " << r.id << " is whole";
    const int k = r.commit == "p0" ? 0 : 1;
    ++from[k];
    for (const auto& c : r.cases) EXPECT_EQ(c.metrics.size(), 2u);
    EXPECT_DOUBLE_EQ(r.cases[0].metrics.at("tokens_per_s").value, 100 * (k + 1));
  }
  EXPECT_EQ(from[0], 20);
  EXPECT_EQ(from[1], 20);
  std::remove(path.c_str());
}

TEST(HistoryStore, FilesThatAreNotOursAreRefusedByName) {
  const std::string text = temp_path("text");
  std::ofstream(text) << "hello, not a database\n";
  try {
    (void)open_history_store(text, true);
    ADD_FAILURE() << "a text file opened as a history";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
  const std::string other = temp_path("other");
  std::remove(other.c_str());
  {
    SQLite::Database db(other, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("CREATE TABLE users(name TEXT)");
  }
  try {
    (void)open_history_store(other, true);
    ADD_FAILURE() << "another application's database opened as a history";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a cpbench history"), std::string::npos) << e.what();
  }
  const std::string newer = temp_path("newer");
  std::remove(newer.c_str());
  (void)open_history_store(newer, true);
  {
    SQLite::Database db(newer, SQLite::OPEN_READWRITE);
    db.exec("UPDATE meta SET value = '99' WHERE key = 'version'");
  }
  try {
    (void)open_history_store(newer, false);
    ADD_FAILURE() << "a newer schema opened";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 99 is newer than this cpbench"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)open_history_store(temp_path("absent"), false), std::invalid_argument);
  try {
    (void)open_history_store("postgres://db/x", true);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown history store 'postgres' (known: sqlite)"), std::string::npos)
        << e.what();
  }
  for (const auto& p : {text, other, newer}) std::remove(p.c_str());
}
