// The SQL behind sample_readers.h.
#include "schema/sample_readers.h"

#include <algorithm>

namespace stallscope::schema {

QueryRows::QueryRows(Store& store, std::int64_t until_ns, bool with_lag)
    : st_(store.db(), with_lag ? "SELECT start_ns, latency_ns, client_id, seq, lag_ns FROM query "
                                 "WHERE start_ns <= ?1 ORDER BY start_ns, client_id, seq"
                               : "SELECT start_ns, latency_ns, client_id, seq FROM query WHERE "
                                 "start_ns <= ?1 ORDER BY start_ns, client_id, seq"),
      with_lag_(with_lag) {
  st_.bind(1, until_ns);
}

bool QueryRows::next(QueryTiming& row) {
  if (!st_.step()) return false;
  row.start_ns = st_.int64(0);
  row.latency_ns = st_.int64(1);
  row.client_id = st_.int64(2);
  row.seq = st_.int64(3);
  if (with_lag_) row.lag_ns = st_.opt_int64(4);
  return true;
}

QueryErrorKeys::QueryErrorKeys(Store& store, std::int64_t until_ns)
    : st_(store.db(),
          "SELECT start_ns, client_id, seq FROM query_error WHERE start_ns <= ?1 ORDER BY "
          "start_ns, client_id, seq") {
  st_.bind(1, until_ns);
}

bool QueryErrorKeys::next(QueryKey& key) {
  if (!st_.step()) return false;
  key = {st_.int64(0), st_.int64(1), st_.int64(2)};
  return true;
}

ConnectionLossKeys::ConnectionLossKeys(Store& store, std::int64_t until_ns)
    : st_(store.db(),
          "SELECT start_ns, client_id, seq, sqlstate = '08001' FROM query_error WHERE start_ns "
          "<= ?1 AND (sqlstate "
          "LIKE '08%' OR sqlstate IN ('57P01', '57P02', '57P03')) ORDER BY start_ns, client_id, "
          "seq") {
  st_.bind(1, until_ns);
}

bool ConnectionLossKeys::next(ConnectionLossKey& row) {
  if (!st_.step()) return false;
  row = {{st_.int64(0), st_.int64(1), st_.int64(2)}, st_.int64(3) != 0};
  return true;
}

QuerySleeps::QuerySleeps(Store& store, std::int64_t until_ns) {
  if (!detail::table_exists(store, "query_sleep")) return;
  st_.emplace(store.db(),
              "SELECT start_ns, client_id, seq, sleep_ns FROM query_sleep WHERE start_ns <= ?1 "
              "ORDER BY start_ns, client_id, seq");
  st_->bind(1, until_ns);
}

bool QuerySleeps::next(QuerySleep& row) {
  if (!st_ || !st_->step()) return false;
  row = {{st_->int64(0), st_->int64(1), st_->int64(2)}, st_->int64(3)};
  return true;
}

RetryTotals read_retry_totals(Store& store) {
  RetryTotals t;
  if (!detail::table_exists(store, "query_retry")) return t;
  Cursor st(store.db(),
            "SELECT count(*), coalesce(sum(tries - 1), 0), coalesce(sum(retried_ns), 0), "
            "(SELECT coalesce(sum(latency_ns), 0) FROM query) FROM query_retry");
  if (st.step()) t = {st.int64(0), st.int64(1), st.int64(2), st.int64(3)};
  return t;
}

HostTicks::HostTicks(Store& store, std::int64_t from_ns, std::int64_t to_ns)
    : st_(store.db(),
          "SELECT s.time_ns, s.sampler_cpu_ns, h.sample_id, h.cpu_user_ns, h.cpu_nice_ns, "
          "h.cpu_system_ns, h.cpu_irq_ns, h.cpu_softirq_ns, h.cpu_idle_ns, h.cpu_iowait_ns, "
          "h.cpu_steal_ns, h.procs_running, h.processes_d_state FROM sample s LEFT JOIN "
          "host_sample h ON h.sample_id = s.sample_id WHERE s.time_ns > ?1 AND s.time_ns <= ?2 "
          "ORDER BY s.sample_id") {
  st_.bind(1, from_ns);
  st_.bind(2, to_ns);
}

bool HostTicks::next(HostTick& tick) {
  if (!st_.step()) return false;
  tick = HostTick{};
  tick.time_ns = st_.int64(0);
  tick.sampler_cpu_ns = st_.int64(1);
  tick.has_host = !st_.is_null(2);
  if (!tick.has_host) return true;
  tick.procs_running = static_cast<int>(st_.int64(11));
  tick.processes_d_state = static_cast<int>(st_.int64(12));
  tick.has_cpu = !st_.is_null(3);  // the first tick has no deltas
  if (!tick.has_cpu) return true;
  for (int c = 3; c <= 7; ++c) tick.busy_ns += st_.int64(c);
  tick.idle_ns = st_.int64(8);
  tick.iowait_ns = st_.int64(9);
  tick.steal_ns = st_.int64(10);
  return true;
}

SampleTimeRows::SampleTimeRows(Store& store)
    : st_(store.db(), "SELECT sample_id, time_ns FROM sample ORDER BY sample_id") {}

bool SampleTimeRows::next(SampleTime& row) {
  if (!st_.step()) return false;
  row.sample_id = st_.int64(0);
  row.time_ns = st_.int64(1);
  return true;
}

AshRows::AshRows(Store& store, std::int64_t from_ns, std::int64_t to_ns, bool with_poll_duration)
    : st_(store.db(),
          with_poll_duration
              ? "SELECT time_ns, pid, backend_type, state, wait_event_type, wait_event, "
                "blocking_pids, (SELECT t.duration_ns FROM ash_tick t WHERE t.ash_tick = "
                "pg_activity_sample.ash_tick), query_text_id FROM pg_activity_sample WHERE "
                "time_ns >= ?1 AND time_ns < ?2 ORDER BY time_ns"
              : "SELECT time_ns, pid, backend_type, state, wait_event_type, wait_event, "
                "blocking_pids, NULL, query_text_id FROM pg_activity_sample WHERE time_ns >= ?1 "
                "AND time_ns < ?2 ORDER BY time_ns") {
  st_.bind(1, from_ns);
  st_.bind(2, to_ns);
}

bool AshRows::next(AshRow& row) {
  if (!st_.step()) return false;
  row.time_ns = st_.int64(0);
  row.pid = static_cast<int>(st_.int64(1));
  row.backend_type = opt_text(2);
  row.state = opt_text(3);
  row.wait_event_type = opt_text(4);
  row.wait_event = opt_text(5);
  row.blocking_pids = opt_text(6);
  row.poll_duration_ns = st_.int64(7);
  row.query_text_id = st_.opt_int64(8);
  return true;
}

ProcessRows::ProcessRows(Store& store, std::int64_t from_sample_id)
    : st_(store.db(), from_sample_id) {}

bool ProcessRows::next(ProcessTick& row) {
  if (!st_.step()) return false;
  row.sample_id = st_.int64(0);
  row.process_id = st_.int64(1);
  row.state = st_.text(2);
  row.cpu_ns = st_.opt_int64(3);
  row.run_delay_ns = st_.opt_int64(4);
  row.span_ns = st_.opt_int64(5);
  row.wchan = st_.is_null(6) ? std::nullopt : std::optional<std::string_view>(st_.text(6));
  row.utime_ticks = st_.opt_int64(7);
  row.stime_ticks = st_.opt_int64(8);
  row.write_bytes = st_.opt_int64(9);
  row.majflt = st_.opt_int64(10);
  return true;
}

DriverThreadRows::DriverThreadRows(Store& store, std::int64_t process_id,
                                   std::int64_t from_sample_id)
    : st_(store.db(),
          "SELECT sample_id, cpu_ns, run_delay_ns, span_ns FROM thread_sample WHERE process_id = "
          "?1 AND comm LIKE 'ss-driver/%' AND sample_id >= ?2 ORDER BY sample_id") {
  st_.bind(1, process_id);
  st_.bind(2, from_sample_id);
}

bool DriverThreadRows::next(DriverThreadRow& row) {
  if (!st_.step()) return false;
  row = {st_.int64(0), st_.opt_int64(1), st_.opt_int64(2), st_.opt_int64(3)};
  return true;
}

std::vector<UnfinishedQuery> unfinished_queries(Store& store, std::int64_t until_ns) {
  std::vector<UnfinishedQuery> out;
  if (!detail::table_exists(store, "query_unfinished")) return out;
  // A transaction cut short in \sleep has a query_sleep row with its key.
  const bool sleeps = detail::table_exists(store, "query_sleep");
  Cursor st(store.db(),
            sleeps ? "SELECT u.start_ns, u.client_id, u.seq, u.elapsed_ns, u.lag_ns, s.sleep_ns "
                     "FROM query_unfinished u LEFT JOIN query_sleep s USING (start_ns, "
                     "client_id, seq) WHERE u.start_ns <= ?1 ORDER BY 1, 2, 3"
                   : "SELECT start_ns, client_id, seq, elapsed_ns, lag_ns, NULL FROM "
                     "query_unfinished WHERE start_ns <= ?1 ORDER BY 1, 2, 3");
  st.bind(1, until_ns);
  while (st.step()) {
    const auto elapsed_ns = st.int64(3);
    out.push_back({{st.int64(0), st.int64(1), st.int64(2)},
                   elapsed_ns,
                   st.opt_int64(4),
                   std::clamp<std::int64_t>(st.opt_int64(5).value_or(0), 0,
                                            std::max<std::int64_t>(elapsed_ns, 0))});
  }
  return out;
}

}  // namespace stallscope::schema
