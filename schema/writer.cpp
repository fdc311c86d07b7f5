#include "schema/writer.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>

#include "common/clock.h"
#include "common/error.h"
#include "common/thread_name.h"
#include "common/units.h"

#include <fmt/format.h>

namespace stallscope::schema {
namespace {
std::int64_t row_count(const Batch& b) {
  return static_cast<std::int64_t>(
      b.samples.size() + b.host_samples.size() + b.processes.size() + b.process_samples.size() +
      b.ash_ticks.size() + b.pg_activity.size() + b.clients.size() + b.queries.size() +
      b.query_errors.size() + b.query_skips.size() + b.query_sleeps.size() +
      b.query_retries.size() + b.query_unfinished.size() + b.thread_samples.size() +
      b.host_memory_samples.size() + b.disk_samples.size() + b.cgroup_samples.size() +
      b.pg_query_texts.size() + b.pgbench_aggregates.size() + b.clock_offsets.size() +
      b.statements.size() + b.statement_latencies.size() + b.tcp_samples.size() +
      b.pooler_samples.size() + b.tcp_stack_samples.size() + b.pg_stats.size() +
      b.pg_lock_waits.size());
}

// The later of two optional times.
std::optional<std::int64_t> later(std::optional<std::int64_t> a, std::optional<std::int64_t> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

// The latest query end (start_ns + latency_ns) or sample tick in `b`: its
// part of WriteFailure::kept_until_ns (the `query` and `sample` rows, as
// kept_until_ns(Store&) reads them back).
std::optional<std::int64_t> newest_row_ns(const Batch& b) {
  std::optional<std::int64_t> newest;
  for (const auto& q : b.queries) newest = later(newest, q.start_ns + q.latency_ns);
  for (const auto& t : b.samples) newest = later(newest, t.time_ns);
  return newest;
}

// SQLite's primary result code for "database or disk is full".
constexpr int kSqliteFull = 13;

// Room kept on the run file's file system for the run row's last UPDATE: an
// unlinked file (O_TMPFILE: nothing is left behind, even after SIGKILL) of
// this size, allocated when the writer starts and closed — its blocks freed —
// when the UPDATE does not fit otherwise. It needs a frame or two of the WAL
// (4 KiB pages); measured on a full 8 MiB tmpfs, without it the UPDATE failed
// in 2 of 3 runs (the failed commit had grown the file by its checkpoint,
// so no WAL space it took could be reused).
constexpr off_t kReserveBytes = 256 * 1024;

// The reserve for `db_path`, or an empty Fd when it cannot be made (an
// in-memory store, a file system without O_TMPFILE, no room already).
common::Fd reserve_room(const std::string& db_path) {
  if (db_path.empty() || db_path == ":memory:") return {};
  std::filesystem::path dir = std::filesystem::path(db_path).parent_path();
  if (dir.empty()) dir = ".";
  common::Fd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd || ::posix_fallocate(fd.get(), 0, kReserveBytes) != 0) return {};
  return fd;
}

}  // namespace

Writer::Writer(Store store, std::int64_t commit_interval_ns)
    : store_(std::move(store)),
      commit_interval_ns_(commit_interval_ns),
      committed_ns_(wall_now_ns()),
      reserve_(reserve_room(store_.path())) {
  thread_ = std::thread([this] {
    set_thread_name(kWriterThreadName);
    loop();
  });
}

Writer::~Writer() {
  try {
    close(wall_now_ns(), "interrupted", "writer destroyed before the run was closed");
  } catch (...) {
    // Destructors never throw; the error was already reported by close() if
    // anyone called it.
  }
}

void Writer::submit(Batch batch) {
  if (batch.empty()) return;
  std::lock_guard lock(mu_);
  if (closing_ || error_) return;
  pending_.push_back(std::move(batch));
}

std::int64_t Writer::rows_committed() const {
  std::lock_guard lock(mu_);
  return rows_committed_;
}

void Writer::drain() {
  std::unique_lock lock(mu_);
  if (closing_) return;
  const std::int64_t ticket = ++drain_asked_;
  cv_.notify_all();
  drained_cv_.wait(lock, [&] { return drain_done_ >= ticket; });
}

std::optional<WriteFailure> Writer::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void Writer::record_failure(const std::exception_ptr& err) {
  error_ = err;
  WriteFailure f;
  f.failed_ns = wall_now_ns();
  f.committed_ns = committed_ns_;
  f.kept_until_ns = kept_until_ns_;
  try {
    std::rethrow_exception(err);
  } catch (const Error& e) {
    f.message = e.what();
    f.code = e.code();
  } catch (const std::exception& e) {
    f.message = e.what();
  } catch (...) {
    f.message = "unknown error";
  }
  const std::string prefix = "cannot write to " + store_.path() + ": ";
  f.reason = f.message.starts_with(prefix) ? f.message.substr(prefix.size()) : f.message;
  const int sys = store_.system_errno();
  f.disk_full = (f.code & 0xff) == kSqliteFull || sys == ENOSPC || sys == EDQUOT;
  failure_ = std::move(f);
  failed_.request_stop();
}

void Writer::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait_for(lock, std::chrono::nanoseconds(commit_interval_ns_),
                 [this] { return closing_ || drain_asked_ > drain_done_; });
    const std::int64_t drain_asked = drain_asked_;
    std::vector<Batch> work = std::move(pending_);
    pending_.clear();
    bool last = closing_;
    if (!work.empty() && !error_) {
      lock.unlock();
      // One transaction over the batches as they came (no merged copy).
      std::int64_t n = 0;
      std::optional<std::int64_t> newest_ns;
      for (const Batch& b : work) {
        n += row_count(b);
        newest_ns = later(newest_ns, newest_row_ns(b));
      }
      std::exception_ptr err;
      try {
        store_.write(std::span<const Batch>(work));
      } catch (...) {
        err = std::current_exception();
      }
      work.clear();  // freed outside the lock, so submit() never waits for it
      lock.lock();
      if (err) {
        record_failure(err);  // the store is still this thread's: its errno is read here
      } else {
        rows_committed_ += n;
        committed_ns_ = wall_now_ns();
        kept_until_ns_ = later(kept_until_ns_, newest_ns);
      }
    }
    if (drain_asked > drain_done_) {
      drain_done_ = drain_asked;
      drained_cv_.notify_all();
    }
    if (last) return;
  }
}

std::exception_ptr Writer::finish(std::int64_t end_ns, const std::string& status,
                                  const std::string& end_reason,
                                  std::optional<int> command_exit_status) {
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The writer thread has ended; this thread now owns the connection. A
  // failed commit was rolled back; on a full disk the UPDATE of the run row
  // may still fit (it rewrites WAL frames the failed transaction had
  // allocated), else the reserve is given back to make room, else
  // truncating the WAL may free the room it needs.
  // A failed commit lost rows: the run is 'failed' whatever the caller said.
  const bool lost = failure_ && status != "failed";
  const std::string reason =
      lost ? fmt::format("{}: {}; {}", failure_->disk_full ? "disk full" : "write failed",
                         failure_->reason, end_reason)
           : end_reason;
  std::exception_ptr end_error;
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      if (attempt == 1) reserve_.reset();
      if (attempt == 2) store_.truncate_wal();
      store_.end_run(end_ns, lost ? "failed" : status, reason, command_exit_status);
      return nullptr;
    } catch (...) {
      if (!end_error) end_error = std::current_exception();
    }
  }
  return end_error;
}

void Writer::close(std::int64_t end_ns, const std::string& status, const std::string& end_reason,
                   std::optional<int> command_exit_status) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    closing_ = true;
  }
  const std::exception_ptr end_error = finish(end_ns, status, end_reason, command_exit_status);
  if (error_) std::rethrow_exception(error_);
  if (end_error) std::rethrow_exception(end_error);
}

bool Writer::close_after_failure(std::int64_t end_ns, const std::string& status,
                                 const std::string& end_reason,
                                 std::optional<int> command_exit_status, std::string* end_error) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    closed_ = true;
    closing_ = true;
  }
  const std::exception_ptr err = finish(end_ns, status, end_reason, command_exit_status);
  if (!err) return true;
  if (end_error) {
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      *end_error = e.what();
    } catch (...) {
      *end_error = "unknown error";
    }
  }
  return false;
}

std::string end_reason(const WriteFailure& failure, std::int64_t start_ns) {
  return fmt::format("{} at {:.1f} s: {}", failure.disk_full ? "disk full" : "write failed",
                     static_cast<double>(failure.failed_ns - start_ns) / common::kNsPerSDouble,
                     failure.reason);
}

}  // namespace stallscope::schema
