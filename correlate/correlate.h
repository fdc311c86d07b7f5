// The correlator: reads a run file, lines up query timing with host and
// database samples, and explains where the query time went.
//
//   auto store = schema::Store::open_readonly("run.db");
//   correlate::Report r = correlate::explain(store, {.window_ns = common::kNsPerS});
//   correlate::render_text(r, std::cout);
//   std::cout << correlate::to_json(r).dump(2);
//
// Time accounting (docs/findings.md, "Time accounting"): the time queries
// were outstanding — Σ latency, under -R from the scheduled start, net of
// \sleep — split into driver CPU, server backend CPU, server waits by wait
// class (ASH), backends' D state, run-queue delay of the query path, schedule
// lag (-R) and the remainder (on an idle host: wire, protocol and wake-up
// round trips); the clients' time between queries is their idle share, not a
// part. Findings are ranked by the share of query time they explain (their
// score, 0–1), and the verdict names the one that limited the run, or none.
// Server parts count each backend only while it served this run's queries
// (Attribution; host-wide where a query's backend is unknown), in one
// streaming sweep of the queries.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/units.h"
#include "correlate/parts.h"
#include "correlate/session_view.h"
#include "schema/store.h"

namespace stallscope::schema {
class AttachedServerFile;
}

namespace stallscope::correlate {

struct ExplainOptions {
  // Time windows of this length (--window, default 1 s) ...
  std::int64_t window_ns = common::kNsPerS;
  // ... chosen by the user (--window given): a span needing more than
  // 10,000,000 windows of it is then Error(usage) "… windows is too many";
  // otherwise the windows are lengthened (1, 2 or 5 × 10^k times window_ns)
  // to give at most 100,000, and a note says so.
  bool window_chosen = false;
  // ... or, when set, windows of this many consecutive queries (--every N).
  std::optional<std::int64_t> every_queries;
  // Processes on the query path between driver and server (poolers,
  // proxies), by comm (--path-process NAME). When empty and the driver's
  // backend pids match no sampled process (it talked to a pooler), running
  // pgbouncer / pgcat / odyssey / pgpool processes are taken, and a note says so.
  std::vector<std::string> path_process_names;
  // Internal to explain_pair: per window, the driver CPU measured on the
  // client host (the windows of the client-only pass, same options). Empty
  // (but set) for an imported pgbench log, whose file holds no samples: the
  // driver (pgbench) is then looked for among the server file's processes.
  std::optional<std::vector<std::int64_t>> client_driver_cpu_ns;
  // ... and the driver's run delay on the client host, per window.
  std::optional<std::vector<std::int64_t>> client_driver_run_delay_ns;
};

// The run row plus whole-run query figures. Latency figures are absent when
// the file holds no queries (a `record` file).
struct RunSummary {
  std::string host;
  std::string kernel;
  int cores = 0;
  std::string mode;                         // "run", "record" or "import-pgbench"
  std::string status;                       // "complete", "interrupted", ...
  std::int64_t start_ns = 0;                // run.start_ns, wall clock
  std::optional<std::int64_t> end_ns;       // NULL after SIGKILL
  std::optional<std::int64_t> duration_ns;  // end_ns − start_ns
  std::optional<int> clients;               // -c
  std::optional<int> threads;               // -j
  std::optional<std::string> protocol;
  std::optional<std::string> sql;
  std::optional<std::string> server_version;
  std::optional<std::string> end_reason;
  double hz = 0;                   // sampling rate asked for
  std::optional<double> rate_tps;  // run -R: the fixed rate asked for (schema version 4 on)
  // The sampling host's /etc/machine-id and boot id (schema version 5 on;
  // nullopt for an imported log).
  std::optional<std::string> machine_id;
  std::optional<std::string> boot_id;
  std::int64_t queries = 0;  // rows in `query` (transactions sent)
  std::int64_t errors = 0;   // of those, with a row in query_error
  // Rows in query_skipped (-R -L --skip-late: too late at their turn, never
  // sent); not counted in queries, errors, throughput or latency.
  std::int64_t skipped = 0;
  // Rows in query_unfinished: transactions cut short at the run's end, still
  // unanswered (a lock held past -T, a server that stopped answering). Not
  // counted in queries, errors, throughput or latency; their time until the
  // driver gave up on them is query time, and the query span runs to it.
  std::int64_t unfinished = 0;
  std::int64_t unfinished_max_ns = 0;  // the longest one's time in flight
  // `query` rows of the driver's failed (re)connect attempts (SQLSTATE
  // 08001): not transactions, so not in queries or errors; their time is
  // query time, the accounting's connection_lost.
  std::int64_t connect_failures = 0;
  // First query sent → last query answered, or the last unfinished one given
  // up on.
  std::optional<std::int64_t> query_start_ns;
  std::optional<std::int64_t> query_end_ns;
  // A run without an end (still being written, or killed): queries sent after
  // this are left out — past it some clients' rows may not be stored yet (at
  // most the last second before the latest stored query). Else absent.
  std::optional<std::int64_t> queries_until_ns;
  // tps and the latency figures count successful queries (queries − errors),
  // as pgbench's do; absent when there is none.
  std::optional<double> tps;  // successful queries ÷ query span, 1/s
  std::optional<double> latency_mean_ms;
  std::optional<double> latency_p50_ms;  // nearest rank, within 0.2 % (one-pass histogram)
  std::optional<double> latency_p99_ms;  // nearest rank, within 0.2 % (one-pass histogram)
  std::optional<double> latency_max_ms;
  // -R: schedule lag (query.lag_ns, scheduled start → sent) of the queries
  // counted in tps; absent when no query has one.
  std::optional<double> lag_mean_ms;
  std::optional<double> lag_max_ms;
};

// One part of the query time.
struct AccountingPart {
  // Its id (correlate/parts.h): "driver_cpu", "path_cpu:<comm>",
  // "path_wait:pgbouncer", "server_cpu", "server_wait:<class>",
  // "server_d_state:<wchan>", "kernel_wait:<wchan>", "run_queue",
  // "client_run_queue" (client + server), "connection_lost", "schedule_lag"
  // (-R), "driver_stopped" (the driver's process not running: stopped.cpp),
  // "remainder"; part_id(part, key).
  std::string name;
  std::int64_t time_ns = 0;
  double share = 0;  // time_ns ÷ query_ns (0 when query_ns is 0)
  // explain_pair: the host whose samples measured it, "client" (driver CPU,
  // client_run_queue, schedule_lag) or "server" (backends, waits, D state,
  // their run queue, path processes); "" for the remainder and for a single file.
  std::string host;
  // The family of `name`; nullopt for a name this build does not know.
  std::optional<Part> kind() const { return part_of(name); }
};

// Query time split into parts, for the whole run or one window
// (docs/findings.md, "Time accounting"). The total is the time queries were
// outstanding — Σ latency, under -R from the scheduled start — clipped to the
// span; the time clients spent between queries (waiting for their schedule,
// in \sleep, or in the driver between one answer and the next send) is their
// idle time, not a part. The parts add up to query_ns: measured parts that
// together exceed it (overlapping estimates) are trimmed — the driver's CPU
// and run delay first, up to the clients' idle share of them (some of them
// fall between queries), then all in proportion — and
// excess_ns says by how much; the _ns fields below are then the trimmed ones.
struct Accounting {
  int clients = 0;                  // N
  std::int64_t wall_ns = 0;         // W
  std::int64_t client_ns = 0;       // N·W: the clients' time
  std::int64_t query_ns = 0;        // Σ time queries were outstanding: the total
  std::int64_t idle_ns = 0;         // client_ns − query_ns, ≥ 0: clients between queries
  double client_busy_share = 0;     // query_ns ÷ client_ns: the clients' utilisation
  std::int64_t driver_cpu_ns = 0;   // stallscope process CPU minus the sampler's own
  std::int64_t sampler_cpu_ns = 0;  // subtracted from the driver's CPU
  std::int64_t server_cpu_ns = 0;   // CPU of this run's backends
  std::int64_t path_cpu_ns = 0;     // CPU of path processes (poolers, proxies), by comm below
  std::vector<std::pair<std::string, std::int64_t>> path_cpu_by_comm_ns;  // largest first
  // Time clients waited in the pooler for a server connection: pgbouncer's
  // SHOW STATS total_wait_time over the span (pooler_sample, run/record
  // --pooler-admin); absent without pooler samples.
  std::optional<std::int64_t> path_wait_ns;
  std::int64_t server_wait_ns = 0;  // sum of the per-class ASH estimates below
  std::vector<std::pair<std::string, std::int64_t>> server_wait_by_class_ns;  // largest first
  std::int64_t run_delay_ns = 0;         // schedstat run delay of driver + backends
  std::int64_t driver_run_delay_ns = 0;  // of which the driver's (its ss-driver threads)
  // -R: Σ schedule lag (query.lag_ns, scheduled start → sent) in the span:
  // transactions queued in the client behind earlier, slow ones. The other
  // parts are the service time (query_ns − schedule_lag_ns) that made them slow.
  std::int64_t schedule_lag_ns = 0;
  // Whether the schedule lag is apportioned to the service time's parts in
  // the findings' scores (detail::service_ns): when the rate was not kept,
  // transactions queued behind slow ones. When it was kept, the lag is the
  // driver's wake-up at each scheduled start, a part like any other.
  bool lag_apportioned = false;
  // Σ time of failed queries that lost their connection and of the driver's
  // failed reconnect attempts (Window::connection_lost_ns): clients without
  // a server, an outage. An exact part ("connection_lost"), like the lag.
  std::int64_t connection_lost_ns = 0;
  // Backends in D state while serving the queries (per query attribution;
  // host-wide: over the whole span): D rows × sample period, by wchan.
  std::int64_t backend_d_state_ns = 0;
  // The part of it not already counted as an ASH IO wait (server_wait:IO) in
  // the same window — a backend blocked on storage shows both — counted as
  // parts "server_d_state:<wchan>", by wchan in proportion, largest first.
  std::int64_t server_d_state_ns = 0;
  std::vector<std::pair<std::string, std::int64_t>> server_d_state_by_wchan_ns;
  // Backends asleep in the kernel while serving the queries, outside any
  // wait event (ASH sees them active with none): process rows in state S on
  // a wait channel of no other family (a full pipe, a socket send buffer; not
  // the latch, a futex, storage or memory) — a row's whole span when the
  // backend did not run in it, else one sample period — by wchan, largest
  // first: parts "kernel_wait:<wchan>" (correlate/kernel_sleep.cpp).
  std::int64_t kernel_wait_ns = 0;
  std::vector<std::pair<std::string, std::int64_t>> kernel_wait_by_wchan_ns;
  // record --pg files: the client's side of the sessions' idle time, from
  // where the client processes slept (sessions.cpp): asleep by choice in a
  // timer (think time: nanosleep, hrtimer) — part "client_sleep" — and
  // blocked in the kernel on something other than the database socket (a
  // pipe or tty write, a futex, file I/O), by wchan, largest first — parts
  // "client_blocked:<wchan>". Only their sleep on a socket or in poll beyond
  // the server's own parts is the remainder (round trips); session time no
  // sample of a client explains is "unaccounted".
  std::int64_t client_sleep_ns = 0;
  std::vector<std::pair<std::string, std::int64_t>> client_blocked_by_wchan_ns;
  // record --pg files: the clients asleep waiting on fds none of which is
  // the database's (ClientProcess::on_other_ns) — their own requests,
  // another service, a pipe: part "client_idle". Idle as think time is.
  std::int64_t client_idle_ns = 0;
  // Set when no process sample's CPU delta covers the span (sampling slower
  // than the span, e.g. --hz 0.1): why the CPU and run-queue parts measured
  // from process samples — and so the remainder — cannot be accounted. They
  // are then left out of `parts` (their _ns fields stay 0 and mean nothing),
  // and the part "unaccounted" holds the query time no measured part took.
  std::optional<std::string> cannot_account;
  std::int64_t remainder_ns = 0;  // query_ns − the parts above, clamped ≥ 0
  // By how much the measured parts exceeded query_ns before they were
  // trimmed to it (overlapping estimates, driver CPU between queries), else 0.
  std::int64_t excess_ns = 0;
  // In display order: driver_cpu, path_cpu:<comm>…, path_wait:pgbouncer (with
  // path_wait_ns), server_cpu, server_wait:<class>…, server_d_state:<wchan>…,
  // kernel_wait:<wchan>…,
  // run_queue, client_run_queue (explain_pair: the driver's run delay, apart
  // from the server's), connection_lost (an outage), schedule_lag (-R), remainder (or, with
  // cannot_account, unaccounted). Their time_ns add up to query_ns.
  std::vector<AccountingPart> parts;
};

// One window: a span of time (--window) or N consecutive queries (--every).
struct Window {
  std::int64_t start_ns = 0;  // wall clock; host figures cover [start_ns, end_ns)
  std::int64_t end_ns = 0;
  double start_offset_s = 0;  // start_ns − the first window's start, s
  double duration_s = 0;  // time windows: end − start; query windows: first sent → last answered
  // Time windows: successful queries answered in the window (failed: errors),
  // and the latency figures below are theirs (as pgbench -P); query windows:
  // the N queries sent.
  std::int64_t queries = 0;
  std::int64_t errors = 0;
  // Σ time queries were outstanding in the window (each query's [start,
  // start + latency) clipped to it; query windows: Σ latency), and of it the
  // schedule lag (-R). A window with query time and no answer is a full stop.
  std::int64_t query_time_ns = 0;
  std::int64_t schedule_lag_ns = 0;
  // Of it, the time of failed queries that lost their connection and of the
  // driver's failed reconnect attempts (SQLSTATE class 08, 57P01–57P03): an
  // outage (Accounting::connection_lost_ns).
  std::int64_t connection_lost_ns = 0;
  std::optional<double> tps;  // queries ÷ duration_s
  std::optional<double> latency_min_ms;
  std::optional<double> latency_max_ms;
  std::optional<double> latency_mean_ms;
  std::optional<double> latency_stddev_ms;  // population standard deviation (÷ n)
  std::optional<double> latency_p99_ms;     // nearest rank
  // Host figures (absent when no host sample fell into the window): shares of
  // all CPUs' time, %. busy = user + nice + system + irq + softirq.
  std::optional<double> cpu_busy_pct;
  std::optional<double> cpu_idle_pct;
  std::optional<double> cpu_iowait_pct;
  std::optional<double> cpu_steal_pct;
  std::optional<int> procs_running_max;      // max /proc/stat procs_running
  std::optional<int> processes_d_state_max;  // max tasks in D state
  // Most frequent ASH state of this run's backends: "Type:Event", or "CPU"
  // for active with no wait event; absent when ASH saw none of them.
  std::optional<std::string> top_wait_event;
  std::int64_t top_wait_event_samples = 0;
  // The sampler's own CPU in this window as a share of one core, and whether
  // it exceeded kPerturbationMaxCoreShare (detail.h; docs/findings.md): its figures may
  // then be perturbed by the measurement itself.
  std::optional<double> sampler_core_share;
  bool perturbed = false;
  // Time in the window no ASH poll covered (a poll late or missing: the
  // poll's own backend may have been held up too), ns; 0 without ASH gaps.
  // Its server waits are unsampled; host state still is.
  std::int64_t ash_blind_ns = 0;
  std::optional<Accounting> accounting;  // absent without queries
};

// A named number (or label) backing a finding; units are in the name.
using EvidenceValue = std::variant<std::int64_t, double, std::string>;
using Evidence = std::vector<std::pair<std::string, EvidenceValue>>;

// What a finding says limited the run (its rule in correlate/findings.cpp or,
// pool_wait, correlate/facts_pooler.cpp). to_string gives the name the JSON,
// the text and the finding table use: the enumerator's name.
enum class FindingKind {
  client_cpu,
  server_cpu,
  single_thread,
  runqueue,
  steal,
  cpu_throttle,
  io_wait,
  lock_wait,
  lwlock_wait,
  memory_pressure,
  kernel_wait,
  connection_setup,
  network_roundtrip,
  pool_wait,
  network_stack,  // delays inside the client's or server's TCP stack (correlate/network.cpp)
  // Backends waited for a synchronous standby (ASH IPC:SyncRep), the standby
  // named from pg_stat_replication (correlate/facts_pgstats.cpp).
  replication_wait,
  // Queries lost their connection and reconnects failed: an outage (the
  // accounting's connection_lost part; correlate/findings.cpp).
  connection_lost,
  // A closed loop that nothing saturated: the clients wait for every answer,
  // throughput ≈ clients ÷ mean latency, and the host has CPU to spare
  // (correlate/closed_loop.cpp). Ranked first, above the parts of each answer.
  latency_bound,
  // Queries failed (a SQLSTATE other than a lost connection): the verdict
  // when most transactions failed (correlate/errors.cpp).
  errors,
  // The driver's own process did not run while its queries were outstanding
  // (the host sampler's missed ticks): a fault of the client, not the
  // database (correlate/stopped.cpp).
  driver_stopped,
};
std::string_view to_string(FindingKind kind);

struct Finding {
  FindingKind kind = FindingKind::client_cpu;
  double score = 0;           // share of query time it explains (detail::service_ns), 0–1
  std::int64_t start_ns = 0;  // span where the signal was seen, wall clock
  std::int64_t end_ns = 0;
  std::string summary;     // one sentence
  Evidence evidence;       // in display order
  std::string suggestion;  // what to try next
  // What to fix, named in one line: the root of a lock chain, the process at
  // one core, the wait channel, the cgroup, the setting. Empty: not named
  // (the signal is clear, what causes it is not).
  std::string culprit;
};

// What differs most in a stall from the typical windows (correlate/stalls.cpp):
// connection_lost first when queries of the window lost their connection
// (query_error SQLSTATE 08xxx or 57P01–57P03: a server restart); else the
// largest rise among io_wait (checkpoint when the checkpointer was busy),
// lock_wait, lwlock_wait, cpu_throttle, runqueue and steal, or unexplained
// when none rose enough. to_string gives the enumerator's name.
enum class StallCause {
  io_wait,
  checkpoint,
  lock_wait,
  lwlock_wait,
  cpu_throttle,
  runqueue,
  steal,
  connection_lost,
  kernel_wait,  // backends asleep in the kernel outside wait events (kernel_sleep.cpp)
  unexplained,
  replication_wait,  // backends waited for a synchronous standby (IPC:SyncRep)
};
std::string_view to_string(StallCause cause);

// A window whose throughput fell or whose latency rose well beyond the run's
// typical window: robust z = (x − median) ÷ (1.4826 · MAD) over the windows
// with queries; a stall has tps_z ≤ −kStallZ and tps ≤ (1 − kStallMinDrop) ×
// median, or latency_z ≥ kStallZ and mean latency ≥ (1 + kStallMinDrop) ×
// median (constants in detail.h, documented in docs/findings.md, "Stalls").
// Needs at least kStallMinWindows windows with queries.
struct Stall {
  std::size_t window_index = 0;  // into Report::windows
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t queries = 0;
  std::optional<double> tps;
  std::optional<double> typical_tps;  // median
  std::optional<double> latency_mean_ms;
  std::optional<double> typical_latency_mean_ms;  // median
  std::optional<double> latency_max_ms;
  std::optional<double> tps_z;      // absent when the MAD is 0
  std::optional<double> latency_z;  // absent when the MAD is 0
  StallCause cause = StallCause::unexplained;
  std::string explanation;  // one sentence
  Evidence evidence;        // this window's figures next to the typical ones
  std::string culprit;      // as Finding::culprit, for this window; empty: not named
};

// One host's CPU over the analysed span (client + server explain).
struct HostSummary {
  std::string role;  // "client" or "server"
  std::string host;
  int cores = 0;
  std::optional<double> cpu_busy_pct;  // mean over the windows with host samples
  std::optional<double> cpu_iowait_pct;
  std::optional<double> cpu_steal_pct;
};

// Client + server: how the server file's clock was mapped to the client's.
// Source: the run file's clock_offset table (the driver's bracketed
// clock_timestamp() round trips; offset = server clock − client clock).
struct ClockAlignment {
  std::int64_t estimates = 0;  // clock_offset rows in the run file (0: no shift applied)
  // Each server time t maps to t − offset of the estimate nearest in time.
  // Shown: the estimate nearest the middle of the queries, its ± bound, and
  // the range of the offsets applied.
  std::optional<std::int64_t> offset_ns;
  std::optional<std::int64_t> uncertainty_ns;
  std::optional<std::int64_t> offset_min_ns;
  std::optional<std::int64_t> offset_max_ns;
};

// Two runs of the same workload (e.g. through a pooler and direct): their
// throughput and latency side by side (explain run.db baseline.db, both
// `run` files).
struct RunComparison {
  struct Side {
    std::string path;
    std::string label;  // "through <comm>" when a pooler was on its query path, else "direct";
                        // the file name when that does not tell the runs apart
    std::int64_t queries = 0;
    std::optional<int> clients;
    std::optional<double> tps;
    std::optional<double> latency_mean_ms;
    std::optional<double> latency_p99_ms;
  };
  Side run;                              // the first file (the report's own run)
  Side baseline;                         // the second file
  std::optional<double> tps_ratio;       // run tps ÷ baseline tps
  std::optional<double> tps_change_pct;  // (ratio − 1) × 100: negative = the run is slower
  // "through pgbouncer: 6,120 tps vs 9,840 tps direct (-38%)"
  std::string summary;
};

// How the server parts of the accounting were tied to the queries.
// to_string gives the enumerator's name.
enum class AttributionMethod {
  // Each query joined to the backend that served it (client.backend_pid of
  // its connection); a backend's process-sample deltas (CPU, run delay)
  // count only when the sample's span overlaps its queries, its D-state rows
  // and ASH samples only inside them (± kAttributionSlackNs).
  per_query,
  // Every sample of the run's backends over the query span (or, without
  // backend identity, every client backend's ASH samples).
  host_wide,
};
std::string_view to_string(AttributionMethod method);

struct Attribution {
  AttributionMethod method = AttributionMethod::host_wide;
  std::int64_t queries = 0;         // sent
  std::int64_t joined_queries = 0;  // of those, with a known backend pid
  std::string reason;               // host_wide: why, one sentence
  // per_query: what was left out — backend CPU of samples whose span held
  // none of that backend's queries, and non-idle ASH samples of the run's
  // backends outside their queries.
  std::int64_t backend_cpu_outside_ns = 0;
  std::int64_t ash_samples_outside = 0;
};

// `import-pgbench` of aggregate logs (--aggregate-interval): the totals of
// the pgbench_aggregate rows, all files (one per pgbench thread) together.
// An aggregate log has no per-transaction rows, so no percentiles and no
// per-query attribution. Source: that table.
struct PgbenchAggregateSummary {
  std::int64_t intervals = 0;     // rows: intervals × files
  std::int64_t interval_ns = 0;   // --aggregate-interval, from the rows' spacing (1 s when unknown)
  std::int64_t transactions = 0;  // Σ num_transactions
  std::int64_t failures = 0;      // Σ serialization_failures + deadlock_failures
  std::int64_t skipped = 0;       // Σ skipped (-R -L)
  std::int64_t start_ns = 0;      // first interval's start
  std::int64_t end_ns = 0;        // last interval's end
  std::optional<double> tps;      // transactions ÷ (end_ns − start_ns), 1/s
  std::optional<double> latency_mean_ms;  // Σ sum_latency ÷ transactions
  std::optional<double> latency_min_ms;   // min of min_latency
  std::optional<double> latency_max_ms;   // max of max_latency
  std::optional<double> lag_mean_ms;      // -R: Σ sum_lag ÷ transactions
};

// explain_pair of an imported pgbench log (import-pgbench) with a record
// file: pgbench as found among the record file's processes — the driver of
// the imported transactions: its CPU is the driver_cpu part, its run delay
// client_run_queue — and its backends, found by application_name in the
// record file's ASH (and start time): their CPU, waits and run delay are the server parts
// (host-wide, as the log does not say which backend served which
// transaction). Source: the record file's process, process_sample and
// pg_activity_sample rows during the queries.
struct PgbenchDriver {
  // The pgbench process taken as the driver (pid, and start time on the
  // record file's clock); absent when none was sampled during the queries.
  std::optional<int> pid;
  std::optional<std::int64_t> start_ns;
  // How it was chosen: "log file name" (its pid is in a log file's name,
  // pgbench_log.PID[.N]), "only one" or "most CPU" (of several).
  std::string found_by;
  int processes = 0;  // processes named pgbench sampled during the queries
  // Its measured CPU (every thread) and run delay over the analysed span,
  // spread over the windows as every process row is — before the accounting
  // trims its driver_cpu and client_run_queue parts to the query time.
  std::optional<std::int64_t> cpu_ns;
  std::optional<std::int64_t> run_delay_ns;
  std::string application_name = "pgbench";  // pgbench's default, what its backends are found by
  // Its backends, by pid: those ASH saw with that application_name during
  // the queries, and — as ASH samples only non-idle sessions — the client
  // backends of the same server, user and database (or of that server and
  // still untitled when first sampled; without any ASH sighting, any client
  // backend) that started as pgbench connected (from
  // its start to kBackendStartSlackNs after), when they and the ASH-seen
  // ones are no more than the log's clients.
  std::vector<int> backend_pids;
  std::int64_t backends_by_application_name = 0;
  std::int64_t backends_by_start = 0;
  std::int64_t backend_processes = 0;  // of backend_pids, found among the sampled processes
  std::string note;  // how pgbench and its backends were found, or why not (also in notes)
};

// explain's answer in one line (correlate/verdict.cpp; docs/findings.md,
// "Verdict"): the kind that limited the run, or none and why.
struct Verdict {
  // The finding that limited the run (the first of `findings` that is a
  // bottleneck, see docs/findings.md); absent for "no bottleneck".
  std::optional<FindingKind> kind;
  // Without a kind, why: "paced" (the clients kept their rate or their
  // think time and nothing was saturated or waiting), "no_queries" (nothing
  // to account: e.g. a record file with no finding), or "below_thresholds"
  // (no finding reached kMinScore), or "cannot_account" (nothing measured
  // splits the query time: Accounting::cannot_account says why), or
  // "unaccounted" (the accounting's unaccounted part — time no sample
  // explains, e.g. a record file's clients not sampled on its host — is
  // larger than the first finding's score: no verdict from a small part).
  std::string reason;
  std::string summary;  // one or two sentences
};

// A file with neither queries nor client sessions (`record` without --pg):
// the host's CPU time over the analysed span — cores × span as host_sample's
// CPU deltas count it — split into parts that add up to it
// (correlate/host_accounting.cpp). Source: host_sample, process_sample.
struct HostAccounting {
  int cores = 0;
  std::int64_t wall_ns = 0;  // the analysed span
  std::int64_t cpu_ns = 0;   // all CPUs' time in the span: busy + iowait + steal + idle
  // "process_cpu:<comm> (pid N)" for the (at most 3) busiest processes off
  // stallscope, "other_cpu" (every other process, the kernel, interrupts),
  // "iowait", "steal", "idle"; share = time_ns ÷ cpu_ns; host is "".
  std::vector<AccountingPart> parts;
};

// The blocking chains of the whole analysed span (correlate/lock_chains.cpp):
// every Lock waiter of the counted backends (this run's; a file without
// queries: every client backend) walked through pg_blocking_pids to its
// roots, poll by poll. Source: pg_activity_sample (blocking_pids) and
// pg_lock_wait. Absent when ASH sampled no Lock waiter.
struct LockChains {
  // A session on a chain as the poll that showed the chain saw it.
  struct Session {
    int pid = 0;           // 0: a prepared transaction
    bool sampled = false;  // the poll had a row for it (else the texts are empty)
    std::string state;     // active, idle, idle in transaction, ...
    std::string backend_type;
    std::string application_name;
    std::string query;                        // current, or the last one when idle
    std::optional<std::int64_t> xact_age_ns;  // poll time − xact_start
  };
  // A waiter on the chain and the lock it asked for.
  struct Link {
    Session waiter;
    std::string locktype;  // pg_locks.locktype, else the Lock wait event
    std::string mode;      // "" without a pg_lock_wait row
    std::string target;    // "relation acct", "advisory lock (0, 21)", …
  };
  std::int64_t polls = 0;           // polls with a counted waiter
  std::int64_t waiter_samples = 0;  // counted waiters × polls
  std::int64_t cycle_samples = 0;   // of those, on a chain with no root (a deadlock cycle)
  int max_waiters = 0;              // most counted waiters in one poll
  std::int64_t distinct_roots = 0;
  // The root blocking the most waiter samples; absent when no chain had one.
  std::optional<Session> root;
  std::int64_t root_waiter_samples = 0;
  std::int64_t root_polls = 0;
  // Waiter → … → root: the longest chain to that root in one poll.
  std::vector<Link> chain;
  // The roots change from poll to poll (no root blocks half the waiter
  // samples): the lock itself is the culprit.
  bool turnstile = false;
  std::string hot_lock;  // turnstile: the lock most waited for
  std::string culprit;   // one line, as Finding::culprit
};

struct Report {
  RunSummary run;
  std::optional<PgbenchAggregateSummary> pgbench_aggregate;  // files with aggregate rows
  std::optional<Attribution> attribution;                    // absent without queries
  std::optional<RunComparison> comparison;                   // explain with two run files
  std::optional<ClockAlignment> clock;                       // explain_pair only
  // explain_pair only: client host, then server host. An imported pgbench
  // log: the client host only when pgbench was found in the record file
  // (then the record file's host and figures).
  std::vector<HostSummary> hosts;
  std::optional<PgbenchDriver> pgbench;       // explain_pair of an imported pgbench log
  bool query_windows = false;                 // windows of N queries (--every) rather than time
  std::optional<std::int64_t> window_ns;      // time windows: their length
  std::optional<std::int64_t> every_queries;  // query windows: N
  std::optional<std::int64_t> ash_period_ns;  // ASH poll period used for estimates
  std::optional<Accounting> accounting;       // whole run; absent without queries
  // Without queries and client sessions (record without --pg): the host's
  // CPU time instead; absent otherwise, and without host samples.
  std::optional<HostAccounting> host_accounting;
  // record --pg files (no queries) with client sessions: the session view.
  // `accounting` is then filled from it (correlate/sessions.cpp): clients =
  // sessions, client_ns = session time, driver_cpu_ns = the client
  // processes' CPU.
  std::optional<SessionView> sessions;
  std::vector<Window> windows;
  std::vector<Finding> findings;  // highest score first
  Verdict verdict;
  std::vector<Stall> stalls;  // in time order
  std::optional<LockChains> lock_chains;
  std::vector<std::string> notes;  // sampling limits and caveats
};

// Reads the run file and builds the report. Only reads. Throws Error(usage)
// for a file that holds no run or bad options, Error(sqlite) for read failures.
Report explain(schema::Store& store, const ExplainOptions& options);
// Client + server: `client` is a run file (queries, the driver's host), and
// `server_path` a file recorded on the database host (`record`) at the same
// time. Host, process and ASH figures come from the server file (attached
// read-only, its tables shadowed by temporary views for the analysis, whose
// wall-clock columns are shifted to the client's clock by the run file's
// clock_offset estimate nearest in time: client_ns = server_ns − offset_ns);
// the driver's CPU from the client file. Without estimates no shift is
// applied and a note says so. Throws Error(usage) with one line when the
// files' time ranges (after the shift) do not overlap. An imported pgbench
// log as `client` holds no samples: pgbench and its backends are found in
// the server file instead (Report::pgbench), pgbench's CPU and run delay
// being the driver's; the client host is listed only when pgbench was found.
Report explain_pair(schema::Store& client, const std::string& server_path,
                    const ExplainOptions& options);
// The server's record file seen through the client run file's connection,
// on the client's clock, as explain_pair's second pass sees it: while a
// ServerFileView lives, every reader of `client` reads the server file's
// host, process and ASH tables (their times shifted by the run file's
// clock-offset estimates) instead of the client file's. For readers other
// than explain: the HTML report's server timelines (report/). Throws
// Error(usage) with one line when the file cannot be attached or holds no
// stallscope samples.
class ServerFileView {
 public:
  ServerFileView(schema::Store& client, const std::string& server_path);
  ~ServerFileView();
  ServerFileView(const ServerFileView&) = delete;
  ServerFileView& operator=(const ServerFileView&) = delete;
  const std::string& host() const { return host_; }
  const std::string& kernel() const { return kernel_; }
  int cores() const { return cores_; }

 private:
  std::unique_ptr<schema::AttachedServerFile> attached_;
  std::string host_;
  std::string kernel_;
  int cores_ = 0;
};
// Compares `run` (explained from run_path) with `baseline`: both runs'
// throughput and latency, their tps ratio and a one-line summary.
RunComparison compare_runs(const Report& run, const std::string& run_path, const Report& baseline,
                           const std::string& baseline_path);
// Notes on the baseline of a comparison, added to `report` (the run's): the
// baseline is the run's own file (the same inode: a run compared with
// itself), or it did not end (killed or crashed: its figures cover what it
// committed), or it ended early (interrupted, failed), with its end reason.
void add_baseline_notes(Report& report, const std::string& run_path, const Report& baseline,
                        const std::string& baseline_path);
// Writes the findings and stalls into the run file's `finding` and `stall`
// tables (creating them in files made before they existed), replacing any rows
// of an earlier explain, in one transaction. Throws Error(sqlite) on failure.
void save_report(schema::Store& store, const Report& report);
// The integrity check explain makes of each file it reads: SQLite's PRAGMA
// quick_check (schema::quick_check) on a connection and a thread of its own,
// started at construction so that it overlaps explain's passes. On a
// 10 M-query file (635 MB) it reads every page once: ≈ 2.5 s of CPU.
//
//   correlate::FileCheck check("run.db");
//   auto report = correlate::explain(store, options);
//   check.wait();  // throws if the file is damaged
//
// Move-only; the destructor waits for the thread (the check cannot be
// interrupted) and never throws.
class FileCheck {
 public:
  explicit FileCheck(std::string path);
  FileCheck(FileCheck&&) noexcept;
  FileCheck& operator=(FileCheck&&) = delete;
  ~FileCheck();
  // Waits for the check. Throws Error(usage) "cannot read PATH: the file is
  // damaged (SQLite's first finding)" when the check found damage, or the
  // Error that kept it from reading the file; returns once it found none.
  void wait();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Human-readable text: run header, window table, time accounting, findings.
// Untrusted text (process names, SQL, wait events, application names) is
// written as common::printable() makes it: control characters and bytes
// that are not valid UTF-8 as \xNN.
void render_text(const Report& report, std::ostream& out);
// {"run":…, "accounting":…, "windows":[…], "findings":[…], "notes":[…]};
// findings ordered by score, highest first; accounting is null without queries.
nlohmann::json to_json(const Report& report);

}  // namespace stallscope::correlate
