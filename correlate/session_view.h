// The session view of a `record --pg` file (a file without queries): the
// client sessions ASH saw, grouped, their parts, and the client processes
// whose side of the sessions' idle time the accounting splits
// (correlate/sessions.cpp builds it; Report::sessions holds it; render and
// to_json show it). Part of correlate.h's Report.
//
//   for (const auto& c : report.sessions->client_processes) use(c.comm, c.cores);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stallscope::correlate {

// `record --pg` (a file without queries): a process found as a client of
// the database (correlate/sessions.cpp). Its CPU over the analysed span is
// the client side of its sessions' idle time.
struct ClientProcess {
  std::int64_t process_id = 0;  // process.process_id
  int pid = 0;
  std::string comm;
  // How it was found: "command" (the command record started), "descendant"
  // (of that command, through process.ppid), "socket" (owner of a session's
  // client socket on this host: pg_session.client_pid), "name"
  // (record --client-process NAME).
  std::string found_by;
  std::int64_t cpu_ns = 0;        // Σ process_tick cpu_ns in the span (schedstat, all threads)
  std::int64_t run_delay_ns = 0;  // Σ run_delay_ns, same span
  double cores = 0;  // cpu_ns ÷ the span from its first sight on (the whole span if seen before)
  // Its busiest thread's cores (thread_tick); absent when the sampler kept no
  // thread rows for it (a single-threaded process: then its thread is the
  // process).
  std::optional<double> top_thread_cores;
  std::string top_thread_comm;
  std::int64_t threads_sampled = 0;
  // The span its cores are over: the analysed span from its first sight on
  // (the whole span when it was seen before it began), ns.
  std::int64_t sampled_ns = 0;
  // top_thread_cores, or cores without thread rows.
  double hottest_thread_cores = 0;
  // What that thread wanted: its CPU plus its run-queue delay (runnable, not
  // running), ÷ span — ≈ 1 for a thread that was never idle, however busy
  // the host (evidence only: single_thread takes its CPU).
  double hottest_thread_demand_cores = 0;
  std::int64_t sessions = 0;       // client sessions it served (socket owner, or all)
  double sessions_idle_share = 0;  // their idle + idle in transaction ÷ their session time
  // Where it slept in the span, off CPU and not runnable (schema::
  // process_sleeps), by the wait channel of the row ending each span,
  // largest first; "" for spans that ended with it running (it slept earlier
  // in them, where is not known).
  std::vector<std::pair<std::string, std::int64_t>> sleep_by_wchan_ns;
  // Of that sleep, the time in poll, select or epoll_wait with a timeout
  // and no socket to another process among the fds (process_poll): asleep
  // until its own timer — think time inside an event loop. Not in
  // sleep_by_wchan_ns.
  std::int64_t own_timer_ns = 0;
  // Of that sleep, waits on fds with a database socket among them
  // (process_poll database_sockets > 0): waiting for the database, a round
  // trip. Not in sleep_by_wchan_ns.
  std::int64_t on_database_ns = 0;
  // Of that sleep, waits on fds with no database socket and not on its own
  // timer (its own clients, another service, a pipe or terminal): the
  // client waiting for something else. Kept apart only for a process seen
  // waiting on a database socket in the span (which of its sockets is the
  // database's is known); else those spans stay in sleep_by_wchan_ns. Not in
  // sleep_by_wchan_ns.
  std::int64_t on_other_ns = 0;
};

// One part of the session time (ASH, one state per session per poll).
struct SessionPart {
  // "on_cpu" (active, no wait event), "wait:<class>" (active, waiting; the
  // Client class is idle below), "idle" (waiting for the client: the client's
  // own work plus the network), "idle_in_transaction" (the same inside a
  // transaction), "other" (fastpath, disabled, unknown).
  std::string name;
  std::int64_t time_ns = 0;  // polls × ASH period
  double share = 0;          // of the group's (or view's) session time
};

// The client sessions of one (application_name, client address, user,
// database): their session time split into parts that add up to it.
struct SessionGroup {
  std::string application_name;
  std::string client_addr;  // "local" over a Unix socket
  std::string user;
  std::string database;
  std::int64_t sessions = 0;
  std::int64_t session_ns = 0;  // Σ polls each session was seen × ASH period
  std::vector<SessionPart> parts;
  double idle_share = 0;         // (idle + idle in transaction) ÷ session_ns
  std::vector<int> client_pids;  // ClientProcess pids serving it
};

// record --pg: the database's client sessions over the analysed span, from
// ASH (pg_activity_sample, pg_session, pg_session_idle).
struct SessionView {
  std::int64_t ash_period_ns = 0;
  std::int64_t polls = 0;                       // ASH polls in the span
  std::int64_t sessions = 0;                    // client sessions seen
  std::int64_t session_ns = 0;                  // Σ over groups
  std::vector<SessionPart> parts;               // all groups together
  std::vector<SessionGroup> groups;             // largest session time first
  std::vector<ClientProcess> client_processes;  // largest CPU first
  // The server's other load: sessions whose client socket belongs to a
  // process on this host that is neither the recorded application (the
  // command after --, its descendants, --client-process) nor a pooler —
  // another benchmark, another application. Only when the application was
  // named; their time is not in the groups, the parts or the accounting, and
  // their backends count as other processes. Their parts are not split.
  std::vector<SessionGroup> other_groups;  // largest session time first
  std::int64_t other_sessions = 0;
  std::int64_t other_session_ns = 0;
  // Server connections of a pooler (sessions whose socket a pooler holds)
  // idle at every poll of the span, whose backend (sampled on this host)
  // used under 1 ms of CPU in it: the pool's spare connections (or ones
  // left from an earlier run), which served none of the recorded queries. Left out of the groups,
  // the parts and the accounting; a note says how many.
  std::int64_t idle_pooled_sessions = 0;
  std::string idle_pooler;  // the pooler's comm
};

}  // namespace stallscope::correlate
