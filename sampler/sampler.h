// Host sampler and ASH sampler. Each runs on its own thread and hands rows to
// a sink (in stallscope, schema::Writer::submit); neither touches SQLite.
//
//   sampler::HostSampler host({.hz = 10}, [&](schema::Batch b) { writer.submit(std::move(b)); });
//   host.start();
//   ...
//   host.stop();                 // joins; the last tick is delivered first
//
// The host-wide figures come from libproc2 (/proc/stat, loadavg, meminfo,
// vmstat, diskstats). Every per-process file is read by hand
// (sampler/procfs.h): the process listing (each process's /proc/PID/stat and
// schedstat — on-CPU ns, run-queue delay ns — from files kept open between
// ticks), /proc/PID/status (context switches), /proc/PID/{wchan,io,cgroup,
// cmdline,stack}, and for processes sampled per thread /proc/PID/task/*; so
// are /proc/pressure/*, cgroup cpu.stat and the TCP counters of
// /proc/net/netstat and /proc/net/snmp (tcp_stack_sample).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/units.h"
#include "schema/records.h"

namespace stallscope::sampler {

// The client processes of a `record` beside an application, shared by its
// samplers (thread-safe): the command record started (and, as the host
// sampler sees them, its descendants), the --client-process names, and the
// owners of the sessions' client sockets as the ASH sampler finds them; and
// the database ports (the server's port, a pooler's listening ports) that
// tell a database socket among the sockets they wait on. The host sampler
// reads what these processes wait on when they sleep in poll, select,
// epoll_wait or a blocking read (schema::PollWaitRow), and only for them: it
// costs a few /proc reads a process.
//
//   auto watch = std::make_shared<sampler::ClientWatch>();
//   watch->add_pid(child_pid);   // record's command
//   // HostSamplerOptions::client_watch and AshSamplerOptions::client_watch = watch
class ClientWatch {
 public:
  // What the host sampler works from: a copy, taken again only when
  // something was added (one atomic load a tick otherwise).
  struct Snapshot {
    std::uint64_t version = 0;
    std::unordered_set<int> pids;            // the processes (not their children)
    std::vector<std::string> comms;          // --client-process names
    std::unordered_set<int> database_ports;  // remote TCP ports that are the database's
    bool watches(int pid, std::string_view comm) const {
      return pids.contains(pid) || std::find(comms.begin(), comms.end(), comm) != comms.end();
    }
  };
  void add_pid(int pid);
  void add_comm(std::string comm);
  void add_database_port(int port);
  // Brings `copy` up to date when it is older than this watch.
  void refresh(Snapshot& copy) const;

 private:
  mutable std::mutex mutex_;
  std::atomic<std::uint64_t> version_{0};
  std::unordered_set<int> pids_;
  std::vector<std::string> comms_;
  std::unordered_set<int> database_ports_;
};

// Receives the rows of one tick (or a few); called on the sampler's thread.
// It must not throw: a throwing sink ends that sampler's thread.
using Sink = std::function<void(schema::Batch)>;

struct HostSamplerOptions {
  double hz = 10;  // ticks per second; must be > 0
  // Seam for tests: where the hand-read files (the process listing, the last
  // pid of loadavg, PID/{stat,schedstat,status,wchan,io,cgroup,cmdline,stack},
  // PID/task/*, pressure/*, sys/kernel/task_delayacct, net/netstat,
  // net/snmp) are found. libproc2
  // (/proc/stat, loadavg's averages, meminfo, vmstat, diskstats) reads the
  // real /proc.
  std::string proc_root = "/proc";
  // A process with no activity still gets a row at least this often, ns.
  std::int64_t heartbeat_ns = 10 * common::kNsPerS;
  // --threads: thread_sample rows for every multi-threaded process. Without
  // it, only for those whose CPU over the last second reached half a core.
  bool all_threads = false;
  // --stacks: kernel_stack of D-state tasks (/proc/PID/stack; root only —
  // otherwise the column stays NULL and the run row says "unavailable").
  bool kernel_stacks = false;
  // Seam for tests: where cgroup cpu.stat files are found.
  std::string cgroup_root = "/sys/fs/cgroup";
  // thread_sample rows for this process's own threads: true (`run`) samples
  // them every tick whatever their CPU, so explain can tell the driver's
  // threads from the writer and samplers; false (`record`) never, even with
  // all_threads — its cost is in sample.sampler_cpu_ns and its
  // process_sample rows, and its sampler thread would add a row every tick.
  bool own_threads = true;
  // `record` beside an application: what its client processes (and their
  // descendants) wait on in poll, select or epoll_wait (process_poll rows).
  std::shared_ptr<const ClientWatch> client_watch;
};

// The latest tick's system figures, for progress lines.
struct HostSnapshot {
  // Wall clock of the latest tick, ns since the epoch; 0 until the second
  // tick (the percentages are deltas, so the first tick has none).
  std::int64_t time_ns = 0;
  double idle_pct = 0;  // share of all CPUs' time, %
  double iowait_pct = 0;
  double steal_pct = 0;
  int processes_d_state = 0;  // tasks in D state this tick
  std::int64_t ticks = 0;     // ticks taken so far
};

class HostSampler {
 public:
  HostSampler(HostSamplerOptions options, Sink sink);
  ~HostSampler();  // stop()s
  HostSampler(const HostSampler&) = delete;
  HostSampler& operator=(const HostSampler&) = delete;

  // Starts the sampling thread; the first tick is taken at once. Throws
  // Error(usage) when hz is not > 0, Error(proc) (code: errno) when libproc2
  // cannot be initialised. No-op when already running.
  void start();
  // Stops and joins; idempotent.
  void stop();
  // Thread-safe copy of the latest figures.
  HostSnapshot latest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Besides one pg_activity_sample row per non-idle backend per poll, the ASH
// sampler hands the writer a pg_session row for each session at first sight
// (its identity, and for a TCP client on this host the process owning the
// client's socket, looked up once) and the polls in which each session was
// 'idle' as run-length encoded stretches (pg_session_idle; a stretch ends
// when the session leaves 'idle', disappears or a poll fails, and after
// AshSamplerOptions::idle_stretch_max_ns, default kIdleStretchMaxNs). stop()
// hands over the stretches still open. A session named in a Lock waiter's
// pg_blocking_pids gets a pg_activity_sample row in that poll even when it is
// 'idle' (and that poll is not in its idle stretch); a poll that saw Lock
// waiters also sends a second query for their ungranted pg_locks rows
// (pg_lock_wait).
inline constexpr std::int64_t kIdleStretchMaxNs = 60 * common::kNsPerS;
// New sessions whose socket owner is looked up per poll, at most (each
// lookup reads /proc/net/tcp{,6} and every process's fd directory, a few ms
// on a host of a few hundred processes); later ones get none, so a client
// connecting per transaction costs at most this many lookups a poll.
inline constexpr int kSocketLookupsPerPoll = 8;

struct AshSamplerOptions {
  std::string conninfo;                             // where pg_stat_activity is read
  double hz = 10;                                   // polls per second
  std::string application_name = "stallscope/ash";  // also used to exclude itself
  // An idle stretch (pg_session_idle) is closed after this long.
  std::int64_t idle_stretch_max_ns = kIdleStretchMaxNs;
  // Look up the process owning each new TCP session's client socket on this
  // host (pg_session.client_pid): `record` does; `run` knows its own
  // backends and does not pay for it.
  bool find_client_sockets = false;
  // With find_client_sockets: each owner found is added here.
  std::shared_ptr<ClientWatch> client_watch;
  // Seam for tests: where a new session's client socket owner is looked up
  // (tcp_socket_owner).
  std::string proc_root = "/proc";
  // start()'s connect gives up at this CLOCK_MONOTONIC time (record: the end
  // of -T), as at SIGINT/SIGTERM, with Error(runtime) "…: interrupted".
  std::optional<std::int64_t> connect_deadline_mono_ns;
};

// After losing its connection (a server restart), a sampler reconnects at
// its next poll, then after 0.1, 0.2, 0.4, 0.8 s and every 1 s while it
// keeps failing; a connect in progress ends at stop(). Failed polls store
// nothing: explain sees the gap in ash_tick as blind time, not as no waits.
inline constexpr std::int64_t kSamplerReconnectMaxDelayNs = 1'000'000'000;
// stop() lets a poll in progress finish for this long; a poll still blocked
// then (a server or pooler that stopped answering) has its connection's
// socket shut down, so stop() — and SIGINT's end of a run — never waits on
// a hung server.
inline constexpr std::int64_t kSamplerStopGraceNs = 2'000'000'000;

// A process, identified by pid and start time (clock ticks since boot).
struct SocketOwner {
  int pid = 0;
  std::int64_t start_ticks = 0;
  std::string comm;  // proc_root/PID/comm ("" when unreadable)
};
// The process owning the TCP socket whose local port is `local_port` and
// remote port `remote_port` (proc_root/net/tcp and tcp6, then each
// proc_root/PID/fd/*; stallscope itself is skipped); nullopt when there is
// none on this host, or its fd directory cannot be read (another user's
// process, unless root). Several owners (a socket shared after fork): the
// first in the listing's order.
std::optional<SocketOwner> tcp_socket_owner(int local_port, int remote_port,
                                            const std::string& proc_root = "/proc");
// The process owning the peer of a Unix-socket session's backend socket:
// the backend's sockets (proc_root/PID/fd), their peers from one sock_diag
// dump (UNIX_DIAG_PEER; this host's network namespace, whatever proc_root
// says), then each proc_root/PID/fd/* (the backend and stallscope skipped);
// nullopt when none is found (a pooler's socket is found like any other).
std::optional<SocketOwner> unix_socket_owner(int backend_pid,
                                             const std::string& proc_root = "/proc");
// proc_root/PID/stat field 22 (start time, clock ticks since boot); nullopt
// when the process is gone.
std::optional<std::int64_t> process_start_ticks(int pid, const std::string& proc_root = "/proc");
// The processes descended from `pid` (children by ppid, theirs, …; started
// no earlier than their parent), from one scan of proc_root/*/stat; comm
// left empty. Those already reparented (their parent exited) are not found.
std::vector<SocketOwner> descendant_processes(int pid, const std::string& proc_root = "/proc");
// Whether the process `pid` started at `start_ticks` is still there and not
// a zombie (exited, not yet reaped: its parent may be a slow init).
bool process_alive(int pid, std::int64_t start_ticks, const std::string& proc_root = "/proc");

// The latest poll's figures, for progress lines.
struct AshSnapshot {
  std::int64_t polls = 0;
  // Most frequent "wait_event_type:wait_event" among non-idle client backends
  // over the last second of polls; "CPU" when most were active with no wait
  // event; empty when nothing non-idle was seen.
  std::string top_wait_event;
  // Polls that failed (server restart, connection lost, query error) so far;
  // the sampler reconnects with backoff and goes on. Failed polls get no
  // ash_tick row.
  std::int64_t poll_errors = 0;
  // Of them, the polls of pg_stat_activity that failed (connected, and the
  // query failed or the connection broke), not reconnect attempts.
  std::int64_t failed_polls = 0;
  // Message of the last failed poll ("cannot poll pg_stat_activity: …").
  std::string last_poll_error;
  // Message of the last failure ("cannot ...: <libpq message>", conninfo
  // masked); empty if none.
  std::string last_error;
};

class AshSampler {
 public:
  AshSampler(AshSamplerOptions options, Sink sink);
  ~AshSampler();  // stop()s
  AshSampler(const AshSampler&) = delete;
  AshSampler& operator=(const AshSampler&) = delete;

  // Connects (throws Error(postgres) with the masked conninfo on failure;
  // Error(runtime) "…: interrupted" at SIGINT/SIGTERM or the options'
  // connect_deadline_mono_ns) and starts polling on its own thread.
  void start();
  void stop();
  AshSnapshot latest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stallscope::sampler
