// The session readers (session_readers.h).
#include "schema/session_readers.h"

#include <algorithm>
#include <array>
#include <string>

#include <fmt/format.h>

#include "schema/row.h"

namespace stallscope::schema {
namespace {

using detail::column_exists;
using detail::table_exists;

}  // namespace

bool has_sessions(Store& store) {
  if (!table_exists(store, "pg_session")) return false;
  Cursor st(store.db(), "SELECT EXISTS (SELECT 1 FROM pg_session)");
  return st.step() && st.int64(0) != 0;
}

std::vector<SessionInfo> read_sessions(Store& store) {
  std::vector<SessionInfo> out;
  if (!table_exists(store, "pg_session")) return out;
  Cursor st(store.db(),
            "SELECT session_id, pid, backend_start_ns, backend_type, application_name, "
            "client_addr, client_port, usename, datname, client_pid, client_start_ticks "
            "FROM pg_session ORDER BY session_id");
  while (st.step()) {
    out.push_back({.session_id = st.int64(0),
                   .pid = static_cast<int>(st.int64(1)),
                   .backend_start_ns = st.opt_int64(2),
                   .backend_type = std::string(st.text(3)),
                   .application_name = std::string(st.text(4)),
                   .client_addr = std::string(st.text(5)),
                   .client_port = st.opt_int(6),
                   .usename = std::string(st.text(7)),
                   .datname = std::string(st.text(8)),
                   .client_pid = st.opt_int(9),
                   .client_start_ticks = st.opt_int64(10)});
  }
  return out;
}

std::optional<AshTickSpan> ash_tick_span(Store& store, std::int64_t from_ns, std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT min(ash_tick), max(ash_tick), count(*) FROM ash_tick "
            "WHERE time_ns >= ? AND time_ns < ?");
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  if (!st.step() || st.int64(2) == 0) return std::nullopt;
  return AshTickSpan{.first = st.int64(0), .last = st.int64(1), .polls = st.int64(2)};
}

std::vector<SessionBusyPolls> session_busy_polls(Store& store, std::int64_t from_ns,
                                                 std::int64_t to_ns) {
  Cursor st(store.db(),
            "SELECT pid, backend_start_ns, state, wait_event_type, count(*) "
            "FROM pg_activity_sample WHERE time_ns >= ? AND time_ns < ? "
            "GROUP BY pid, backend_start_ns, state, wait_event_type");
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  std::vector<SessionBusyPolls> out;
  while (st.step()) {
    out.push_back({.pid = static_cast<int>(st.int64(0)),
                   .backend_start_ns = st.opt_int64(1),
                   .state = std::string(st.text(2)),
                   .wait_event_type = std::string(st.text(3)),
                   .polls = st.int64(4)});
  }
  return out;
}

std::vector<SessionIdlePolls> session_idle_polls(Store& store, const AshTickSpan& span) {
  std::vector<SessionIdlePolls> out;
  if (!table_exists(store, "pg_session_idle")) return out;
  // A stretch covers ticks [first_ash_tick, first_ash_tick + polls - 1].
  Cursor st(store.db(),
            "SELECT session_id, sum(min(first_ash_tick + polls - 1, ?2) - "
            "max(first_ash_tick, ?1) + 1) FROM pg_session_idle "
            "WHERE first_ash_tick <= ?2 AND first_ash_tick + polls - 1 >= ?1 "
            "GROUP BY session_id ORDER BY session_id");
  st.bind(1, span.first);
  st.bind(2, span.last);
  while (st.step()) out.push_back({.session_id = st.int64(0), .polls = st.int64(1)});
  return out;
}

std::vector<RecordClient> read_record_clients(Store& store) {
  std::vector<RecordClient> out;
  if (!table_exists(store, "record_client")) return out;
  Cursor st(store.db(), "SELECT source, pid, start_ticks, comm FROM record_client");
  while (st.step()) {
    out.push_back({.source = std::string(st.text(0)),
                   .pid = st.opt_int(1),
                   .start_ticks = st.opt_int64(2),
                   .comm = std::string(st.text(3))});
  }
  return out;
}

ProcessCpu process_cpu(Store& store, std::int64_t process_id, std::int64_t from_ns,
                       std::int64_t to_ns) {
  ProcessCpu out;
  {
    Cursor st(store.db(),
              "SELECT coalesce(sum(t.cpu_ns), 0), coalesce(sum(t.run_delay_ns), 0), "
              "min(CASE WHEN t.span_ns IS NULL THEN s.time_ns END) FROM process_tick t JOIN sample "
              "s ON s.sample_id = t.sample_id "
              "WHERE t.process_id = ? AND s.time_ns >= ? AND s.time_ns < ?");
    st.bind(1, process_id);
    st.bind(2, from_ns);
    st.bind(3, to_ns);
    if (st.step()) {
      out.cpu_ns = st.int64(0);
      out.run_delay_ns = st.int64(1);
      out.first_sight_ns = st.opt_int64(2);
    }
  }
  Cursor st(store.db(),
            "SELECT x.tid, x.cpu, c.comm, x.delay FROM (SELECT t.tid, coalesce(sum(t.cpu_ns), 0) "
            "AS cpu, coalesce(sum(t.run_delay_ns), 0) AS delay, max(t.thread_comm_id) AS comm_id "
            "FROM thread_tick t JOIN sample s ON s.sample_id = t.sample_id "
            "WHERE t.process_id = ? AND s.time_ns >= ? AND s.time_ns < ? GROUP BY t.tid) x "
            "LEFT JOIN thread_comm c ON c.thread_comm_id = x.comm_id ORDER BY x.cpu DESC, x.tid");
  st.bind(1, process_id);
  st.bind(2, from_ns);
  st.bind(3, to_ns);
  while (st.step()) {
    if (out.threads_sampled++ == 0) {
      out.top_thread_tid = static_cast<int>(st.int64(0));
      out.top_thread_cpu_ns = st.int64(1);
      out.top_thread_comm = std::string(st.text(2));
      out.top_thread_run_delay_ns = st.int64(3);
    }
  }
  return out;
}

std::vector<ProcessSleep> process_sleeps(Store& store, std::int64_t process_id,
                                         std::int64_t from_ns, std::int64_t to_ns) {
  // A process sampled per thread in the span: where each thread slept (the
  // process's own row has one wait channel, its main thread's, and its
  // span minus the CPU of all its threads is no sleep time).
  const bool per_thread = [&] {
    Cursor st(store.db(),
              "SELECT 1 FROM thread_tick t JOIN sample s ON s.sample_id = t.sample_id WHERE "
              "t.process_id = ? AND s.time_ns >= ? AND s.time_ns < ? AND t.span_ns IS NOT NULL "
              "LIMIT 1");
    st.bind(1, process_id);
    st.bind(2, from_ns);
    st.bind(3, to_ns);
    return st.step();
  }();
  // What a row's task waited on in poll, select, epoll_wait or a blocking
  // read (process_poll: the thread row's own, or the process row's; files
  // made before it existed: unknown; before its tid column, the main
  // thread's alone; before database_sockets, the own timer alone).
  const bool polls = table_exists(store, "process_poll");
  const bool database = polls && column_exists(store, "process_poll", "database_sockets");
  const bool queued = database && column_exists(store, "process_poll", "database_queued");
  const bool by_tid = polls && column_exists(store, "process_poll", "tid");
  const std::string same_task =
      by_tid       ? (per_thread ? "pp.tid = t.tid" : "pp.tid = 0")
      : per_thread ? "t.tid = (SELECT pid FROM process p WHERE p.process_id = t.process_id)"
                   : "1";
  // On the database: a database socket waited alone, or, among other
  // peers (an event loop also waiting for its own clients), with bytes
  // queued on it — a query outstanding at that moment.
  const std::string on_database =
      !database ? "0"
      : queued  ? "pp.database_sockets > 0 AND (pp.peer_sockets = pp.database_sockets OR "
                  "pp.database_queued > 0)"
                : "pp.database_sockets > 0";
  const std::string slept_on =
      !polls ? "0"
             : fmt::format(
                   "coalesce((SELECT CASE WHEN {} THEN 1 WHEN pp.timed = 1 AND pp.peer_sockets = 0 "
                   "THEN 2 WHEN {} THEN 3 ELSE 0 END FROM process_poll pp WHERE pp.sample_id = "
                   "t.sample_id AND pp.process_id = t.process_id AND {}), 0)",
                   on_database, database ? "pp.database_sockets IS NOT NULL" : "0", same_task);
  const std::string sql =
      "SELECT t.state, coalesce(w.name, ''), " + slept_on +
      ", sum(max(CASE t.span_ns WHEN 0 THEN s.interval_ns ELSE t.span_ns END - "
      "coalesce(t.cpu_ns, 0) - coalesce(t.run_delay_ns, 0), 0)), count(*) FROM " +
      (per_thread ? "thread_tick" : "process_tick") +
      " t JOIN sample s ON s.sample_id = t.sample_id LEFT JOIN wchan w ON w.wchan_id = "
      "t.wchan_id WHERE t.process_id = ? AND s.time_ns >= ? AND s.time_ns < ? AND t.span_ns "
      "IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 4 DESC";
  Cursor st(store.db(), sql.c_str());
  st.bind(1, process_id);
  st.bind(2, from_ns);
  st.bind(3, to_ns);
  std::vector<ProcessSleep> out;
  while (st.step()) {
    out.push_back({.state = std::string(st.text(0)),
                   .wchan = std::string(st.text(1)),
                   .on = std::array{SleptOn::unknown, SleptOn::database, SleptOn::own_timer,
                                    SleptOn::other}[static_cast<std::size_t>(
                       std::clamp<std::int64_t>(st.int64(2), 0, 3))],
                   .sleep_ns = st.opt_int64(3).value_or(0),
                   .rows = st.int64(4)});
  }
  return out;
}

}  // namespace stallscope::schema
