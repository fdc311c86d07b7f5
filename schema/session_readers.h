// explain's reads for the database sessions of a `record --pg` (or `run`)
// file: the sessions (pg_session), their polls by state (pg_activity_sample
// for non-idle polls, pg_session_idle for idle ones), the processes named as
// clients (record_client), and the CPU of chosen processes and their threads.
// Files of schema version 2 have none of the three tables: the readers then
// return nothing (has_sessions() is false).
//
//   if (schema::has_sessions(store)) {
//     auto sessions = schema::read_sessions(store);
//     auto busy = schema::session_busy_polls(store, from_ns, to_ns);
//     ...
//   }
//
// Errors: SqliteError (row.h) on a failed read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/run_reader.h"  // ProcessIdentity
#include "schema/store.h"

namespace stallscope::schema {

// Whether the file has the pg_session table and at least one row in it.
bool has_sessions(Store& store);

// A pg_session row.
struct SessionInfo {
  std::int64_t session_id = 0;
  int pid = 0;
  std::optional<std::int64_t> backend_start_ns;
  std::string backend_type;  // "" when NULL
  std::string application_name;
  std::string client_addr;  // "" over a Unix socket
  std::optional<int> client_port;
  std::string usename;
  std::string datname;
  std::optional<int> client_pid;  // the owner of its client socket, same host
  std::optional<std::int64_t> client_start_ticks;
};
// Every session, in session_id order.
std::vector<SessionInfo> read_sessions(Store& store);

// The ash_tick numbers of the polls with time_ns in [from_ns, to_ns), and
// their count; absent when there is none.
struct AshTickSpan {
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::int64_t polls = 0;
};
std::optional<AshTickSpan> ash_tick_span(Store& store, std::int64_t from_ns, std::int64_t to_ns);

// Non-idle polls of one session in one state: pg_activity_sample rows with
// time_ns in [from_ns, to_ns) grouped by (pid, backend_start_ns, state,
// wait_event_type).
struct SessionBusyPolls {
  int pid = 0;
  std::optional<std::int64_t> backend_start_ns;
  std::string state;            // "" when NULL
  std::string wait_event_type;  // "" when not waiting
  std::int64_t polls = 0;
};
std::vector<SessionBusyPolls> session_busy_polls(Store& store, std::int64_t from_ns,
                                                 std::int64_t to_ns);

// Idle polls per session within ash ticks [span.first, span.last] (the
// stretches of pg_session_idle clipped to it).
struct SessionIdlePolls {
  std::int64_t session_id = 0;
  std::int64_t polls = 0;
};
std::vector<SessionIdlePolls> session_idle_polls(Store& store, const AshTickSpan& span);

// A record_client row.
struct RecordClient {
  std::string source;  // "command" or "comm"
  std::optional<int> pid;
  std::optional<std::int64_t> start_ticks;
  std::string comm;
};
std::vector<RecordClient> read_record_clients(Store& store);

// CPU of one process over sample ticks with time_ns in [from_ns, to_ns):
// Σ process_tick cpu_ns and run_delay_ns (schedstat, every thread), and its
// busiest thread's Σ thread_tick cpu_ns (absent without thread rows: a
// process sampled per process only).
struct ProcessCpu {
  std::int64_t cpu_ns = 0;
  std::int64_t run_delay_ns = 0;
  // The tick it was first seen at (its row without deltas, span_ns NULL),
  // when that is in the range: its CPU is measured from it on. Absent for a
  // process seen before from_ns.
  std::optional<std::int64_t> first_sight_ns;
  std::int64_t threads_sampled = 0;  // distinct tids with thread rows
  std::optional<std::int64_t> top_thread_cpu_ns;
  std::optional<std::int64_t> top_thread_run_delay_ns;  // Σ thread_tick run_delay_ns of that thread
  std::optional<int> top_thread_tid;
  std::string top_thread_comm;
};
ProcessCpu process_cpu(Store& store, std::int64_t process_id, std::int64_t from_ns,
                       std::int64_t to_ns);

// Where one process slept over sample ticks with time_ns in [from_ns, to_ns),
// by the state and wait channel of the row that ends each span: per (state,
// wchan), Σ (span_ns − cpu_ns − run_delay_ns, at least 0) — the time off
// CPU and not runnable in the spans those rows cover — and the rows. A
// process that did not run between two rows slept where its later row says
// (the sampler writes a row when it runs, changes state, or sleeps where
// nothing wakes it, and at least every 10 s). wchan "" when none was
// read (state R). Rows at first sight (span_ns NULL) are left out. A
// process with thread rows (thread_tick) in the span is read per thread:
// each thread's off-CPU time by its own state and wait channel. A row
// with a process_poll row (a record's client in poll, select, epoll_wait or
// a blocking read; the main thread's) is keyed by what it waited on too.
enum class SleptOn {
  unknown,    // no process_poll row, or its fds unreadable: by wait channel only
  database,   // on a database socket: waited alone, or among other peers with bytes
              // queued on it (database_queued > 0: a query outstanding)
  own_timer,  // a timed wait on no socket to another process: its own timer
  other,      // neither: its own clients, another service, a pipe or terminal (and
              // an event loop's idle database connection among them)
};
struct ProcessSleep {
  std::string state;  // one letter: S, D, R, …
  std::string wchan;
  SleptOn on = SleptOn::unknown;
  std::int64_t sleep_ns = 0;
  std::int64_t rows = 0;
};
std::vector<ProcessSleep> process_sleeps(Store& store, std::int64_t process_id,
                                         std::int64_t from_ns, std::int64_t to_ns);

}  // namespace stallscope::schema
