// The driver's per-thread figures, shared between a driver thread (the only
// writer) and Driver::take_interval_stats() / summary() (readers on any
// thread), and their sums over the threads (stats.cpp). Internal to driver/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/latency_histogram.h"

namespace stallscope::driver::detail {

// Per-thread figures: written by the driver thread only, read by
// take_interval_stats() and summary() from any thread.
struct alignas(64) ThreadStats {
  common::SharedLatencyHistogram latency;
  std::atomic<std::int64_t> errors{0};
  std::atomic<std::int64_t> first_send_mono_ns{0};  // 0 = nothing sent yet
  std::atomic<std::int64_t> last_done_mono_ns{0};
  // -R: schedule lag of the transactions sent; --skip-late, -L, connections.
  std::atomic<std::int64_t> lag_sum_ns{0};
  std::atomic<std::int64_t> lag_count{0};
  std::atomic<std::int64_t> lag_max_ns{0};
  std::atomic<std::int64_t> skipped{0};
  std::atomic<std::int64_t> late{0};
  std::atomic<std::int64_t> connections{0};
  // Clients reconnecting now (a gauge), and clients that gave up (-t).
  std::atomic<std::int64_t> reconnecting{0};
  std::atomic<std::int64_t> clients_lost{0};
  // Failed reconnect attempts and -C connects (their rows are not counted
  // as transactions), and transactions cut short at the run's end
  // (query_unfinished rows).
  std::atomic<std::int64_t> connect_failures{0};
  std::atomic<std::int64_t> unfinished{0};
  // --max-tries: transactions retried and their extra tries; failed
  // transactions by kind.
  std::atomic<std::int64_t> retried{0};
  std::atomic<std::int64_t> retries{0};
  std::atomic<std::int64_t> serialization_failures{0};
  std::atomic<std::int64_t> deadlock_failures{0};
  std::atomic<bool> ended_on_failure{false};  // --exit-on-abort: this thread ended the run
};

// The counters above are bumped with common::bump (single writer).
using common::bump;

using ThreadStatsList = std::vector<std::unique_ptr<ThreadStats>>;

// Sums over the threads of the counters other than latency and errors.
struct Counters {
  std::int64_t lag_sum_ns = 0, lag_count = 0, lag_max_ns = 0, skipped = 0, late = 0,
               connections = 0, reconnecting = 0, clients_lost = 0, connect_failures = 0,
               unfinished = 0, retried = 0, retries = 0, serialization_failures = 0,
               deadlock_failures = 0;
  bool ended_on_failure = false;
};
Counters sum_counters(const ThreadStatsList& stats);

// The latency histogram of the successful transactions over all threads so
// far; `errors` gets the failed ones.
common::LatencyHistogram sum_latency(const ThreadStatsList& stats, std::int64_t& errors);

}  // namespace stallscope::driver::detail
