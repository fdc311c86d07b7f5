// Reading run files without writing beside them, and checking them:
// Store::open_readonly leaves no -wal or -shm file behind, quick_check
// finds overwritten pages, and the errors of a damaged file or a missing
// table are told apart.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/error.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

namespace fs = std::filesystem;

// A closed run file with `queries` query rows (≈ 30 bytes each).
std::string make_run_file(const test::TempDir& dir, int queries) {
  const auto path = dir.file("run.db");
  auto store = Store::create(path);
  store.begin_run(test::run_info());
  Batch b;
  for (int i = 0; i < queries; ++i) {
    b.queries.push_back(
        {.client_id = i % 4, .seq = i, .start_ns = 1'000'000 + i * 1'000, .latency_ns = 700 + i});
  }
  store.write(b);
  store.end_run(1'000'000 + queries * 1'000, "complete", "duration reached");
  return path;
}

TEST(StoreReadOnly, OpenOfAClosedFileLeavesNoWalOrShmBeside) {
  test::TempDir dir;
  const auto path = make_run_file(dir, 100);
  ASSERT_FALSE(fs::exists(path + "-wal"));
  {
    auto store = Store::open_readonly(path);
    EXPECT_EQ(store.db().execAndGet("SELECT count(*) FROM query").getInt(), 100);
    auto db = Store::open_readonly_database(path);
    EXPECT_EQ(db->execAndGet("SELECT count(*) FROM run").getInt(), 1);
    // Read-only by request, not because the file cannot be written.
    EXPECT_NE(read_only_reason(store), std::nullopt);
  }
  EXPECT_FALSE(fs::exists(path + "-wal"));
  EXPECT_FALSE(fs::exists(path + "-shm"));
}

TEST(StoreReadOnly, OpenOfAFileBeingWrittenSeesItsWal) {
  test::TempDir dir;
  const auto path = dir.file("run.db");
  auto writer = Store::create(path);
  writer.begin_run(test::run_info());
  ASSERT_TRUE(fs::exists(path + "-wal"));
  auto reader = Store::open_readonly(path);
  EXPECT_EQ(reader.db().execAndGet("SELECT count(*) FROM run").getInt(), 1);
  Batch b;
  b.samples.push_back({.sample_id = 1, .time_ns = 1, .mono_ns = 1});
  writer.write(b);
  // Not an immutable snapshot: the later commit is seen.
  EXPECT_EQ(reader.db().execAndGet("SELECT count(*) FROM sample").getInt(), 1);
  EXPECT_EQ(unread_wal_bytes(reader), std::nullopt);
}

TEST(StoreReadOnly, ReadWriteIfPossibleOpensAWritableFileForWriting) {
  test::TempDir dir;
  const auto path = make_run_file(dir, 10);
  auto store = Store::open_readwrite_if_possible(path);
  EXPECT_EQ(read_only_reason(store), std::nullopt);
  EXPECT_NO_THROW(store.db().exec("DELETE FROM finding"));
}

TEST(QuickCheck, SoundFileHasNoProblems) {
  test::TempDir dir;
  const auto path = make_run_file(dir, 20'000);
  EXPECT_TRUE(quick_check(path).empty());
}

TEST(QuickCheck, OverwrittenPagesAreFound) {
  test::TempDir dir;
  const auto path = make_run_file(dir, 20'000);
  const auto pages = fs::file_size(path) / 4096;
  ASSERT_GT(pages, 20u);
  {
    // 64 bytes of 0xA5 at every fifth page of the second half (the query
    // table's pages; the small tables at the start stay readable).
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    for (std::uintmax_t page = pages / 2; page < pages; page += 5) {
      f.seekp(static_cast<std::streamoff>(page * 4096 + 8));
      for (int i = 0; i < 64; ++i) f.put(static_cast<char>(0xa5));
    }
  }
  const auto problems = quick_check(path, 3);
  ASSERT_FALSE(problems.empty());
  EXPECT_LE(problems.size(), 3u);
  EXPECT_NE(problems.front().find("page"), std::string::npos) << problems.front();
}

TEST(StoreErrors, DamageAndMissingTablesAreToldApart) {
  const Error corrupt(ErrorKind::sqlite, "database disk image is malformed", 11);
  const Error not_a_db(ErrorKind::sqlite, "file is not a database", 26);
  const Error no_table(ErrorKind::sqlite, "no such table: main.process_tick", 1);
  const Error no_column(ErrorKind::sqlite, "no such column: wait_event", 1);
  const Error busy(ErrorKind::sqlite, "database is locked", 5);
  EXPECT_TRUE(is_damaged(corrupt));
  EXPECT_TRUE(is_damaged(not_a_db));
  EXPECT_FALSE(is_damaged(no_table));
  EXPECT_EQ(missing_schema_object(no_table), "table process_tick");
  EXPECT_EQ(missing_schema_object(no_column), "column wait_event");
  EXPECT_EQ(missing_schema_object(corrupt), std::nullopt);
  EXPECT_FALSE(is_unwritable(busy));
  EXPECT_TRUE(is_busy(busy));
  EXPECT_TRUE(is_unwritable(Error(ErrorKind::sqlite, "attempt to write a readonly database", 8)));
}

}  // namespace
}  // namespace stallscope::schema
