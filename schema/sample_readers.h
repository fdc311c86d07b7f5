// Streaming reads of a run file's big tables for explain (correlate/): one
// forward cursor per table, rows as small value types (or typed accessors
// where a row's text must not be copied), in the order explain's passes
// need them. The small tables are read by schema/run_reader.h.
//
//   schema::QueryRows queries(store, until_ns, /*with_lag=*/false);
//   schema::QueryTiming q;
//   while (queries.next(q)) total_ns += q.latency_ns;
//
// Every cursor reads through store.db() (so explain_pair's temporary views
// shadow the server file's tables) and throws schema::SqliteError on errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "schema/process_scan.h"
#include "schema/row.h"
#include "schema/store.h"

namespace stallscope::schema {

// ---- query, query_error ----

// One query row (schema/v1.sql `query`), as explain reads it.
struct QueryTiming {
  std::int64_t start_ns = 0;
  std::int64_t latency_ns = 0;
  std::int64_t client_id = 0;
  std::int64_t seq = 0;
  std::optional<std::int64_t> lag_ns;  // always absent when read without lags
};
// The query rows sent at or before until_ns, in primary-key order
// (start_ns, client_id, seq). with_lag = false leaves lag_ns out (a column
// read costs about 20 % of the scan; see first_query_has_lag).
class QueryRows {
 public:
  QueryRows(Store& store, std::int64_t until_ns, bool with_lag);
  bool next(QueryTiming& row);

 private:
  Cursor st_;
  bool with_lag_;
};

// The keys (start_ns, client_id, seq) of query_error rows sent at or before
// until_ns, in the same order as QueryRows.
struct QueryKey {
  std::int64_t start_ns = 0;
  std::int64_t client_id = 0;
  std::int64_t seq = 0;
  auto operator<=>(const QueryKey&) const = default;
};
// One query_unfinished row (schema/v1.sql): a transaction cut short at the
// run's end, unanswered.
struct UnfinishedQuery {
  QueryKey key;
  std::int64_t elapsed_ns = 0;         // start → given up on, ns
  std::optional<std::int64_t> lag_ns;  // -R only
  std::int64_t sleep_ns = 0;           // its time in \sleep (query_sleep), ≤ elapsed_ns
};
// The query_unfinished rows with start_ns ≤ until_ns, in primary-key order
// (at most one per client and pipeline slot, so read whole); none in files
// made before the table existed.
std::vector<UnfinishedQuery> unfinished_queries(Store& store, std::int64_t until_ns);
class QueryErrorKeys {
 public:
  QueryErrorKeys(Store& store, std::int64_t until_ns);
  bool next(QueryKey& key);

 private:
  Cursor st_;
};

// The keys of those query_error rows that lost their connection (SQLSTATE
// class 08, incl. the driver's failed reconnect attempts, 08001, or
// 57P01–57P03), in the same order; connect_failed marks the driver's failed
// (re)connect attempts (08001: not transactions, driver/driver.h).
struct ConnectionLossKey {
  QueryKey key;
  bool connect_failed = false;
};
class ConnectionLossKeys {
 public:
  ConnectionLossKeys(Store& store, std::int64_t until_ns);
  bool next(ConnectionLossKey& row);

 private:
  Cursor st_;
};

// query_sleep rows (scripts with \sleep) of queries sent at or before
// until_ns, in the same order as QueryRows; none in files made before the
// table existed.
struct QuerySleep {
  QueryKey key;
  std::int64_t sleep_ns = 0;
};
class QuerySleeps {
 public:
  QuerySleeps(Store& store, std::int64_t until_ns);
  bool next(QuerySleep& row);

 private:
  std::optional<Cursor> st_;
};

// query_retry (--max-tries) summed: the transactions tried more than once,
// their extra tries, and the time in their failed tries; zeros in files
// made before the table existed.
struct RetryTotals {
  std::int64_t transactions = 0;
  std::int64_t retries = 0;
  std::int64_t retried_ns = 0;
  std::int64_t latency_ns = 0;  // Σ query.latency_ns of every transaction, for scale
};
RetryTotals read_retry_totals(Store& store);

// ---- sample, host_sample ----

// A tick in (from_ns, to_ns], with its host_sample row if any. Fields a
// tick lacks (no host_sample row, or no CPU deltas) stay 0.
struct HostTick {
  std::int64_t time_ns = 0;         // sample.time_ns
  std::int64_t sampler_cpu_ns = 0;  // sample.sampler_cpu_ns (NULL reads as 0)
  bool has_host = false;            // a host_sample row
  int procs_running = 0;            // host_sample.procs_running
  int processes_d_state = 0;        // host_sample.processes_d_state
  // CPU deltas: host_sample.cpu_user_ns is not NULL (not the first tick).
  bool has_cpu = false;
  // host_sample.cpu_user_ns + cpu_nice_ns + cpu_system_ns + cpu_irq_ns + cpu_softirq_ns.
  std::int64_t busy_ns = 0;
  std::int64_t idle_ns = 0;    // host_sample.cpu_idle_ns
  std::int64_t iowait_ns = 0;  // host_sample.cpu_iowait_ns
  std::int64_t steal_ns = 0;   // host_sample.cpu_steal_ns
};
class HostTicks {
 public:
  HostTicks(Store& store, std::int64_t from_ns, std::int64_t to_ns);
  bool next(HostTick& tick);

 private:
  Cursor st_;
};

// Every tick's (sample_id, time_ns), by sample_id.
struct SampleTime {
  std::int64_t sample_id = 0;
  std::int64_t time_ns = 0;
};
class SampleTimeRows {
 public:
  explicit SampleTimeRows(Store& store);
  bool next(SampleTime& row);

 private:
  Cursor st_;
};

// ---- pg_activity_sample ----

// One pg_activity_sample row. The text views are valid until the reader's
// next step; nullopt for NULL.
struct AshRow {
  std::int64_t time_ns = 0;
  int pid = 0;
  std::optional<std::string_view> backend_type, state, wait_event_type, wait_event;
  std::optional<std::string_view> blocking_pids;
  // The poll's round trip; 0 when unknown or not read (0 rather than
  // nullopt: explain widens the attribution interval by it, and an unknown
  // round trip widens it by nothing).
  std::int64_t poll_duration_ns = 0;
  // The row's pg_query_text id (its query text); nullopt when none was stored.
  std::optional<std::int64_t> query_text_id;
};
// pg_activity_sample rows polled in [from_ns, to_ns), by poll time.
class AshRows {
 public:
  // with_poll_duration: also read each row's ash_tick.duration_ns.
  AshRows(Store& store, std::int64_t from_ns, std::int64_t to_ns, bool with_poll_duration);
  // The next row into `row`; false when done.
  bool next(AshRow& row);

 private:
  std::optional<std::string_view> opt_text(int column) const {
    if (st_.is_null(column)) return std::nullopt;
    return st_.text(column);
  }
  Cursor st_;
};

// ---- process_sample, thread_sample ----

// process_sample rows from a sample_id on, in primary-key order (sample_id,
// process_id), through ProcessSampleScan (process_scan.h).
// One process_sample row: a process at one tick (with its I/O and the
// tick's interval, see process_scan.h). The text views are valid until the
// reader's next step.
struct ProcessTick {
  std::int64_t sample_id = 0;
  std::int64_t process_id = 0;
  std::string_view state;  // "" for NULL
  std::optional<std::int64_t> cpu_ns, run_delay_ns, span_ns;
  std::optional<std::string_view> wchan;
  std::optional<std::int64_t> utime_ticks, stime_ticks, write_bytes, majflt;
};
class ProcessRows {
 public:
  ProcessRows(Store& store, std::int64_t from_sample_id);
  // The next row into `row`; false when done.
  bool next(ProcessTick& row);

 private:
  ProcessSampleScan st_;
};

// A process's ss-driver/N thread_sample rows from a sample_id on, by sample_id.
struct DriverThreadRow {
  std::int64_t sample_id = 0;
  std::optional<std::int64_t> cpu_ns;
  std::optional<std::int64_t> run_delay_ns;
  std::optional<std::int64_t> span_ns;
};
class DriverThreadRows {
 public:
  DriverThreadRows(Store& store, std::int64_t process_id, std::int64_t from_sample_id);
  bool next(DriverThreadRow& row);

 private:
  Cursor st_;
};

}  // namespace stallscope::schema
