// Reads for an imported pgbench log explained with a record file.
#include "schema/pgbench_readers.h"

#include "schema/row.h"

namespace stallscope::schema {

std::vector<SampledProcess> sampled_processes_with_cpu(Store& store, const std::string& comm,
                                                       std::int64_t from_ns, std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT p.process_id, p.pid, p.start_ns, count(*), coalesce(sum(t.cpu_ns), 0) "
            "FROM process p JOIN process_tick t ON t.process_id = p.process_id "
            "JOIN sample s ON s.sample_id = t.sample_id "
            "WHERE p.comm = ?1 AND s.time_ns > ?2 AND s.time_ns <= ?3 "
            "GROUP BY p.process_id ORDER BY p.process_id");
  st.bind(1, comm);
  st.bind(2, from_ns);
  st.bind(3, to_ns);
  std::vector<SampledProcess> out;
  while (st.step()) {
    out.push_back(
        {st.int64(0), static_cast<int>(st.int64(1)), st.opt_int64(2), st.int64(3), st.int64(4)});
  }
  return out;
}

std::vector<AshBackend> ash_pids_with_application_name(Store& store, const std::string& name,
                                                       std::int64_t from_ns, std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT pid, count(*), max(backend_start_ns) FROM pg_activity_sample "
            "WHERE application_name = ?1 AND time_ns >= ?2 AND time_ns <= ?3 "
            "GROUP BY pid ORDER BY pid");
  st.bind(1, name);
  st.bind(2, from_ns);
  st.bind(3, to_ns);
  std::vector<AshBackend> out;
  while (st.step()) {
    out.push_back({static_cast<int>(st.int64(0)), st.int64(1), st.opt_int64(2)});
  }
  return out;
}

std::vector<int> ash_pids_without_application_name(Store& store, const std::string& name,
                                                   std::int64_t from_ns, std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT DISTINCT pid FROM pg_activity_sample WHERE time_ns >= ?2 AND time_ns <= ?3 "
            "AND application_name <> '' AND application_name <> ?1 ORDER BY pid");
  st.bind(1, name);
  st.bind(2, from_ns);
  st.bind(3, to_ns);
  std::vector<int> out;
  while (st.step()) out.push_back(static_cast<int>(st.int64(0)));
  return out;
}

std::vector<PgbenchAggregateRow> pgbench_aggregates_at(Store& store,
                                                       std::int64_t interval_start_ns) {
  Cursor st(store.db(),
            "SELECT file, line, transactions, latency_sum_ns, latency_sum2_us2, latency_min_ns, "
            "latency_max_ns, lag_sum_ns, lag_sum2_us2, lag_min_ns, lag_max_ns, skipped, retried, "
            "retries, serialization_failures, deadlock_failures FROM pgbench_aggregate "
            "WHERE interval_start_ns = ?1 ORDER BY file, line");
  st.bind(1, interval_start_ns);
  std::vector<PgbenchAggregateRow> out;
  while (st.step()) {
    PgbenchAggregateRow r;
    r.file = std::string(st.text(0));
    r.line = st.int64(1);
    r.interval_start_ns = interval_start_ns;
    r.transactions = st.int64(2);
    r.latency_sum_ns = st.int64(3);
    r.latency_sum2_us2 = st.real(4);
    r.latency_min_ns = st.opt_int64(5);
    r.latency_max_ns = st.opt_int64(6);
    r.lag_sum_ns = st.opt_int64(7);
    if (!st.is_null(8)) r.lag_sum2_us2 = st.real(8);
    r.lag_min_ns = st.opt_int64(9);
    r.lag_max_ns = st.opt_int64(10);
    r.skipped = st.opt_int64(11);
    r.retried = st.opt_int64(12);
    r.retries = st.opt_int64(13);
    r.serialization_failures = st.opt_int64(14);
    r.deadlock_failures = st.opt_int64(15);
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<std::string> run_command_line(Store& store) {
  Cursor st(store.db(), "SELECT command_line FROM main.run");
  if (!st.step()) return std::nullopt;
  return std::string(st.text(0));
}

}  // namespace stallscope::schema
