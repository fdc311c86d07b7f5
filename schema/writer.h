// The single writer: owns the Store on its own thread; producers submit
// batches from any thread and never touch SQLite.
//
//   schema::Writer writer(std::move(store));          // starts the thread
//   writer.submit(std::move(batch));                   // thread-safe, never blocks on I/O
//   writer.close(end_ns, "complete", "duration reached");  // drain, final commit, join
//
// Commits happen at most `commit_interval_ns` apart (default 250 ms) and on
// close(). Readers (`sqlite3 run.db`) see committed data while a run goes on.
//
// A failed commit (a full disk, a file-size limit, an I/O error) is reported
// at once: failure_token() is requested and failure() describes it, so the
// run can stop producing; everything committed before stays. Later submits
// are dropped. close() then still marks the run's end (rolling the failed
// transaction back; if the small UPDATE does not fit, freeing the 256 KiB
// the writer reserved on the file system at its start, then truncating the
// WAL)
// and rethrows the write error; close_after_failure() does the same without
// throwing, for a caller that reported the failure itself.
//
//   schema::Writer writer(std::move(store));
//   driver.run(either_of(global_stop_token(), writer.failure_token()));
//   if (auto f = writer.failure()) {          // f->reason "database or disk is full"
//     writer.close_after_failure(wall_now_ns(), "failed", "disk full at 18.3 s: ...");
//   }
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/stop.h"
#include "common/units.h"
#include "schema/records.h"
#include "schema/store.h"

namespace stallscope::schema {

// The first commit that failed.
struct WriteFailure {
  std::string
      message;  // as Store::write threw it: "cannot write to run.db: database or disk is full"
  std::string reason;  // SQLite's message alone (and the system error, if any), e.g.
                       // "database or disk is full", "disk I/O error"
  int code = 0;        // SQLite extended result code
  // SQLITE_FULL, or ENOSPC / EDQUOT / EFBIG underneath: the file could not grow.
  bool disk_full = false;
  std::int64_t failed_ns = 0;     // wall clock (ns since the epoch) when the commit failed
  std::int64_t committed_ns = 0;  // wall clock when the last good commit ended (the
                                  // writer's start when none did)
  // What the file holds: the latest end of a query (start_ns + latency_ns)
  // or sample tick (time_ns) among the rows committed, wall clock — as
  // kept_until_ns(Store&) (run_reader.h) reads it back, so that run's and
  // record's stderr and explain give one figure; nullopt when none was.
  std::optional<std::int64_t> kept_until_ns;
};

class Writer {
 public:
  explicit Writer(Store store, std::int64_t commit_interval_ns = 250 * common::kNsPerMs);
  ~Writer();  // close()s with status 'interrupted' if close() was not called; never throws
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Queues `batch` for the next commit. Thread-safe.
  void submit(Batch batch);
  // Writes everything queued, marks the run (end_run: end_ns is wall clock,
  // ns since the epoch; status and end_reason as in the run table), commits,
  // joins the thread. Throws the first write error, if any (the Error that
  // Store::write threw); the run is then marked 'failed' whatever `status`
  // said, its end_reason led by the write error. Idempotent.
  // When a commit failed, or the UPDATE fails (e.g. the disk filled at the
  // end), the failed transaction is rolled back, the UPDATE tried again
  // after the writer's reserve (an unlinked 256 KiB file beside the run
  // file, allocated at its start) is freed, then once more after PRAGMA
  // wal_checkpoint(TRUNCATE); if all fail the run row stays 'running' with
  // no end.
  void close(std::int64_t end_ns, const std::string& status, const std::string& end_reason,
             std::optional<int> command_exit_status = std::nullopt);
  // As close(), for a run whose failure() the caller has reported: never
  // throws the write error; returns whether the run row got its end (false:
  // it stays 'running', and `end_error` — if given — says why).
  bool close_after_failure(std::int64_t end_ns, const std::string& status,
                           const std::string& end_reason,
                           std::optional<int> command_exit_status = std::nullopt,
                           std::string* end_error = nullptr);

  // Requested at the first failed commit (from the writer thread). The
  // writer must outlive the token.
  StopToken failure_token() const noexcept { return failed_.token(); }
  // The first failed commit, if any. Thread-safe.
  std::optional<WriteFailure> failure() const;

  // Commits everything submitted so far and returns once that commit ended
  // (or failed: see failure()). Not after close().
  void drain();

  // Rows committed so far (all tables), for progress and benchmarks.
  std::int64_t rows_committed() const;

 private:
  void loop();
  void record_failure(const std::exception_ptr& err);  // under mu_
  // Joins the thread and marks the run's end as close() says; the end_run
  // error when the end could not be stored.
  std::exception_ptr finish(std::int64_t end_ns, const std::string& status,
                            const std::string& end_reason, std::optional<int> command_exit_status);
  Store store_;
  std::int64_t commit_interval_ns_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable drained_cv_;  // a commit cycle ended
  std::int64_t drain_asked_ = 0;        // drain() calls so far
  std::int64_t drain_done_ = 0;         // drain() calls a commit cycle served
  std::vector<Batch> pending_;
  bool closing_ = false;
  bool closed_ = false;
  std::int64_t rows_committed_ = 0;
  std::exception_ptr error_;
  std::optional<WriteFailure> failure_;
  std::int64_t committed_ns_ = 0;              // wall clock of the last good commit
  std::optional<std::int64_t> kept_until_ns_;  // WriteFailure::kept_until_ns so far
  StopSource failed_;
  common::Fd reserve_;  // room for the last UPDATE on a full disk (writer.cpp)
  std::thread thread_;
};

// The run's end_reason for a failed commit, with its time in seconds after
// `start_ns` (wall clock, ns since the epoch):
//   "disk full at 18.3 s: database or disk is full"
//   "write failed at 18.3 s: disk I/O error"
std::string end_reason(const WriteFailure& failure, std::int64_t start_ns);

}  // namespace stallscope::schema
