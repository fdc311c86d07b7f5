// The query path: the processes whose time is client time (the driver and
// this run's backends, and the poolers between them), how the queries are
// tied to their backends, the path's cgroups and the checkpointer.
#include <set>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "correlate/passes.h"

namespace stallscope::correlate::detail {
namespace {

// The driver (the stallscope process) and the backends that served the
// driver's connections (client.backend_pid), matched by pid and a start time
// no later than the run's or connection's start (+ kBackendStartSlackNs).
QueryPath find_driver_and_backends(SQLite::Database& db, const RunRow& run) {
  QueryPath qp;
  {
    SQLite::Statement st(db,
                         "SELECT process_id FROM process WHERE pid = ?1 AND "
                         "(?2 IS NULL OR start_ticks = ?2) AND "
                         "(start_ns IS NULL OR start_ns <= ?3) "
                         "ORDER BY start_ticks DESC LIMIT 1");
    st.bind(1, run.stallscope_pid);
    if (run.stallscope_start_ticks) {
      st.bind(2, *run.stallscope_start_ticks);
    } else {
      st.bind(2);
    }
    st.bind(3, run.summary.start_ns + kBackendStartSlackNs);
    if (st.executeStep()) qp.driver_process_id = st.getColumn(0).getInt64();
  }
  SQLite::Statement clients(
      db, "SELECT backend_pid, connect_ns FROM client WHERE backend_pid IS NOT NULL");
  SQLite::Statement proc(db,
                         "SELECT process_id FROM process WHERE pid = ?1 AND "
                         "(start_ns IS NULL OR ?2 IS NULL OR start_ns <= ?2) "
                         "ORDER BY start_ticks DESC LIMIT 1");
  while (clients.executeStep()) {
    int pid = clients.getColumn(0).getInt();
    qp.backend_pids.insert(pid);
    proc.bind(1, pid);
    if (clients.getColumn(1).isNull()) {
      proc.bind(2);
    } else {
      proc.bind(2, clients.getColumn(1).getInt64() + kBackendStartSlackNs);
    }
    if (proc.executeStep()) qp.backend_process_ids.insert(proc.getColumn(0).getInt64());
    proc.reset();
  }
  return qp;
}

// Behind a pooler the driver's backend pids are the pooler's. This run's
// backends are the client backends (cmdline "postgres: USER DB HOST…") of the
// postmaster whose processes ASH saw, sampled during the queries.
void find_backends_behind_pooler(SQLite::Database& db, QueryPath& qp, Span span,
                                 std::vector<std::string>& notes) {
  qp.backend_pids.clear();
  SQLite::Statement st(
      db,
      "SELECT DISTINCT p.process_id, p.pid FROM process p JOIN process_sample ps "
      "ON ps.process_id = p.process_id JOIN sample s ON s.sample_id = ps.sample_id "
      "WHERE s.time_ns > ?1 AND s.time_ns <= ?2 "
      "AND (p.cmdline LIKE 'postgres: % % [local]%' OR p.cmdline LIKE 'postgres: % % %(%)%') "
      "AND p.ppid IN (SELECT q.ppid FROM process q WHERE q.pid IN "
      "(SELECT DISTINCT pid FROM pg_activity_sample WHERE time_ns >= ?1 AND time_ns < ?2))");
  st.bind(1, span.start_ns);
  st.bind(2, span.end_ns);
  while (st.executeStep()) {
    qp.backend_process_ids.insert(st.getColumn(0).getInt64());
    qp.backend_pids.insert(st.getColumn(1).getInt());
  }
  notes.push_back(
      "Behind a pooler: this run's backends are the client backends (by command line) of the "
      "server whose processes ASH sampled.");
}

// Poolers and proxies on the query path (see ExplainOptions), and — when the
// driver's backend pids were a pooler's — the server's client backends seen
// by ASH in the span as this run's backends.
void find_middle_processes(SQLite::Database& db, const ExplainOptions& opt, QueryPath& qp,
                           Span span, std::vector<std::string>& notes) {
  std::vector<std::string> names = opt.path_process_names;
  const bool auto_detect =
      names.empty() && !qp.backend_pids.empty() && qp.backend_process_ids.empty();
  if (auto_detect) names = {"pgbouncer", "pgcat", "odyssey", "pgpool"};
  SQLite::Statement st(db,
                       "SELECT DISTINCT p.process_id, p.comm FROM process p JOIN process_sample ps "
                       "ON ps.process_id = p.process_id JOIN sample s ON s.sample_id = "
                       "ps.sample_id WHERE p.comm = ?1 AND s.time_ns > ?2 AND s.time_ns <= ?3");
  std::set<std::string> found;
  for (const auto& name : names) {
    st.bind(1, name);
    st.bind(2, span.start_ns);
    st.bind(3, span.end_ns);
    while (st.executeStep()) {
      qp.middle_processes.emplace(st.getColumn(0).getInt64(), st.getColumn(1).getString());
      found.insert(name);
    }
    st.reset();
  }
  for (const auto& name : opt.path_process_names) {
    if (!found.contains(name)) {
      notes.push_back(fmt::format(
          "--path-process {}: no process of that name was sampled during the queries.", name));
    }
  }
  if (auto_detect && !found.empty()) {
    notes.push_back(fmt::format(
        "The driver's backend pids match no sampled process, so it talked to a pooler: {} taken "
        "as part of the query path (use --path-process to name it).",
        fmt::join(found, ", ")));
  }
  if (qp.middle_processes.empty() || !qp.backend_process_ids.empty()) return;
  find_backends_behind_pooler(db, qp, span, notes);
}

}  // namespace

QueryPath find_query_path(SQLite::Database& db, const QueryPathInputs& in,
                          std::vector<std::string>& notes) {
  auto qp = find_driver_and_backends(db, in.run);
  // Client + server: the driver ran on the client host; its figures come
  // from the client pass, never from the server file's processes.
  if (in.pair) qp.driver_process_id.reset();
  qp.driver_backends_unsampled = qp.backend_process_ids.empty();
  if (in.has_queries) find_middle_processes(db, in.options, qp, in.span, notes);
  return qp;
}

// Per-query attribution (attribution.h) where each query's backend is known;
// behind a pooler (its pids are the pooler's) or without backend pids (an
// imported pgbench log), host-wide figures.
Attribution choose_attribution(SQLite::Database& db, const QueryPath& qp,
                               const BackendMap& backends, std::int64_t queries) {
  Attribution att;
  att.queries = queries;
  if (qp.driver_backends_unsampled && !qp.middle_processes.empty()) {
    att.method = "host_wide";
    att.reason =
        "behind a pooler a query's server backend is not known: every client backend of the "
        "server counts over the whole query span";
  } else if (backends.empty()) {
    att.method = "host_wide";
    const bool imported =
        db.execAndGet("SELECT command_line LIKE '%import-pgbench%' FROM run").getInt() != 0;
    att.reason = fmt::format(
        "the file has no backend identity{}: every client backend's samples count over the "
        "whole query span",
        imported ? " (imported pgbench log)" : " (no driver connection recorded a backend pid)");
  } else if (!backends.queries_name_connections()) {
    att.method = "host_wide";
    att.reason =
        "the queries do not name their driver connection (query.connection): every sample of "
        "the run's backends counts over the whole query span";
  } else {
    att.method = "per_query";
  }
  return att;
}

// cgroup cpu.stat of the query path's cgroups (cgroup_sample, where the
// sampler recorded it): marks path processes whose cgroup was throttled in
// the span and keeps the most throttled cgroup's figures as evidence.
void read_cgroups(SQLite::Database& db, QueryPath& qp, Facts& f, Span span) {
  std::map<std::string, std::vector<std::int64_t>> path_cgroups;
  SQLite::Statement procs(db, "SELECT process_id, cgroup FROM process WHERE cgroup IS NOT NULL");
  while (procs.executeStep()) {
    const auto id = procs.getColumn(0).getInt64();
    if (qp.is_path(id)) path_cgroups[procs.getColumn(1).getString()].push_back(id);
  }
  SQLite::Statement st(db,
                       "SELECT count(*), sum(cs.nr_periods), sum(cs.nr_throttled), "
                       "sum(cs.throttled_ns) FROM cgroup_sample cs JOIN sample s "
                       "ON s.sample_id = cs.sample_id WHERE cs.cgroup = ?1 "
                       "AND s.time_ns > ?2 AND s.time_ns <= ?3");
  for (const auto& [cgroup, ids] : path_cgroups) {
    st.bind(1, cgroup);
    st.bind(2, span.start_ns);
    st.bind(3, span.end_ns);
    st.executeStep();
    if (st.getColumn(0).getInt64() > 0) {
      f.cgroup_data = true;
      const auto throttled = st.getColumn(2).isNull() ? 0 : st.getColumn(2).getInt64();
      const auto throttled_ns = st.getColumn(3).isNull() ? 0 : st.getColumn(3).getInt64();
      if (throttled > 0) qp.throttled_process_ids.insert(ids.begin(), ids.end());
      if (throttled > 0 && throttled_ns >= f.cgroup_throttled_ns) {
        f.throttled_cgroup = cgroup;
        f.cgroup_throttled_ns = throttled_ns;
        f.cgroup_nr_throttled = throttled;
        f.cgroup_nr_periods = st.getColumn(1).isNull() ? 0 : st.getColumn(1).getInt64();
      }
    }
    st.reset();
  }
}

void find_checkpointers(SQLite::Database& db, QueryPath& qp) {
  SQLite::Statement ck(db,
                       "SELECT process_id FROM process WHERE cmdline LIKE "
                       "'postgres: checkpointer%'");
  while (ck.executeStep()) qp.checkpointer_ids.insert(ck.getColumn(0).getInt64());
}

}  // namespace stallscope::correlate::detail
