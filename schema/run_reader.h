// Typed reads of a run file's small tables and aggregates for explain
// (correlate/): the run row, tick periods, pgbench aggregates, processes,
// clients, cgroups, query errors and ASH lookups — each a value type, so
// that the correlator never holds SQL. The big tables are streamed by the
// cursors of schema/sample_readers.h.
//
//   auto run = schema::read_run(store);  // nullopt: the file holds no run
//   schema::ProcessLookup processes(store);
//   if (auto p = processes.name_of(id)) use(p->pid, p->comm);
//
// Every reader reads through store.db(), so temporary views that shadow a
// table (explain_pair's server file, correlate/pair.cpp) are read in its
// place. Errors throw schema::SqliteError (store.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schema/row.h"
#include "schema/store.h"

namespace stallscope::schema {

// ---- run ----

// The `run` row (schema/v1.sql), as explain reads it.
struct RunRow {
  std::string host;
  std::string kernel;
  int cores = 0;
  std::string mode;    // to_string(RunMode): "run", "record" or "import-pgbench"
  std::string status;  // "running", "complete", "interrupted" or "failed"
  std::int64_t start_ns = 0;
  std::optional<std::int64_t> end_ns;
  std::optional<int> clients;
  std::optional<int> threads;
  std::optional<std::string> protocol;
  std::optional<std::string> sql;
  std::optional<std::string> server_version;
  std::optional<std::string> end_reason;
  double hz = 0;
  int stallscope_pid = 0;
  std::optional<std::int64_t> stallscope_start_ticks;
  std::int64_t clock_ticks_per_s = 0;
  // run -R's rate, transactions per second; nullopt for a closed loop, a
  // record or import file, and files older than schema version 4.
  std::optional<double> rate_tps;
  // The sampling host's /etc/machine-id and boot id; nullopt for an
  // import-pgbench file and files older than schema version 5.
  std::optional<std::string> machine_id;
  std::optional<std::string> boot_id;
};
// The run row; nullopt when the file holds none.
std::optional<RunRow> read_run(Store& store);
// run.mode alone (schema/records.h RunMode); nullopt for a file without a
// run row or with a mode this build does not know.
std::optional<RunMode> run_mode(Store& store);
// run.conninfo (masked); nullopt when NULL or without a run row.
std::optional<std::string> run_conninfo(Store& store);

// Rows of a tick table and the first and last tick's time.
struct TickRange {
  std::int64_t rows = 0;
  std::optional<std::int64_t> first_ns;  // absent without rows
  std::optional<std::int64_t> last_ns;
};
TickRange sample_ticks(Store& store);  // `sample`
TickRange ash_ticks(Store& store);     // `ash_tick`
// The host sampler's missed ticks: each `sample` row whose interval_ns (since
// the previous tick, monotonic) is at least min_interval_ns, as the wall-clock
// span [time_ns − interval_ns, time_ns) without a tick, in time order — the
// sampling process stopped (SIGSTOP, a debugger, a paused VM) or starved.
struct SampleGap {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};
std::vector<SampleGap> sample_gaps(Store& store, std::int64_t min_interval_ns);
// The median interval_ns of the `sample` rows (the sampler's own period,
// which gaps do not stretch as a mean would); nullopt with fewer than two.
std::optional<std::int64_t> median_sample_interval_ns(Store& store);
// Whether the ASH sampler left anything: ash_tick or pg_activity_sample rows.
bool has_ash_rows(Store& store);

// ---- pgbench aggregates (import-pgbench --aggregate-interval logs) ----

// The time covered by the pgbench_aggregate rows (an imported aggregate
// log, one file per pgbench thread). interval_ns is --aggregate-interval:
// the smallest step between consecutive rows of one file, 1 s when no file
// has two rows.
struct AggregateSpan {
  std::int64_t start_ns = 0;  // first interval's start
  std::int64_t end_ns = 0;    // last interval's start + interval_ns
  std::int64_t interval_ns = 0;
};
// nullopt when the table is empty.
std::optional<AggregateSpan> pgbench_aggregate_span(Store& store);

// Totals over every pgbench_aggregate row.
struct AggregateTotals {
  AggregateSpan span;             // pgbench_aggregate_span
  std::int64_t intervals = 0;     // rows
  std::int64_t transactions = 0;  // Σ transactions
  std::int64_t failures = 0;      // Σ serialization_failures + deadlock_failures
  std::int64_t skipped = 0;       // Σ skipped
  std::int64_t latency_sum_ns = 0;
  std::optional<std::int64_t> latency_min_ns;
  std::optional<std::int64_t> latency_max_ns;
  std::optional<std::int64_t> lag_sum_ns;
};
// nullopt when the table is empty.
std::optional<AggregateTotals> pgbench_aggregate_totals(Store& store);

// One pgbench_aggregate row, as explain's windows use it.
struct AggregateInterval {
  std::int64_t start_ns = 0;
  std::int64_t transactions = 0;
  std::int64_t latency_sum_ns = 0;
  std::int64_t failures = 0;  // serialization_failures + deadlock_failures
};
// Every row, by interval start (all files together).
std::vector<AggregateInterval> pgbench_aggregate_intervals(Store& store);

// ---- queries ----

// A query a user can run on the run file to see why queries failed; explain
// quotes it in a note when most queries failed (correlate/run_info.cpp).
inline constexpr const char* kFailedQueriesRecipeSql =
    "SELECT sqlstate, count(*), min(error) FROM query_error GROUP BY 1";

// Per client id, its latest stored query's start: the earliest and latest
// of those, and how many clients (a full scan of `query`).
struct LatestQueries {
  std::int64_t clients = 0;
  std::int64_t earliest_ns = 0;  // min over clients of max(start_ns)
  std::int64_t latest_ns = 0;    // max(start_ns)
};
LatestQueries latest_query_per_client(Store& store);
// How far a run file's drive and sampling reach, the one definition of what
// a run cut short by a failed commit kept: the latest end (start_ns +
// latency_ns) of a `query` row or time_ns of a `sample` row, whichever is
// later (wall clock, ns since the epoch); nullopt when the file holds
// neither. `run` and `record` print the same figure from the rows their
// writer committed (WriteFailure::kept_until_ns). A full scan of `query`.
std::optional<std::int64_t> kept_until_ns(Store& store);
// query_skipped rows with start_ns ≤ until_ns.
std::int64_t skipped_queries(Store& store, std::int64_t until_ns);
// query rows with start_ns > after_ns.
std::int64_t queries_after(Store& store, std::int64_t after_ns);
// All query rows: SQLite's count(*), which counts the cells of the table's
// leaf pages without reading them (≈ 0.2 s for 10 M rows).
std::int64_t query_rows(Store& store);
// Whether the first query (by start_ns) has a lag_ns (-R runs); false without queries.
bool first_query_has_lag(Store& store);

// Per SQLSTATE of a connection loss (class 08, 57P01–57P03), the failed
// queries answered in [from_ns, to_ns) — their last outstanding instant,
// start + latency − 1 ns, in it, as explain's time windows count answers —
// most frequent first.
struct SqlstateCount {
  std::string sqlstate;
  std::int64_t queries = 0;
};
class ConnectionErrors {
 public:
  explicit ConnectionErrors(Store& store);
  std::vector<SqlstateCount> between(std::int64_t from_ns, std::int64_t to_ns);

 private:
  Cursor st_;
};

// Failed queries whose failure is not a lost connection (the server's own
// errors: syntax, constraints, serialization, timeouts…), by SQLSTATE, most
// frequent first: the count, the time they were outstanding (Σ latency_ns)
// and one message (the smallest, so the same for every reader).
struct QueryErrorCount {
  std::string sqlstate;
  std::int64_t queries = 0;
  std::int64_t latency_ns = 0;
  std::string error;  // "" when no message was stored
};
// At most `limit` SQLSTATEs, and in `total` the sums over all of them.
struct QueryErrors {
  std::vector<QueryErrorCount> top;
  QueryErrorCount total;  // sqlstate and error empty
};
QueryErrors query_errors_by_sqlstate(Store& store, int limit);

// A failed query that lost its connection (SQLSTATE class 08 or 57P01–57P03),
// or a failed reconnect attempt of the driver (08001, its row covering the
// wait since the client's previous row): its span and message.
struct ConnectionLoss {
  std::int64_t start_ns = 0;
  std::int64_t latency_ns = 0;
  std::string sqlstate;
  std::string error;  // "" when NULL
};
// Those whose [start_ns, start_ns + latency_ns) overlaps [from_ns, to_ns), by end.
class ConnectionLosses {
 public:
  explicit ConnectionLosses(Store& store);
  std::vector<ConnectionLoss> overlapping(std::int64_t from_ns, std::int64_t to_ns);

 private:
  Cursor st_;
};

// ---- processes ----

// A process row's identity (the `process` table).
struct ProcessIdentity {
  std::int64_t process_id = 0;
  int pid = 0;
  std::int64_t start_ticks = 0;          // /proc/PID/stat field 22
  std::optional<std::int64_t> start_ns;  // wall clock
  std::optional<int> ppid;
  std::string comm;
  std::string cmdline;  // "" when NULL
};
// Every process row, by process_id.
std::vector<ProcessIdentity> read_process_identities(Store& store);
// The process with this process_id; nullopt when there is none.
std::optional<ProcessIdentity> process_identity(Store& store, std::int64_t process_id);
// The PostgreSQL processes — comm "postgres", or a command line starting
// with "postgres: " (backends and auxiliary processes; one the sampler first
// saw before it set its title keeps the postmaster's command line) — that
// started in [from_ns, to_ns], by start time.
std::vector<ProcessIdentity> postgres_processes_started_between(Store& store, std::int64_t from_ns,
                                                                std::int64_t to_ns);

struct ProcessName {
  int pid = 0;
  std::string comm;
};
struct ProcessPid {
  std::int64_t process_id = 0;
  int pid = 0;
};
struct ProcessComm {
  std::int64_t process_id = 0;
  std::string comm;
};

// Lookups in `process` by id and by pid.
class ProcessLookup {
 public:
  explicit ProcessLookup(Store& store);
  std::optional<ProcessName> name_of(std::int64_t process_id);
  std::optional<int> pid_of(std::int64_t process_id);
  // The latest process (by start_ticks) with this pid that started no later
  // than started_by_ns (when given; a process without start_ns always
  // matches).
  std::optional<std::int64_t> latest_with_pid(int pid, std::optional<std::int64_t> started_by_ns);

 private:
  Cursor name_, pid_, by_pid_;
};

// The stallscope process: pid, start_ticks when known, started by started_by_ns.
std::optional<std::int64_t> find_driver_process(Store& store, int pid,
                                                std::optional<std::int64_t> start_ticks,
                                                std::int64_t started_by_ns);
// The largest process_id (0 without processes).
std::int64_t max_process_id(Store& store);
// Processes named `comm` with a process_sample row at a tick in (from_ns, to_ns].
std::vector<ProcessComm> sampled_processes_named(Store& store, const std::string& comm,
                                                 std::int64_t from_ns, std::int64_t to_ns);
// Behind a pooler: the client backends (cmdline "postgres: USER DB HOST…")
// sampled at a tick in (from_ns, to_ns] whose parent is the parent of a
// process ASH saw in [from_ns, to_ns).
std::vector<ProcessPid> pooled_client_backends(Store& store, std::int64_t from_ns,
                                               std::int64_t to_ns);
// Processes whose command line is "postgres: checkpointer…".
std::vector<std::int64_t> checkpointer_processes(Store& store);
// Whether the process has ss-driver/N thread_sample rows with a CPU delta.
bool has_driver_thread_cpu(Store& store, std::int64_t process_id);

// The driver's connections that recorded their backend pid (client rows).
struct DriverBackend {
  int backend_pid = 0;
  std::optional<std::int64_t> connect_ns;
};
std::vector<DriverBackend> driver_backends(Store& store);

// ---- cgroups ----

struct ProcessCgroup {
  std::int64_t process_id = 0;
  std::string cgroup;
};
// Processes with a cgroup (process.cgroup).
std::vector<ProcessCgroup> process_cgroups(Store& store);

// A cgroup's cpu.stat sums over the ticks in (from_ns, to_ns].
struct CgroupTotals {
  std::int64_t rows = 0;
  std::int64_t nr_periods = 0;  // NULL sums read as 0: no throttling seen (`rows` tells no rows)
  std::int64_t nr_throttled = 0;
  std::int64_t throttled_ns = 0;
};
class CgroupSums {
 public:
  explicit CgroupSums(Store& store);
  CgroupTotals of(const std::string& cgroup, std::int64_t from_ns, std::int64_t to_ns);

 private:
  Cursor st_;
};

// ---- ASH ----

// A pid's latest ASH row at or before a time: its query text (pg_query_text,
// "" when unknown) and state ("" when NULL).
struct LatestActivity {
  std::string query;
  std::string state;
};
class ActivityLookup {
 public:
  explicit ActivityLookup(Store& store);
  std::optional<LatestActivity> latest(int pid, std::int64_t at_ns);

 private:
  Cursor st_;
};

// pg_query_text.query of one query_text_id; nullopt when there is no such row.
std::optional<std::string> query_text(Store& store, std::int64_t query_text_id);
// The same row with its query_id (pg_stat_activity.query_id; nullopt when the
// poll that stored it saw none).
struct QueryTextEntry {
  std::optional<std::int64_t> query_id;
  std::string query;
};
std::optional<QueryTextEntry> query_text_entry(Store& store, std::int64_t query_text_id);

}  // namespace stallscope::schema
