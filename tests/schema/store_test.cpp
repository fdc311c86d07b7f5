#include <sys/stat.h>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "schema/store.h"
#include "schema/writer.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

TEST(Store, CreatesFileWithMode0600AndSchemaVersion) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  {
    auto store = Store::create(path);
    EXPECT_EQ(store.db().execAndGet("PRAGMA user_version").getInt(), kSchemaVersion);
    EXPECT_EQ(store.db().execAndGet("PRAGMA journal_mode").getString(), "wal");
  }
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// Every column of every table declares one of SQLite's types, so that an
// engine reading the file in place (DuckDB's sqlite extension) reads each
// column typed, not as text. (A view's computed column has no declared type
// in SQLite, a CAST included: docs/fleet.md says so.)
TEST(Store, EveryColumnOfEveryTableDeclaresItsType) {
  auto store = Store::create(":memory:");
  SQLite::Statement objects(store.db(), "SELECT name FROM sqlite_master WHERE type = 'table'");
  int columns = 0;
  while (objects.executeStep()) {
    const std::string name = objects.getColumn(0).getString();
    SQLite::Statement info(store.db(), fmt::format("PRAGMA table_info(\"{}\")", name));
    while (info.executeStep()) {
      ++columns;
      const std::string type = info.getColumn(2).getString();
      EXPECT_TRUE(type == "INTEGER" || type == "REAL" || type == "TEXT" || type == "BLOB")
          << name << "." << info.getColumn(1).getString() << " declares '" << type << "'";
    }
  }
  EXPECT_GT(columns, 200);
}

TEST(Store, RefusesToOverwriteExistingFile) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  { auto store = Store::create(path); }
  try {
    Store::create(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

TEST(Store, RefusesNewerSchemaVersion) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  {
    auto store = Store::create(path);
    store.db().exec("PRAGMA user_version = 99");
  }
  try {
    Store::open_readonly(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
}

// Version 1 kept sqlstate, error and skipped in `query`: explain would read
// its failures as successes, so the file is refused by name.
TEST(Store, RefusesOlderSchemaVersion) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  {
    auto store = Store::create(path);
    store.db().exec("PRAGMA user_version = 1");
  }
  try {
    Store::open_readonly(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_EQ(std::string(e.what()),
              fmt::format("cannot read {}: schema version 1 is older than this stallscope reads "
                          "(2); record or import it again",
                          path));
  }
}

TEST(Store, RefusesMissingFileAndNonRunFile) {
  test::TempDir dir;
  EXPECT_THROW(Store::open_readonly(dir.file("absent.db")), Error);
  {
    SQLite::Database other(dir.file("other.db"), SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    other.exec("CREATE TABLE t (x)");
  }
  try {
    Store::open_readonly(dir.file("other.db"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a stallscope run file"), std::string::npos);
  }
}

TEST(Store, MoveAssignmentClosesTheOldFileCleanly) {
  test::TempDir dir;
  auto store = Store::create(dir.file("a.db"));
  store.begin_run(test::run_info());
  Batch b;
  b.samples.push_back({.sample_id = 1, .time_ns = 1, .mono_ns = 1});
  store.write(b);                           // prepares the insert statements
  store = Store::create(dir.file("b.db"));  // must finalise a.db's statements first
  EXPECT_EQ(store.path(), dir.file("b.db"));
  Store moved(std::move(store));
  EXPECT_EQ(moved.db().execAndGet("SELECT count(*) FROM sample").getInt(), 0);
  auto a = Store::open_readonly(dir.file("a.db"));
  EXPECT_EQ(a.db().execAndGet("SELECT count(*) FROM sample").getInt(), 1);
}

TEST(Store, ProcessRowIsUpdatedInPlaceAfterExec) {
  auto store = Store::create(":memory:");
  Batch b;
  b.processes.push_back({.process_id = 7, .pid = 70, .start_ticks = 5, .comm = "bash"});
  store.write(b);
  b.processes.front().comm = "sleep";
  b.processes.front().cmdline = "sleep 1";
  store.write(b);
  EXPECT_EQ(store.db().execAndGet("SELECT count(*) FROM process").getInt(), 1);
  EXPECT_EQ(store.db().execAndGet("SELECT comm || '|' || cmdline FROM process").getString(),
            "sleep|sleep 1");
}

TEST(Writer, CommitsEveryBatchAndMarksTheRun) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  auto store = Store::create(path);
  store.begin_run(test::run_info());
  {
    Writer writer(std::move(store), 10'000'000);
    for (int i = 0; i < 100; ++i) {
      Batch b;
      b.queries.push_back({.client_id = i % 4, .seq = i, .start_ns = 1'000 + i, .latency_ns = 7});
      if (i % 10 == 0) {
        b.query_errors.push_back(
            {.client_id = i % 4, .seq = i, .start_ns = 1'000 + i, .sqlstate = "40P01"});
      }
      writer.submit(std::move(b));
    }
    writer.close(5'000, "complete", "done");
    EXPECT_EQ(writer.rows_committed(), 110);
  }
  auto ro = Store::open_readonly(path);
  EXPECT_EQ(ro.db().execAndGet("SELECT count(*) FROM query").getInt(), 100);
  EXPECT_EQ(ro.db()
                .execAndGet(
                    "SELECT count(*) FROM query JOIN query_error USING (start_ns, client_id, seq) "
                    "WHERE sqlstate = '40P01'")
                .getInt(),
            10);
  EXPECT_EQ(ro.db().execAndGet("SELECT sum(latency_ns) FROM query").getInt(), 700);
  EXPECT_EQ(ro.db().execAndGet("SELECT status || ':' || end_ns FROM run").getString(),
            "complete:5000");
}

TEST(Writer, DestructionWithoutCloseMarksRunInterrupted) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  auto store = Store::create(path);
  store.begin_run(test::run_info());
  {
    Writer writer(std::move(store));
    Batch b;
    b.samples.push_back({.sample_id = 1, .time_ns = 1, .mono_ns = 1});
    writer.submit(std::move(b));
  }
  auto ro = Store::open_readonly(path);
  EXPECT_EQ(ro.db().execAndGet("SELECT status FROM run").getString(), "interrupted");
  EXPECT_EQ(ro.db().execAndGet("SELECT count(*) FROM sample").getInt(), 1);
}

}  // namespace
}  // namespace stallscope::schema
