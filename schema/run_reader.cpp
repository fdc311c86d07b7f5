// The SQL behind run_reader.h.
#include "schema/run_reader.h"

#include "common/units.h"

namespace stallscope::schema {
namespace {

TickRange tick_range(Store& store, const char* sql) {
  Cursor st(store.db(), sql);
  TickRange r;
  if (st.step()) {
    r.rows = st.int64(0);
    r.first_ns = st.opt_int64(1);
    r.last_ns = st.opt_int64(2);
  }
  return r;
}

std::int64_t count(Store& store, const char* sql, std::int64_t param) {
  Cursor st(store.db(), sql);
  st.bind(1, param);
  return st.step() ? st.int64(0) : 0;
}

// The first column of the first row: 0 (or "") without rows or for NULL.
std::int64_t single_int64(Store& store, const char* sql) {
  Cursor st(store.db(), sql);
  return st.step() ? st.int64(0) : 0;
}

}  // namespace

std::optional<RunRow> read_run(Store& store) {
  Cursor st(store.db(),
            "SELECT host, kernel, cores, mode, status, start_ns, end_ns, clients, threads, "
            "protocol, sql, server_version, end_reason, hz, stallscope_pid, "
            "stallscope_start_ticks, clock_ticks_per_s FROM run "
            "WHERE run_id = 1");
  if (!st.step()) return std::nullopt;
  RunRow r;
  r.host = st.text(0);
  r.kernel = st.text(1);
  r.cores = static_cast<int>(st.int64(2));
  r.mode = st.text(3);
  r.status = st.text(4);
  r.start_ns = st.int64(5);
  r.end_ns = st.opt_int64(6);
  r.clients = st.opt_int(7);
  r.threads = st.opt_int(8);
  r.protocol = st.opt_text(9);
  r.sql = st.opt_text(10);
  r.server_version = st.opt_text(11);
  r.end_reason = st.opt_text(12);
  r.hz = st.real(13);
  r.stallscope_pid = static_cast<int>(st.int64(14));
  r.stallscope_start_ticks = st.opt_int64(15);
  r.clock_ticks_per_s = st.int64(16);
  if (detail::column_exists(store, "run", "rate_tps")) {
    Cursor rate(store.db(), "SELECT rate_tps FROM run WHERE run_id = 1");
    if (rate.step() && !rate.is_null(0)) r.rate_tps = rate.real(0);
  }
  if (detail::column_exists(store, "run", "machine_id")) {
    Cursor ids(store.db(), "SELECT machine_id, boot_id FROM run WHERE run_id = 1");
    if (ids.step()) {
      r.machine_id = ids.opt_text(0);
      r.boot_id = ids.opt_text(1);
    }
  }
  return r;
}

std::optional<RunMode> run_mode(Store& store) {
  Cursor st(store.db(), "SELECT max(mode) FROM run");
  if (!st.step() || st.is_null(0)) return std::nullopt;
  return parse_run_mode(st.text(0));
}

std::optional<std::string> run_conninfo(Store& store) {
  Cursor st(store.db(), "SELECT conninfo FROM run");
  if (!st.step()) return std::nullopt;
  return st.opt_text(0);
}

TickRange sample_ticks(Store& store) {
  return tick_range(store, "SELECT count(*), min(time_ns), max(time_ns) FROM sample");
}

std::vector<SampleGap> sample_gaps(Store& store, std::int64_t min_interval_ns) {
  Cursor st(store.db(),
            "SELECT time_ns - interval_ns, time_ns FROM sample WHERE interval_ns >= ? ORDER BY "
            "time_ns");
  st.bind(1, min_interval_ns);
  std::vector<SampleGap> out;
  while (st.step()) out.push_back({st.int64(0), st.int64(1)});
  return out;
}

std::optional<std::int64_t> median_sample_interval_ns(Store& store) {
  Cursor st(store.db(),
            "SELECT interval_ns FROM sample WHERE interval_ns IS NOT NULL ORDER BY interval_ns "
            "LIMIT 1 OFFSET (SELECT count(interval_ns) / 2 FROM sample)");
  if (!st.step()) return std::nullopt;
  return st.int64(0);
}

TickRange ash_ticks(Store& store) {
  return tick_range(store, "SELECT count(*), min(time_ns), max(time_ns) FROM ash_tick");
}

bool has_ash_rows(Store& store) {
  return single_int64(store, "SELECT count(*) FROM ash_tick") > 0 ||
         single_int64(store, "SELECT count(*) FROM pg_activity_sample") > 0;
}

std::optional<AggregateSpan> pgbench_aggregate_span(Store& store) {
  Cursor st(store.db(),
            "SELECT min(interval_start_ns), max(interval_start_ns), (SELECT min(d) FROM "
            "(SELECT interval_start_ns - lag(interval_start_ns) OVER (PARTITION BY file "
            "ORDER BY interval_start_ns) AS d FROM pgbench_aggregate) WHERE d > 0) FROM "
            "pgbench_aggregate");
  if (!st.step() || st.is_null(0)) return std::nullopt;
  AggregateSpan span;
  span.start_ns = st.int64(0);
  span.interval_ns = st.is_null(2) ? common::kNsPerS : st.int64(2);
  span.end_ns = st.int64(1) + span.interval_ns;
  return span;
}

std::optional<AggregateTotals> pgbench_aggregate_totals(Store& store) {
  const auto span = pgbench_aggregate_span(store);
  if (!span) return std::nullopt;
  Cursor st(store.db(),
            "SELECT count(*), sum(transactions), sum(coalesce(serialization_failures, 0) + "
            "coalesce(deadlock_failures, 0)), sum(coalesce(skipped, 0)), sum(latency_sum_ns), "
            "min(latency_min_ns), max(latency_max_ns), sum(lag_sum_ns) FROM pgbench_aggregate");
  AggregateTotals a;
  a.span = *span;
  if (!st.step()) return a;
  a.intervals = st.int64(0);
  a.transactions = st.int64(1);
  a.failures = st.int64(2);
  a.skipped = st.int64(3);
  a.latency_sum_ns = st.int64(4);
  a.latency_min_ns = st.opt_int64(5);
  a.latency_max_ns = st.opt_int64(6);
  a.lag_sum_ns = st.opt_int64(7);
  return a;
}

std::vector<AggregateInterval> pgbench_aggregate_intervals(Store& store) {
  Cursor st(store.db(),
            "SELECT interval_start_ns, transactions, latency_sum_ns, "
            "coalesce(serialization_failures, 0) + coalesce(deadlock_failures, 0) FROM "
            "pgbench_aggregate ORDER BY interval_start_ns");
  std::vector<AggregateInterval> out;
  while (st.step()) out.push_back({st.int64(0), st.int64(1), st.int64(2), st.int64(3)});
  return out;
}

LatestQueries latest_query_per_client(Store& store) {
  Cursor st(store.db(),
            "SELECT min(m), max(m), count(*) FROM (SELECT max(start_ns) AS m FROM query GROUP BY "
            "client_id)");
  LatestQueries l;
  if (st.step()) {
    l.earliest_ns = st.int64(0);
    l.latest_ns = st.int64(1);
    l.clients = st.int64(2);
  }
  return l;
}

std::optional<std::int64_t> kept_until_ns(Store& store) {
  Cursor st(store.db(),
            "SELECT max(coalesce(q, s), coalesce(s, q)) FROM (SELECT (SELECT max(start_ns + "
            "latency_ns) FROM query) AS q, (SELECT max(time_ns) FROM sample) AS s)");
  return st.step() ? st.opt_int64(0) : std::nullopt;
}

std::int64_t skipped_queries(Store& store, std::int64_t until_ns) {
  return count(store, "SELECT count(*) FROM query_skipped WHERE start_ns <= ?1", until_ns);
}

std::int64_t queries_after(Store& store, std::int64_t after_ns) {
  return count(store, "SELECT count(*) FROM query WHERE start_ns > ?1", after_ns);
}

std::int64_t query_rows(Store& store) {
  return single_int64(store, "SELECT count(*) FROM query");
}

bool first_query_has_lag(Store& store) {
  return single_int64(store,
                      "SELECT coalesce((SELECT lag_ns IS NOT NULL FROM query ORDER BY start_ns "
                      "LIMIT 1), 0)") != 0;
}

// A lost connection: SQLSTATE class 08, or the server shutting down
// (57P01 admin, 57P02 crash, 57P03 cannot connect now). Both readers below.
#define STALLSCOPE_LOST_CONNECTION_SQLSTATE \
  "(e.sqlstate LIKE '08%' OR e.sqlstate IN ('57P01', '57P02', '57P03'))"

QueryErrors query_errors_by_sqlstate(Store& store, int limit) {
  Cursor st(
      store.db(),
      "SELECT e.sqlstate, count(*), sum(q.latency_ns), min(e.error) FROM query_error e JOIN "
      "query q USING (start_ns, client_id, seq) WHERE NOT " STALLSCOPE_LOST_CONNECTION_SQLSTATE
      " GROUP BY e.sqlstate ORDER BY 2 DESC, 1");
  QueryErrors out;
  while (st.step()) {
    QueryErrorCount c{std::string(st.text(0)), st.int64(1), st.opt_int64(2).value_or(0),
                      st.is_null(3) ? std::string() : std::string(st.text(3))};
    out.total.queries += c.queries;
    out.total.latency_ns += c.latency_ns;
    if (static_cast<int>(out.top.size()) < limit) out.top.push_back(std::move(c));
  }
  return out;
}

ConnectionErrors::ConnectionErrors(Store& store)
    : st_(store.db(),
          "SELECT e.sqlstate, count(*) FROM query_error e JOIN query q USING (start_ns, "
          "client_id, seq) WHERE e.start_ns < ?2 AND e.start_ns + max(q.latency_ns - 1, 0) >= ?1 "
          "AND e.start_ns + max(q.latency_ns - 1, 0) < ?2 AND " STALLSCOPE_LOST_CONNECTION_SQLSTATE
          " GROUP BY e.sqlstate ORDER BY 2 DESC") {}

std::vector<SqlstateCount> ConnectionErrors::between(std::int64_t from_ns, std::int64_t to_ns) {
  st_.reset();
  st_.bind(1, from_ns);
  st_.bind(2, to_ns);
  std::vector<SqlstateCount> out;
  while (st_.step()) out.push_back({std::string(st_.text(0)), st_.int64(1)});
  return out;
}

ConnectionLosses::ConnectionLosses(Store& store)
    : st_(store.db(),
          "SELECT e.start_ns, q.latency_ns, e.sqlstate, e.error FROM query_error e JOIN query q "
          "USING (start_ns, client_id, seq) WHERE e.start_ns < ?2 AND e.start_ns + q.latency_ns > "
          "?1 AND " STALLSCOPE_LOST_CONNECTION_SQLSTATE " ORDER BY e.start_ns + q.latency_ns") {}

#undef STALLSCOPE_LOST_CONNECTION_SQLSTATE

std::vector<ConnectionLoss> ConnectionLosses::overlapping(std::int64_t from_ns,
                                                          std::int64_t to_ns) {
  st_.reset();
  st_.bind(1, from_ns);
  st_.bind(2, to_ns);
  std::vector<ConnectionLoss> out;
  while (st_.step()) {
    out.push_back({st_.int64(0), st_.int64(1), std::string(st_.text(2)), std::string(st_.text(3))});
  }
  return out;
}

namespace {

// The columns ProcessIdentity is read from, and the reading.
constexpr const char* kProcessIdentitySelect =
    "SELECT process_id, pid, start_ticks, start_ns, ppid, comm, cmdline FROM process ";

ProcessIdentity process_identity_of(const Cursor& st) {
  return {.process_id = st.int64(0),
          .pid = static_cast<int>(st.int64(1)),
          .start_ticks = st.int64(2),
          .start_ns = st.opt_int64(3),
          .ppid = st.opt_int(4),
          .comm = std::string(st.text(5)),
          .cmdline = std::string(st.text(6))};
}

std::vector<ProcessIdentity> process_identities(Cursor& st) {
  std::vector<ProcessIdentity> out;
  while (st.step()) out.push_back(process_identity_of(st));
  return out;
}

}  // namespace

std::vector<ProcessIdentity> read_process_identities(Store& store) {
  Cursor st(store.db(), (std::string(kProcessIdentitySelect) + "ORDER BY process_id").c_str());
  return process_identities(st);
}

std::optional<ProcessIdentity> process_identity(Store& store, std::int64_t process_id) {
  Cursor st(store.db(), (std::string(kProcessIdentitySelect) + "WHERE process_id = ?1").c_str());
  st.bind(1, process_id);
  if (!st.step()) return std::nullopt;
  return process_identity_of(st);
}

std::vector<ProcessIdentity> postgres_processes_started_between(Store& store, std::int64_t from_ns,
                                                                std::int64_t to_ns) {
  Cursor st(store.db(), (std::string(kProcessIdentitySelect) +
                         "WHERE start_ns >= ?1 AND start_ns <= ?2 AND (comm = 'postgres' OR "
                         "cmdline LIKE 'postgres: %') ORDER BY start_ns, process_id")
                            .c_str());
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  return process_identities(st);
}

ProcessLookup::ProcessLookup(Store& store)
    : name_(store.db(), "SELECT pid, comm FROM process WHERE process_id = ?1"),
      pid_(store.db(), "SELECT pid FROM process WHERE process_id = ?1"),
      by_pid_(store.db(),
              "SELECT process_id FROM process WHERE pid = ?1 AND (start_ns IS NULL OR ?2 IS NULL "
              "OR start_ns <= ?2) ORDER BY start_ticks DESC LIMIT 1") {}

std::optional<ProcessName> ProcessLookup::name_of(std::int64_t process_id) {
  name_.reset();
  name_.bind(1, process_id);
  if (!name_.step()) return std::nullopt;
  return ProcessName{static_cast<int>(name_.int64(0)), std::string(name_.text(1))};
}

std::optional<int> ProcessLookup::pid_of(std::int64_t process_id) {
  pid_.reset();
  pid_.bind(1, process_id);
  if (!pid_.step()) return std::nullopt;
  return static_cast<int>(pid_.int64(0));
}

std::optional<std::int64_t> ProcessLookup::latest_with_pid(
    int pid, std::optional<std::int64_t> started_by_ns) {
  by_pid_.reset();
  by_pid_.bind(1, pid);
  if (started_by_ns) {
    by_pid_.bind(2, *started_by_ns);
  } else {
    by_pid_.bind_null(2);
  }
  if (!by_pid_.step()) return std::nullopt;
  return by_pid_.int64(0);
}

std::optional<std::int64_t> find_driver_process(Store& store, int pid,
                                                std::optional<std::int64_t> start_ticks,
                                                std::int64_t started_by_ns) {
  Cursor st(store.db(),
            "SELECT process_id FROM process WHERE pid = ?1 AND (?2 IS NULL OR start_ticks = ?2) "
            "AND (start_ns IS NULL OR start_ns <= ?3) ORDER BY start_ticks DESC LIMIT 1");
  st.bind(1, pid);
  if (start_ticks) {
    st.bind(2, *start_ticks);
  } else {
    st.bind_null(2);
  }
  st.bind(3, started_by_ns);
  if (!st.step()) return std::nullopt;
  return st.int64(0);
}

std::int64_t max_process_id(Store& store) {
  return single_int64(store, "SELECT coalesce(max(process_id), 0) FROM process");
}

std::vector<ProcessComm> sampled_processes_named(Store& store, const std::string& comm,
                                                 std::int64_t from_ns, std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT DISTINCT p.process_id, p.comm FROM process p JOIN process_sample ps "
            "ON ps.process_id = p.process_id JOIN sample s ON s.sample_id = "
            "ps.sample_id WHERE p.comm = ?1 AND s.time_ns > ?2 AND s.time_ns <= ?3");
  st.bind(1, comm);
  st.bind(2, from_ns);
  st.bind(3, to_ns);
  std::vector<ProcessComm> out;
  while (st.step()) out.push_back({st.int64(0), std::string(st.text(1))});
  return out;
}

std::vector<ProcessPid> pooled_client_backends(Store& store, std::int64_t from_ns,
                                               std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT DISTINCT p.process_id, p.pid FROM process p JOIN process_sample ps "
            "ON ps.process_id = p.process_id JOIN sample s ON s.sample_id = ps.sample_id "
            "WHERE s.time_ns > ?1 AND s.time_ns <= ?2 "
            "AND (p.cmdline LIKE 'postgres: % % [local]%' OR p.cmdline LIKE 'postgres: % % %(%)%') "
            "AND p.ppid IN (SELECT q.ppid FROM process q WHERE q.pid IN "
            "(SELECT DISTINCT pid FROM pg_activity_sample WHERE time_ns >= ?1 AND time_ns < ?2))");
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  std::vector<ProcessPid> out;
  while (st.step()) out.push_back({st.int64(0), static_cast<int>(st.int64(1))});
  return out;
}

std::vector<std::int64_t> checkpointer_processes(Store& store) {
  Cursor st(store.db(),
            "SELECT process_id FROM process WHERE cmdline LIKE 'postgres: checkpointer%'");
  std::vector<std::int64_t> out;
  while (st.step()) out.push_back(st.int64(0));
  return out;
}

bool has_driver_thread_cpu(Store& store, std::int64_t process_id) {
  Cursor st(store.db(),
            "SELECT 1 FROM thread_sample WHERE process_id = ?1 AND comm LIKE 'ss-driver/%' AND "
            "cpu_ns IS NOT NULL LIMIT 1");
  st.bind(1, process_id);
  return st.step();
}

std::vector<DriverBackend> driver_backends(Store& store) {
  Cursor st(store.db(), "SELECT backend_pid, connect_ns FROM client WHERE backend_pid IS NOT NULL");
  std::vector<DriverBackend> out;
  while (st.step()) out.push_back({static_cast<int>(st.int64(0)), st.opt_int64(1)});
  return out;
}

std::vector<ProcessCgroup> process_cgroups(Store& store) {
  Cursor st(store.db(), "SELECT process_id, cgroup FROM process WHERE cgroup IS NOT NULL");
  std::vector<ProcessCgroup> out;
  while (st.step()) out.push_back({st.int64(0), std::string(st.text(1))});
  return out;
}

CgroupSums::CgroupSums(Store& store)
    : st_(store.db(),
          "SELECT count(*), sum(cs.nr_periods), sum(cs.nr_throttled), sum(cs.throttled_ns) FROM "
          "cgroup_sample cs JOIN sample s ON s.sample_id = cs.sample_id WHERE cs.cgroup = ?1 AND "
          "s.time_ns > ?2 AND s.time_ns <= ?3") {}

CgroupTotals CgroupSums::of(const std::string& cgroup, std::int64_t from_ns, std::int64_t to_ns) {
  st_.reset();
  st_.bind(1, cgroup);
  st_.bind(2, from_ns);
  st_.bind(3, to_ns);
  CgroupTotals t;
  if (!st_.step()) return t;
  // Cursor::int64 reads NULL as 0.
  t.rows = st_.int64(0);
  t.nr_periods = st_.int64(1);
  t.nr_throttled = st_.int64(2);
  t.throttled_ns = st_.int64(3);
  return t;
}

ActivityLookup::ActivityLookup(Store& store)
    : st_(store.db(),
          "SELECT coalesce(t.query, ''), coalesce(a.state, '') FROM pg_activity_sample a LEFT "
          "JOIN pg_query_text t ON t.query_text_id = a.query_text_id WHERE a.pid = ?1 AND "
          "a.time_ns <= ?2 ORDER BY a.time_ns DESC LIMIT 1") {}

std::optional<std::string> query_text(Store& store, std::int64_t query_text_id) {
  Cursor st(store.db(), "SELECT query FROM pg_query_text WHERE query_text_id = ?1");
  st.bind(1, query_text_id);
  if (!st.step()) return std::nullopt;
  return std::string(st.text(0));
}

std::optional<QueryTextEntry> query_text_entry(Store& store, std::int64_t query_text_id) {
  Cursor st(store.db(), "SELECT query_id, query FROM pg_query_text WHERE query_text_id = ?1");
  st.bind(1, query_text_id);
  if (!st.step()) return std::nullopt;
  return QueryTextEntry{st.opt_int64(0), std::string(st.text(1))};
}

std::optional<LatestActivity> ActivityLookup::latest(int pid, std::int64_t at_ns) {
  st_.reset();
  st_.bind(1, pid);
  st_.bind(2, at_ns);
  if (!st_.step()) return std::nullopt;
  return LatestActivity{std::string(st_.text(0)), std::string(st_.text(1))};
}

}  // namespace stallscope::schema
