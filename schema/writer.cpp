#include "schema/writer.h"

#include <chrono>

#include "common/clock.h"
#include "common/thread_name.h"

namespace stallscope::schema {
namespace {
std::int64_t row_count(const Batch& b) {
  return static_cast<std::int64_t>(
      b.samples.size() + b.host_samples.size() + b.processes.size() + b.process_samples.size() +
      b.ash_ticks.size() + b.pg_activity.size() + b.clients.size() + b.queries.size() +
      b.query_errors.size() + b.query_skips.size() + b.query_sleeps.size() +
      b.thread_samples.size() + b.host_memory_samples.size() + b.disk_samples.size() +
      b.cgroup_samples.size() + b.pg_query_texts.size() + b.pgbench_aggregates.size() +
      b.clock_offsets.size() + b.statements.size() + b.statement_latencies.size() +
      b.tcp_samples.size() + b.pooler_samples.size() + b.tcp_stack_samples.size() +
      b.pg_stats.size() + b.pg_lock_waits.size());
}

}  // namespace

Writer::Writer(Store store, std::int64_t commit_interval_ns)
    : store_(std::move(store)), commit_interval_ns_(commit_interval_ns) {
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

void Writer::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait_for(lock, std::chrono::nanoseconds(commit_interval_ns_), [this] { return closing_; });
    std::vector<Batch> work = std::move(pending_);
    pending_.clear();
    bool last = closing_;
    if (!work.empty() && !error_) {
      lock.unlock();
      // One transaction over the batches as they came (no merged copy).
      std::int64_t n = 0;
      for (const Batch& b : work) n += row_count(b);
      std::exception_ptr err;
      try {
        store_.write(std::span<const Batch>(work));
      } catch (...) {
        err = std::current_exception();
      }
      work.clear();  // freed outside the lock, so submit() never waits for it
      lock.lock();
      if (err) {
        error_ = err;
      } else {
        rows_committed_ += n;
      }
    }
    if (last) return;
  }
}

void Writer::close(std::int64_t end_ns, const std::string& status, const std::string& end_reason,
                   std::optional<int> command_exit_status) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The writer thread has ended; this thread now owns the connection.
  store_.end_run(end_ns, status, end_reason, command_exit_status);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace stallscope::schema
