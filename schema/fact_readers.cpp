// The reads behind explain's path and pooler facts.
#include "schema/fact_readers.h"

namespace stallscope::schema {

std::optional<SampleIdRange> sample_ids_in(Store& store, std::int64_t after_ns,
                                           std::int64_t until_ns) {
  Cursor st(store.db(),
            "SELECT min(sample_id), max(sample_id) FROM sample "
            "WHERE time_ns > ?1 AND time_ns <= ?2");
  st.bind(1, after_ns);
  st.bind(2, until_ns);
  st.step();
  if (st.is_null(0)) return std::nullopt;
  return SampleIdRange{st.int64(0), st.int64(1)};
}

HostMemoryTotals host_memory_totals(Store& store, std::int64_t after_ns, std::int64_t until_ns) {
  Cursor st(
      store.db(),
      "SELECT count(*), sum(CASE WHEN m.psi_memory_some_us IS NOT NULL THEN s.interval_ns END), "
      "sum(m.psi_memory_some_us), sum(m.psi_memory_full_us), sum(m.major_faults), "
      "sum(m.swap_in_pages), sum(m.swap_out_pages) FROM host_memory_sample m "
      "JOIN sample s ON s.sample_id = m.sample_id WHERE s.time_ns > ?1 AND s.time_ns <= ?2");
  st.bind(1, after_ns);
  st.bind(2, until_ns);
  st.step();
  // int64() reads NULL as 0.
  return {st.int64(0), st.int64(1), st.int64(2), st.int64(3),
          st.int64(4), st.int64(5), st.int64(6)};
}

DriverThreadStateScan::DriverThreadStateScan(Store& store, std::int64_t process_id,
                                             std::int64_t first_sample_id,
                                             std::int64_t last_sample_id)
    : cursor_(store.db(),
              "SELECT state, wchan FROM thread_sample WHERE process_id = ?1 AND "
              "comm LIKE 'ss-driver/%' AND sample_id >= ?2 AND sample_id <= ?3") {
  cursor_.bind(1, process_id);
  cursor_.bind(2, first_sample_id);
  cursor_.bind(3, last_sample_id);
}

bool DriverThreadStateScan::next(ThreadState& row) {
  if (!cursor_.step()) return false;
  row.state = cursor_.text(0);
  if (cursor_.is_null(1)) {
    row.wchan.reset();
  } else {
    row.wchan = std::string(cursor_.text(1));
  }
  return true;
}

ConnectTotals connects_in(Store& store, std::int64_t from_ns, std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT count(*), sum(connect_latency_ns) FROM client "
            "WHERE connect_ns >= ?1 AND connect_ns < ?2");
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  st.step();
  return {st.int64(0), st.int64(1)};  // a NULL sum reads as 0
}

std::optional<std::int64_t> mean_first_query_gap_ns(Store& store, std::int64_t from_ns,
                                                    std::int64_t to_ns) {
  // One grouped scan of the query table (clustered by start time, so a
  // per-connection lookup would scan it once per connection).
  Cursor st(store.db(),
            "SELECT avg(f.first_ns - c.connect_ns) FROM client c JOIN (SELECT "
            "client_id, connection, min(start_ns) AS first_ns FROM query WHERE "
            "connection IS NOT NULL GROUP BY client_id, connection) f "
            "USING (client_id, connection) WHERE c.connect_ns >= ?1 AND "
            "c.connect_ns < ?2 AND f.first_ns >= c.connect_ns");
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  if (!st.step() || st.is_null(0)) return std::nullopt;
  return static_cast<std::int64_t>(st.real(0));
}

std::vector<ConnectionBackend> connection_backends(Store& store, std::int64_t from_ns,
                                                   std::int64_t to_ns,
                                                   std::int64_t start_slack_ns) {
  // process_sample has no index by process, so the last ticks come from one
  // grouped scan, not one scan per backend.
  Cursor st(store.db(),
            "WITH b AS (SELECT p.process_id, p.start_ns FROM client c JOIN process p ON p.pid = "
            "c.backend_pid AND p.start_ns IS NOT NULL AND p.start_ns <= c.connect_ns + ?3 AND "
            "p.start_ns >= c.connect_ns - ?3 WHERE c.connect_ns >= ?1 AND c.connect_ns < ?2), "
            "last AS (SELECT process_id, max(sample_id) AS sample_id FROM process_sample WHERE "
            "process_id IN (SELECT process_id FROM b) GROUP BY process_id) "
            "SELECT b.process_id, b.start_ns, s.time_ns FROM b LEFT JOIN last USING (process_id) "
            "LEFT JOIN sample s ON s.sample_id = last.sample_id");
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  st.bind(3, start_slack_ns);
  std::vector<ConnectionBackend> out;
  while (st.step()) out.push_back({st.int64(0), st.int64(1), st.opt_int64(2)});
  return out;
}

std::set<std::string> pooler_databases(Store& store, std::int64_t after_ns,
                                       std::int64_t before_ns) {
  Cursor st(store.db(),
            "SELECT DISTINCT database FROM pooler_sample WHERE time_ns > ?1 AND time_ns < ?2");
  st.bind(1, after_ns);
  st.bind(2, before_ns);
  std::set<std::string> out;
  while (st.step()) out.emplace(st.text(0));
  return out;
}

PoolerSampleScan::PoolerSampleScan(Store& store, std::int64_t after_ns, std::int64_t before_ns)
    : cursor_(store.db(),
              "SELECT database, time_ns, interval_ns, wait_ns, xacts, cl_waiting, sv_active, "
              "maxwait_ns, xact_ns FROM pooler_sample WHERE time_ns > ?1 AND time_ns < ?2 "
              "ORDER BY time_ns") {
  cursor_.bind(1, after_ns);
  cursor_.bind(2, before_ns);
}

bool PoolerSampleScan::next(PoolerSample& row) {
  if (!cursor_.step()) return false;
  row.database = cursor_.text(0);
  row.time_ns = cursor_.int64(1);
  row.interval_ns = cursor_.opt_int64(2);
  row.wait_ns = cursor_.opt_int64(3);
  row.xacts = cursor_.opt_int64(4);
  row.cl_waiting = cursor_.opt_int64(5);
  row.sv_active = cursor_.opt_int64(6);
  row.maxwait_ns = cursor_.opt_int64(7);
  row.xact_ns = cursor_.opt_int64(8);
  return true;
}

}  // namespace stallscope::schema
