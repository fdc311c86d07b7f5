// The writer on a file that stops growing: a failed commit is reported at
// once, later rows are dropped, what was committed stays, and the run row
// still gets its end. A store that cannot be created leaves no file.
//
// "Full" here is SQLite's PRAGMA max_page_count (SQLITE_FULL, as a full
// disk gives) or RLIMIT_FSIZE in a forked child (EFBIG, SIGXFSZ ignored);
// tests/integration/disk_test.cpp fills a real tmpfs.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/error.h"
#include "schema/run_reader.h"
#include "schema/store.h"
#include "schema/writer.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

// `n` query rows of client `client`, seq from `first`.
Batch queries(int client, int first, int n) {
  Batch b;
  for (int i = 0; i < n; ++i) {
    b.queries.push_back({.client_id = client,
                         .seq = first + i,
                         .start_ns = 1'000'000 + first + i,
                         .latency_ns = 7});
  }
  return b;
}

// Waits up to 5 s for `token`; whether it was requested.
bool wait_for(const StopToken& token) {
  for (int i = 0; i < 500 && !token.stop_requested(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return token.stop_requested();
}

// A run file whose database cannot grow past its size now plus a few pages.
Store full_store(const std::string& path) {
  auto store = Store::create(path);
  store.begin_run(test::run_info());
  const int pages = store.db().execAndGet("PRAGMA page_count").getInt();
  store.db().exec("PRAGMA max_page_count = " + std::to_string(pages + 4));
  return store;
}

TEST(Writer, FailedCommitIsReportedAtOnceAndWhatWasCommittedStays) {
  test::TempDir dir;
  const auto path = dir.file("run.db");
  Writer writer(full_store(path), 5'000'000);
  const StopToken failed = writer.failure_token();
  writer.submit(queries(0, 0, 10));
  writer.drain();
  EXPECT_FALSE(failed.stop_requested());
  EXPECT_FALSE(writer.failure());
  EXPECT_EQ(writer.rows_committed(), 10);

  const std::int64_t before_ns = wall_now_ns();
  writer.submit(queries(1, 0, 20'000));  // far more than 4 pages
  ASSERT_TRUE(wait_for(failed));
  const auto f = writer.failure();
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->disk_full);
  EXPECT_EQ(f->reason, "database or disk is full");
  EXPECT_EQ(f->message, "cannot write to " + path + ": database or disk is full");
  EXPECT_EQ(f->code & 0xff, 13);  // SQLITE_FULL
  EXPECT_LE(f->committed_ns, before_ns);
  EXPECT_GE(f->failed_ns, before_ns);
  // The newest query end committed (the failed batch's rows are not kept).
  EXPECT_EQ(f->kept_until_ns, 1'000'000 + 9 + 7);

  writer.submit(queries(2, 0, 5));  // dropped: nothing more is written
  writer.drain();
  EXPECT_EQ(writer.rows_committed(), 10);
  std::string end_error;
  EXPECT_TRUE(writer.close_after_failure(
      9'000, "failed", end_reason(*f, f->failed_ns - 2'500'000'000), std::nullopt, &end_error))
      << end_error;

  auto ro = Store::open_readonly(path);
  EXPECT_EQ(ro.db().execAndGet("SELECT count(*) FROM query").getInt(), 10);
  // Read back from the file, the same figure.
  EXPECT_EQ(kept_until_ns(ro), f->kept_until_ns);
  EXPECT_EQ(ro.db()
                .execAndGet("SELECT status || '|' || end_ns || '|' || end_reason FROM run")
                .getString(),
            "failed|9000|disk full at 2.5 s: database or disk is full");
}

TEST(Writer, CloseAfterAFailedCommitMarksTheRunFailedAndThrows) {
  test::TempDir dir;
  const auto path = dir.file("run.db");
  {
    Writer writer(full_store(path), 5'000'000);
    writer.submit(queries(0, 0, 20'000));
    ASSERT_TRUE(wait_for(writer.failure_token()));
    try {
      writer.close(9'000, "complete", "duration reached");
      ADD_FAILURE() << "close() did not throw the write error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "cannot write to " + path + ": database or disk is full");
    }
  }
  auto ro = Store::open_readonly(path);
  // Not 'complete': rows were lost.
  EXPECT_EQ(ro.db().execAndGet("SELECT status || '|' || end_reason FROM run").getString(),
            "failed|disk full: database or disk is full; duration reached");
  EXPECT_EQ(ro.db().execAndGet("SELECT count(*) FROM query").getInt(), 0);
}

TEST(Writer, DrainCommitsWhatWasSubmitted) {
  test::TempDir dir;
  auto store = Store::create(dir.file("run.db"));
  store.begin_run(test::run_info());
  Writer writer(std::move(store), 3'600'000'000'000);  // an hour: only drain() commits
  writer.submit(queries(0, 0, 3));
  writer.drain();
  EXPECT_EQ(writer.rows_committed(), 3);
  auto ro = Store::open_readonly(dir.file("run.db"));
  EXPECT_EQ(ro.db().execAndGet("SELECT count(*) FROM query").getInt(), 3);
  writer.close(9'000, "complete", "done");
}

TEST(Writer, EndReasonSaysWhatFailedAndWhen) {
  WriteFailure f{.reason = "disk I/O error (File too large)", .failed_ns = 4'250'000'000};
  EXPECT_EQ(end_reason(f, 1'000'000'000), "write failed at 3.2 s: disk I/O error (File too large)");
  f.disk_full = true;
  f.reason = "database or disk is full";
  EXPECT_EQ(end_reason(f, 0), "disk full at 4.2 s: database or disk is full");
}

// Runs `body` in a forked child under RLIMIT_FSIZE = `limit_bytes` with
// SIGXFSZ ignored (so a write past it fails with EFBIG); its exit status.
int in_child_with_file_size_limit(rlim_t limit_bytes, const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{limit_bytes, limit_bytes};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(90);
    int status = 91;
    try {
      status = body();
    } catch (...) {
      status = 92;
    }
    _exit(status);
  }
  int wait_status = 0;
  waitpid(pid, &wait_status, 0);
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

TEST(Store, CreateThatFailsRemovesWhatItCreated) {
  test::TempDir dir;
  const auto path = dir.file("run.db");
  // 1 KiB: the file is created, its first 4 KiB page cannot be written.
  const int status = in_child_with_file_size_limit(1024, [&] {
    try {
      Store::create(path);
    } catch (const Error& e) {
      const std::string what = e.what();
      return what.starts_with("cannot create " + path + ": disk I/O error") ? 0 : 3;
    }
    return 4;  // created
  });
  EXPECT_EQ(status, 0);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    EXPECT_FALSE(std::filesystem::exists(path + suffix)) << path + suffix;
  }
  // And a retry with room works.
  EXPECT_NO_THROW(Store::create(path));
}

TEST(Writer, FileSizeLimitIsAWriteFailureNotAFullDisk) {
  test::TempDir dir;
  const auto path = dir.file("run.db");
  {
    auto store = Store::create(path);
    store.begin_run(test::run_info());
  }
  // 256 KiB: the WAL cannot hold 50,000 query rows.
  const int status = in_child_with_file_size_limit(256 * 1024, [&] {
    auto store = Store::open_readwrite(path);
    Writer writer(std::move(store), 5'000'000);
    writer.submit(queries(0, 0, 100));
    writer.drain();
    writer.submit(queries(1, 0, 50'000));
    if (!wait_for(writer.failure_token())) return 3;
    const auto f = writer.failure();
    // SQLite's message; the errno (EFBIG) only when SQLite kept it.
    if (f->disk_full || !f->reason.starts_with("disk I/O error")) return 4;
    return writer.close_after_failure(9'000, "failed", end_reason(*f, 0)) ? 0 : 5;
  });
  ASSERT_EQ(status, 0);
  auto ro = Store::open_readonly(path);
  EXPECT_EQ(ro.db().execAndGet("SELECT count(*) FROM query").getInt(), 100);
  EXPECT_EQ(ro.db().execAndGet("SELECT status FROM run").getString(), "failed");
  EXPECT_TRUE(
      ro.db().execAndGet("SELECT end_reason FROM run").getString().starts_with("write failed at "));
}

}  // namespace
}  // namespace stallscope::schema
