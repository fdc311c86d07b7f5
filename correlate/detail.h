// Internals of the correlator shared by its files: the thresholds, the facts
// the finding rules read (Facts), and the functions of facts_path.cpp,
// facts_pooler.cpp, findings.cpp, stalls.cpp and render.cpp that other files
// call. The passes' own types are in passes.h. Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/poolers.h"
#include "common/units.h"
#include "common/wchan.h"
#include "correlate/correlate.h"
#include "correlate/network.h"
#include "correlate/pg_stats_facts.h"
#include "correlate/row_source.h"
#include "schema/fact_readers.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {

// ---- Thresholds (docs/findings.md, "Findings", lists them) ----

// The host sampler missed its ticks (the process stopped or starved) when
// one interval between ticks is at least this many sample periods ...
inline constexpr std::int64_t kSamplerGapMinPeriods = 5;
// ... and at least this long.
inline constexpr std::int64_t kSamplerGapMinNs = common::kNsPerS / 2;
// A finding is reported only when it explains at least this share of client
// time (or, without queries, of the host-side quantity its rule measures).
inline constexpr double kMinScore = 0.05;
// A fixed rate (-R) is not kept when the mean schedule lag is at least this
// share of a client's mean gap between scheduled transactions (clients ÷
// tps): transactions then queue behind each other. A lag well under the gap
// (timer wake-ups, a slow transaction now and then) keeps the rate.
inline constexpr double kRateNotKeptMinLagShare = 0.5;
// Clients idle between queries (think time, \sleep) for at least this share
// of their time are paced by their script (verdict.cpp).
inline constexpr double kPacedMinIdleShare = 0.5;
// The wait event of SELECT pg_sleep(…): the workload sleeping by choice in
// its own queries — pacing, as \sleep and think time are, not a wait.
inline constexpr std::string_view kPgSleepEvent = "Timeout:PgSleep";
// steal is a finding only when the hypervisor took at least this share of
// all CPU time (top's "st" column at 2.0): below it, the share of the CPU
// time a mostly idle guest wanted swings with a few stolen ticks (0.5 % of
// all CPU time is 5–8 % of what a 10 %-busy guest wanted).
inline constexpr double kStealMinAllCpuShare = 0.02;
// single_thread: a process counts as saturating one core in a window when it
// used at least this many cores there ...
inline constexpr double kSingleThreadMinCores = 0.9;
// ... and at most this many: a process well above one core is
// multi-threaded, and its demand shows up as runqueue instead.
inline constexpr double kSingleThreadMaxCores = 1.2;
// ... and only while the rest of the host was mostly idle: at least this
// share of the CPU time not used by that process was idle.
inline constexpr double kSingleThreadMinOtherwiseIdleShare = 0.5;
// network_roundtrip: the remainder is called a round trip only while the host
// CPU is not saturated (busy share below this); on a saturated host it is
// more likely unmeasured CPU contention.
inline constexpr double kRoundtripMaxHostBusyShare = 0.8;
// latency_bound: a closed loop counts as queueing for no CPU while the
// query path's run-queue delay is below this share of query time: on a host
// with idle CPUs it is wake-up latency (a few µs a wake-up, 5–15 % of a
// 0.1 ms query measured on 2 cores), not contention.
inline constexpr double kLatencyBoundMaxRunQueueShare = 0.25;
// ... and a round trip (network_roundtrip's share) ranked first is a part of
// each answer below this share; from it on, the round trip is the verdict.
inline constexpr double kLatencyBoundMaxRoundtripShare = 0.5;
// Backends are matched to `process` rows by pid and a start time no later
// than the client's connect time plus this slack (start_ns derives from boot
// time, which /proc/stat gives to the second).
inline constexpr std::int64_t kBackendStartSlackNs = 2 * common::kNsPerS;
// Run delay charging: with clients ≤ cores, the query path's run delay is all
// charged to processes off the path when they used at least this many cores.
inline constexpr double kRunqueueMinOtherCores = 0.25;
// runqueue in a record file: only when runnable tasks waited for a CPU for
// at least this many cores on average (run delay ÷ wall time): a share of
// almost no CPU on an idle host is no bottleneck.
inline constexpr double kRunqueueMinQueuedCores = 0.05;
// server_cpu says "the server's CPUs are the limit" only when the query path
// used at least this share of the CPU used on a saturated host.
inline constexpr double kServerCpuMinPathWeight = 0.75;
// cpu_throttle without cgroup cpu.stat rows: query-path run delay counts as
// throttling only in windows where the host CPU was busy less than this share
// (runnable while CPUs idle: a quota or a cpuset, not contention).
inline constexpr double kThrottleMaxHostBusyShare = 0.6;
// Stalls (see Stall in correlate.h): robust z beyond this ...
inline constexpr double kStallZ = 3.0;
// ... and at least this relative change against the median ...
inline constexpr double kStallMinDrop = 0.25;
// ... among at least this many windows with queries.
inline constexpr std::size_t kStallMinWindows = 5;
// Perturbation: a window is flagged when the sampler used more than this
// share of one core in it.
inline constexpr double kPerturbationMaxCoreShare = 0.05;
// A backend that lived less than this is short-lived (evidence of
// connection_setup).
inline constexpr std::int64_t kShortLivedBackendNs = common::kNsPerS;
// Upper bound on the number of windows a report may hold (--window or
// --every): a window with its accounting and its passes' buckets takes about
// 2 KB while explain runs (measured 1.9 KB: --window 1ms over an hour took
// 6.7 GB when the bound was 10^7), so the windows stay below ~0.4 GB.
inline constexpr std::int64_t kMaxWindows = 200'000;
// About how many bytes a window takes while explain runs, for messages.
inline constexpr std::int64_t kWindowBytes = 2'000;
// How many windows at most a default window lengthened for a long span
// gives (ExplainOptions::window_chosen false); a table of 10^5 lines is
// already read by nobody.
inline constexpr std::int64_t kWidenedWindows = 100'000;
// The note of an explain whose default window (`default_ns`) was lengthened
// to `window_ns` for a span of about `span_ns`.
std::string widened_window_note(std::int64_t default_ns, std::int64_t window_ns, double span_ns);

// The unit constant of common/units.h the correlator's files use unqualified.
using common::kNsPerS;

// A span of wall-clock time [start_ns, end_ns).
struct Span {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t duration_ns() const { return end_ns - start_ns; }
};

// Kernel wait channel families: common/wchan.h's one table.
using common::wchan_family;
using common::WchanFamily;
// Whether a sleep of a process on the query path (a backend, the driver, a
// pooler) in `family` holds the queries up in the kernel: `other`, and
// `input` too — there a wait for input other than the peer's socket (a
// backend reading COPY FROM PROGRAM's pipe) holds the query.
inline bool held_on_query_path(WchanFamily family) {
  return family == WchanFamily::other || family == WchanFamily::input;
}

// The connection poolers by process name (common/poolers.h).
using common::is_pooler_comm;
using common::kPoolerComms;

// Wait classes (pg_stat_activity.wait_event_type) that are not server waits
// on the query path: the backend waiting for the client, or a background
// process's main loop.
bool is_server_wait_class(std::string_view wait_event_type);

// The larger of `into` and `v`, where either may be absent (a gauge's
// maximum over polls that did not all read it).
template <typename T>
void keep_max(std::optional<T>& into, const std::optional<T>& v) {
  if (v && (!into || *v > *into)) into = v;
}

// Everything explain gathered, before findings are ranked.
struct HostTotals {
  std::int64_t busy_ns = 0;  // user + nice + system + irq + softirq
  std::int64_t idle_ns = 0;
  std::int64_t iowait_ns = 0;
  std::int64_t steal_ns = 0;
  std::int64_t total_ns = 0;  // all eight modes
  std::int64_t cpu_rows = 0;  // host rows with CPU deltas
  int procs_running_max = 0;
  int processes_d_state_max = 0;
  double busy_share() const { return total_ns > 0 ? double(busy_ns) / double(total_ns) : 0; }
  // A task's CPU (cores, or ns) with its share of the steal: the time its
  // vCPU was held by the hypervisor while the task was on it. On a kernel
  // with CONFIG_PARAVIRT_TIME_ACCOUNTING (Debian's; the machines here) and a
  // steal clock, schedstat and the tick counts charge steal to no task (the
  // guest's task clock stops while another guest runs), so a thread that
  // never left its vCPU shows cpu × busy ÷ (busy + steal); this undoes it
  // with the host's own ratio (not the task's vCPU's). Unchanged without
  // steal.
  double with_steal(double cpu) const {
    return busy_ns > 0 && steal_ns > 0 ? cpu * double(busy_ns + steal_ns) / double(busy_ns) : cpu;
  }
};

struct ProcessCpu {
  std::int64_t process_id = 0;
  int pid = 0;
  std::string comm;
  std::int64_t cpu_ns = 0;  // within the analysed span
};

struct SingleThreadCandidate {
  ProcessCpu process;
  std::int64_t hot_buckets = 0;  // buckets at ≥ kSingleThreadMinCores
  std::int64_t hot_cpu_ns = 0;   // its CPU in those buckets
  std::int64_t bucket_ns = 0;
  std::int64_t first_hot_ns = 0;
  std::int64_t last_hot_end_ns = 0;
};

// memory_pressure inputs (facts_path.cpp), over the analysed span.
struct MemoryFacts {
  std::int64_t rows = 0;          // host_memory_sample rows in the span
  std::int64_t psi_span_ns = 0;   // wall time covered by rows with PSI memory
  std::int64_t psi_some_us = 0;   // PSI memory "some" stall time
  std::int64_t psi_full_us = 0;   // PSI memory "full" stall time
  std::int64_t major_faults = 0;  // host pgmajfault
  std::int64_t swap_in_pages = 0;
  std::int64_t swap_out_pages = 0;
  std::int64_t path_majflt = 0;         // major faults of query-path processes
  std::int64_t path_memory_d_rows = 0;  // path rows in D with a memory-family wchan
  std::map<std::string, std::int64_t> path_memory_wchan_rows;
};

// kernel_wait inputs (facts_path.cpp): query-path rows (backends, driver
// threads, poolers) in S or D with a wchan of WchanFamily::other — and, for
// the driver and poolers, futex (a futex outside PostgreSQL).
struct KernelWaitFacts {
  std::int64_t rows = 0;
  // "role wchan" (role: backend, driver, pooler:<comm>) → rows, for evidence.
  std::map<std::string, std::int64_t> rows_by_wait;
  // Of `rows`, backend rows in S: with queries their time is the accounting's
  // kernel_wait parts (kernel_sleep.cpp), measured by span, not rows × period.
  std::int64_t backend_sleep_rows = 0;
  // The other rows (driver, poolers, backends in D), "role wchan" → rows.
  std::map<std::string, std::int64_t> other_rows_by_wait;
  // Blind ASH polls (ash_coverage.cpp): time in the span no poll covered —
  // a gap between polls of at least kAshBlindMinGapPeriods periods (and
  // kAshBlindMinGapNs), less one period — the longest such gap, and the
  // longest poll round trip.
  std::int64_t ash_blind_ns = 0;
  std::int64_t ash_blind_gaps = 0;
  std::int64_t ash_longest_gap_ns = 0;
  std::int64_t ash_longest_gap_start_ns = 0;
  std::int64_t ash_longest_poll_ns = 0;
};

// connection_setup inputs (facts_path.cpp): driver connections opened during
// the queries (client rows with connect_ns in the span).
struct ConnectionFacts {
  std::int64_t connections = 0;
  std::int64_t queries = 0;               // transactions in the span (to tell -C runs)
  std::int64_t connect_latency_ns = 0;    // their summed connect latency
  std::int64_t short_lived_backends = 0;  // sampled backends of them living < kShortLivedBackendNs
  std::int64_t sampled_backends = 0;      // sampled backends among them
  std::optional<std::int64_t> first_query_gap_ns;  // mean: connected → first query sent on it
};

// pool_wait inputs (facts_pooler.cpp): pgbouncer's admin console as the
// pooler sampler stored it (pooler_sample, --pooler-admin). Counter deltas
// are prorated by how much of each poll interval overlaps the span/window.
struct PoolerFacts {
  bool available = false;               // pooler_sample rows with deltas overlapping the span
  std::vector<std::string> databases;   // the pooler databases counted
  bool driver_database = false;         // they are the run's dbname (else: all seen)
  std::int64_t wait_ns = 0;             // total_wait_time in the span
  std::int64_t xacts = 0;               // total_xact_count in the span
  std::optional<std::int64_t> xact_ns;  // total_xact_time in the span: includes the wait (counted
                                        // from the client's first query)
  std::vector<std::int64_t> window_wait_ns;    // per Report::windows entry
  std::optional<std::int64_t> cl_waiting_max;  // SHOW POOLS gauges over polls in [start, end]
  std::optional<std::int64_t> sv_active_max;
  std::optional<std::int64_t> maxwait_max_ns;
};

// The run's lost connections and failed (re)connect attempts over the
// analysed span (stall_inputs.cpp outage_facts), for the connection_lost
// finding.
struct OutageFacts {
  std::int64_t lost_queries = 0;  // failed with a lost connection (08xxx but 08001, 57P01–57P03)
  std::int64_t connect_failures = 0;  // the driver's failed (re)connect attempts (08001)
  std::string sqlstates;              // "08001 ×37, 57P01 ×4", most frequent first
  std::string top_lost_sqlstate;      // the most frequent code but 08001 ("" when none)
  std::int64_t first_ns = 0;          // the first such row's start
  std::int64_t last_ns = 0;           // the last one's end
  std::string last_error;             // the latest one's message ("" when none)
};

// Failed queries that did not lose their connection (error_facts,
// errors.cpp): the server's own errors, by SQLSTATE.
struct ErrorFacts {
  struct Code {
    std::string sqlstate;
    std::int64_t queries = 0;
    std::string error;  // one message ("" when none was stored)
  };
  std::int64_t failed = 0;     // of RunSummary::queries
  std::int64_t failed_ns = 0;  // Σ their latency
  std::vector<Code> top;       // most frequent first, at most 3
};

struct Facts {
  // The analysed span: first query sent → last query answered (or the
  // samples' span; run_info.cpp).
  Span span;
  OutageFacts outage;  // with queries that lost their connection
  bool has_queries = false;
  bool ash_available = false;
  bool backends_on_host = false;  // backend processes found in `process`
  // Driver CPU and run delay come from its own threads (thread_sample rows
  // named ss-driver/N), so the writer's and samplers' threads don't count;
  // also set for an external driver (QueryPath::external_driver, pgbench),
  // whose process rows hold no sampler CPU: nothing is subtracted.
  bool driver_cpu_from_threads = false;
  int threads = 0;
  int cores = 0;
  std::int64_t ash_period_ns = 0;
  std::int64_t sample_period_ns = 0;
  HostTotals host;
  // ASH rows of this run's backends (run mode) or of client backends
  // (record mode) within the span.
  std::int64_t ash_rows = 0;
  std::map<std::string, std::int64_t> ash_class_rows;  // server wait classes only
  std::map<std::string, std::int64_t> ash_event_rows;  // "Type:Event" and "CPU"
  // Active on-CPU ASH rows by pg_query_text id (0: no text stored), and the
  // text with the most of them (top_cpu_query, set by explain after the
  // pass; empty when none): what server_cpu names as its culprit.
  std::map<std::int64_t, std::int64_t> ash_cpu_query_rows;
  std::string top_cpu_query;
  std::int64_t top_cpu_query_rows = 0;
  // Active ASH rows (on CPU, in a wait, or just done: Client:ClientRead) by
  // pg_query_text id: at high rates of short queries ASH may catch no
  // backend on CPU with its query, and then the query the backends were
  // seen active in is server_cpu's culprit instead (top_active_query).
  std::map<std::int64_t, std::int64_t> ash_active_query_rows;
  std::string top_active_query;
  std::int64_t top_active_query_rows = 0;
  // Process view.
  std::int64_t backend_d_rows = 0;  // backend process rows in state D
  std::map<std::string, std::int64_t> backend_d_wchan_rows;
  std::int64_t other_cpu_ns = 0;  // CPU of processes not on the query path
  std::int64_t all_cpu_ns = 0;    // record mode: every process
  std::int64_t all_run_delay_ns = 0;
  std::vector<ProcessCpu> top_other;  // largest CPU first, at most 3
  std::vector<SingleThreadCandidate> single_thread;
  // Per window, the share of its service time in each server wait class, and
  // its steal share, for finding spans.
  std::vector<std::map<std::string, double>> window_wait_share;
  std::vector<double> window_steal_share;
  // cpu_throttle: query-path run delay attributed to a CPU quota — of path
  // processes whose cgroup cpu.stat showed throttling (cgroup_data), else in
  // windows where the host was mostly idle — and per window its share.
  std::int64_t throttled_run_delay_ns = 0;
  std::vector<double> window_throttle_share;
  bool cgroup_data = false;              // cgroup_sample rows for query-path cgroups
  std::string throttled_cgroup;          // the most throttled query-path cgroup
  std::int64_t cgroup_throttled_ns = 0;  // its cpu.stat throttled time in the span
  std::int64_t cgroup_nr_throttled = 0;  // its throttled periods in the span
  std::int64_t cgroup_nr_periods = 0;    // its enforcement periods in the span
  // Gathered by facts_path.cpp's functions.
  MemoryFacts memory;
  KernelWaitFacts kernel;
  ConnectionFacts connections;
  PoolerFacts pooler;    // add_pooler_facts (facts_pooler.cpp)
  NetworkFacts network;  // network_facts (facts_tcp.cpp; network.h)
  // pg_stats_facts (facts_pgstats.cpp).
  PgStatsFacts pg_stats;
  ErrorFacts errors;  // error_facts (errors.cpp), with failed queries
  // The host sampler's missed ticks in the span (run_facts): intervals
  // of at least kSamplerGapMinPeriods sample periods (and
  // kSamplerGapMinNs) without a tick — stallscope's process stopped or
  // starved. Their total in sampler_gap_ns.
  std::vector<Span> sampler_gaps;
  std::int64_t sampler_gap_ns = 0;
};

// The memory, kernel-wait and connection facts of the span (facts_path.cpp);
// the query-path processes' rows come from add_path_process_row.
// The host's memory totals over the span (schema::host_memory_totals).
void add_host_memory(const schema::HostMemoryTotals& totals, MemoryFacts& m);
// The driver's own threads (ss-driver/N) at the span's ticks
// (schema::DriverThreadStateScan): its process row is the main thread's,
// which only waits for the run to end.
void add_driver_thread_rows(const RowSource<schema::ThreadState>& rows, Facts& f);
// The connections the driver opened in the span (schema::connects_in), the
// mean gap from a connection to its first query (mean_first_query_gap_ns)
// and their sampled backends (connection_backends, started within
// kBackendStartSlackNs of a connect).
struct ConnectionInputs {
  schema::ConnectTotals opened;
  std::optional<std::int64_t> first_query_gap_ns;
  std::vector<schema::ConnectionBackend> backends;
};
ConnectionFacts connection_facts(const ConnectionInputs& in);
// A query-path process's part in the memory and kernel-wait facts. A futex
// wait counts as a kernel wait for the driver and poolers (a futex outside
// PostgreSQL), not for backends (an LWLock, which ASH sees).
enum class PathRole : std::uint8_t { backend, pooler, driver };
struct PathProcess {
  PathRole role = PathRole::backend;
  std::string comm;  // a pooler's; its rows are named "pooler:<comm>" in evidence
};
// One process_sample row (tick in (start, end] of the span) of a query-path
// process, from the process pass's single scan of that table; of the driver
// only its major faults count (its states come from its threads,
// add_driver_thread_rows).
void add_path_process_row(Facts& f, const PathProcess& process, char state,
                          const std::optional<std::string>& wchan,
                          std::optional<std::int64_t> majflt);

// Name of the pooler whose admin console pooler_sample holds; the accounting
// part of the time queries waited in it is "path_wait:" + this.
inline constexpr const char* kPoolerName = "pgbouncer";
// pool_wait: the wait counts in full while the host CPU is busy less than
// kRoundtripMaxHostBusyShare; above it, it is discounted by the saturation
// (0 at 80 % busy, 1 at 100 %) times how CPU-bound the pool's server
// connections were (backend CPU ÷ (total_xact_time − total_wait_time), at most 1; 1
// when unknown): when the held connections were busy on saturated CPUs a
// bigger pool only moves the queue into the run queue, when they mostly
// waited (round trips through the pooler, sleeps, I/O) it raises throughput.
// pooler_sample rows whose poll interval (time_ns − interval_ns, time_ns]
// reaches into the span [start, end) are read up to this long after its
// end: intervals are about a --pooler-period long; an hour bounds the range.
inline constexpr std::int64_t kPoolerSlackNs = 3600 * kNsPerS;
struct PoolerFactsInputs {
  const std::vector<Window>& windows;  // Report::windows, in time order
  Span span;                           // Facts::span
  // The databases pooler_sample names in the span (schema::pooler_databases,
  // to kPoolerSlackNs after it); nothing is read when it names none.
  std::set<std::string> databases;
  std::optional<std::string> run_conninfo;  // schema::run_conninfo
  // pooler_sample rows from the span's start to kPoolerSlackNs after its
  // end, by time (schema::PoolerSampleScan).
  RowSource<schema::PoolerSample> rows;
};
// pooler_sample over the span and per window into f.pooler (nothing
// without rows); counts only the run's dbname (run.conninfo) when the pooler
// has it, else every database, and says which in `notes`.
void add_pooler_facts(const PoolerFactsInputs& in, Facts& f, std::vector<std::string>& notes);
// The pool_wait finding (facts_pooler.cpp): time queries waited in the
// pooler for a server connection, as a share of query time.
void pool_wait(const Report& r, const Facts& f, std::vector<Finding>& out);

// The time findings take shares of: under -R with the rate not kept
// (Accounting::lag_apportioned), the query time net of the schedule lag —
// the lag is time queued behind earlier transactions, so it is apportioned
// to whatever made those slow, i.e. in proportion to the service time's
// parts; otherwise the query time.
inline std::int64_t service_ns(const Accounting& a) {
  return a.lag_apportioned ? std::max<std::int64_t>(0, a.query_ns - a.schedule_lag_ns) : a.query_ns;
}

// Per window, what a stall explanation compares with the typical windows.
struct WindowSignals {
  // The window's service time: query time minus schedule lag (Window); the
  // shares a stall is explained by are of it.
  std::int64_t service_ns = 0;
  std::int64_t backend_d_rows = 0;  // backend process rows in state D
  std::string top_d_wchan;          // most frequent wchan among them
  std::int64_t top_d_wchan_rows = 0;
  std::int64_t checkpointer_d_rows = 0;
  std::int64_t checkpointer_write_bytes = 0;
  std::int64_t io_rows = 0;      // ASH IO + (with IO evidence) LWLock:WALWrite rows
  std::int64_t lock_rows = 0;    // ASH Lock rows
  std::int64_t lwlock_rows = 0;  // ASH LWLock rows not counted in io_rows
  int top_blocking_pid = 0;      // most frequent first blocking pid of Lock rows
  std::int64_t top_blocking_pid_rows = 0;
  std::int64_t run_delay_ns = 0;   // query path, contention only
  std::int64_t throttled_ns = 0;   // query path, quota
  double steal_share = 0;          // steal ÷ (busy + steal)
  std::int64_t ash_period_ns = 0;  // to turn rows into time
  std::int64_t sample_period_ns = 0;
  // Queries answered in the window that lost their connection: query_error rows
  // with SQLSTATE class 08 (connection exception) or 57P01–57P03 (the server
  // shut down, crashed or is starting), and the most frequent of those codes.
  // Of them, connect_failures: the driver's failed (re)connect attempts
  // (08001), which are not queries that lost a connection but the wait for
  // a server.
  std::int64_t connection_errors = 0;
  std::int64_t connect_failures = 0;
  std::string top_connection_sqlstate;
  // Those codes with their counts, most frequent first ("08001 ×12, 57P01 ×4");
  // the clients' time in such failed rows within the window (a failed
  // reconnect attempt's row covers the wait since the client's previous row:
  // the time the clients spent reconnecting), and the latest such message.
  std::string connection_sqlstates;
  std::int64_t connection_lost_ns = 0;
  std::string last_connection_error;
  // Backends asleep in the kernel outside any wait event while serving the
  // queries (WindowAcc::kernel_sleep_ns), their most frequent wchan, and the
  // time no ASH poll covered (ash_coverage.cpp).
  std::int64_t kernel_sleep_ns = 0;
  std::string top_sleep_wchan;
  std::int64_t ash_blind_ns = 0;
  std::int64_t window_ns = 0;
  // ASH rows waiting for a standby (is_replication_wait: IPC:SyncRep).
  std::int64_t replication_rows = 0;
};

// Finds the stalls among the windows (stalls.cpp). `blocker_query` returns
// the latest query text ASH saw for a pid before a time, or "".
std::vector<Stall> find_stalls(const Report& r, const std::vector<WindowSignals>& sig,
                               const std::function<std::string(int, std::int64_t)>& blocker_query);

// Whether a fixed rate (-R) was not kept: mean lag ≥ kRateNotKeptMinLagShare
// of a client's mean gap between transactions (verdict.cpp).
bool rate_not_kept(const RunSummary& r);
// The verdict from the ranked findings (verdict.cpp).
Verdict decide_verdict(const Report& r, const Facts& f);
// driver_stopped (stopped.cpp): the query time outstanding while the
// driver's own process did not run (the sampler's missed ticks, Facts::
// sampler_gaps), as a share of query time; nullopt below kMinScore, without
// queries, or without gaps. Its time is no round trip (network_roundtrip
// leaves it out).
std::optional<Finding> driver_stopped(const Report& r, const Facts& f);
// The same query time as the accounting's part "driver_stopped", taken out
// of its remainder or unaccounted part (at most all of it; nothing below
// kMinScore of query time), so that the parts still add up and the stop is no round trip.
void account_driver_stop(Report& r, const Facts& f);
// The failed queries' facts (errors.cpp), from their counts by SQLSTATE
// (schema::query_errors_by_sqlstate with kErrorCodesNamed codes).
inline constexpr int kErrorCodesNamed = 3;
ErrorFacts error_facts(const schema::QueryErrors& errors);
// The errors finding (errors.cpp): failed queries, not a bottleneck, are
// the answer when most transactions failed (it is then ranked first); with
// fewer, it scores the query time the failures took. nullopt below
// kMinScore or without failures.
std::optional<Finding> errors_finding(const Report& r, const Facts& f);
// A share of the transactions at or above which failures are the verdict.
inline constexpr double kErrorsVerdictMinShare = 0.5;
// The latency_bound finding (closed_loop.cpp): for a closed loop whose
// findings, ranked highest score first, start with a CPU part (server_cpu or
// client_cpu, or a round trip below kLatencyBoundMaxRoundtripShare) and hold
// no limit or wait, on a host with CPU headroom and little run-queue delay —
// clients waiting for every answer, throughput ≈ clients ÷ mean latency (a
// record file: its sessions ÷ the server's transactions per second from
// pg_stat_database). nullopt otherwise.
std::optional<Finding> latency_bound(const Report& r, const Facts& f,
                                     const std::vector<Finding>& ranked);

// Ranks the findings (rules in findings.cpp).
std::vector<Finding> find(const Report& report, const Facts& facts);

// The error explain throws for a failed read of the file at `path`: bad
// input (usage, exit 2) for a damaged file or a missing table or column,
// a failure (sqlite) otherwise; one line naming the file.
Error read_error(const std::string& path, const Error& e);

// Text escaping for terminals: common::printable (control characters and
// bytes that are not valid UTF-8 become \xNN).
std::string escape_text(std::string_view s);
// common::valid_utf8: invalid UTF-8 replaced with U+FFFD so JSON can always
// be dumped.
std::string valid_utf8(std::string_view s);
// Evidence as a JSON object (names → numbers or strings), and a stall as JSON.
nlohmann::json evidence_json(const Evidence& evidence);
nlohmann::json stall_json(const Stall& stall);

}  // namespace stallscope::correlate::detail
