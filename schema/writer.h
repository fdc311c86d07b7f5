// The single writer: owns the Store on its own thread; producers submit
// batches from any thread and never touch SQLite.
//
//   schema::Writer writer(std::move(store));          // starts the thread
//   writer.submit(std::move(batch));                   // thread-safe, never blocks on I/O
//   writer.close(end_ns, "complete", "duration reached");  // drain, final commit, join
//
// Commits happen at most `commit_interval_ns` apart (default 250 ms) and on
// close(). Readers (`sqlite3 run.db`) see committed data while a run goes on.
// A write error is kept and rethrown by close(); later submits are dropped.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/units.h"
#include "schema/records.h"
#include "schema/store.h"

namespace stallscope::schema {

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
  // Store::write threw). Idempotent.
  void close(std::int64_t end_ns, const std::string& status, const std::string& end_reason,
             std::optional<int> command_exit_status = std::nullopt);

  // Rows committed so far (all tables), for progress and benchmarks.
  std::int64_t rows_committed() const;

 private:
  void loop();
  Store store_;
  std::int64_t commit_interval_ns_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Batch> pending_;
  bool closing_ = false;
  bool closed_ = false;
  std::int64_t rows_committed_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace stallscope::schema
