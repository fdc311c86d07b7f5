// explain's passes over a run file (internal to the correlator). explain()
// (explain.cpp) calls them; each file holds one, listed in the order they run:
//
//   run_info.cpp      the run row, the tick periods, the analysed span, windows' kind
//   query_scan.cpp    the query table in one scan: run totals, percentiles, query windows
//   query_path.cpp    the driver, this run's backends, poolers, cgroups, the checkpointer
//   pgbench_driver.cpp  an imported pgbench log's driver and backends in a record file
//   windows.cpp       closing the windows at the span's end; the window index
//   host_pass.cpp     sample and host_sample rows into the windows
//   ash_coverage.cpp  the ASH polls' coverage of each window (declared in kernel_sleep.h)
//   ash_pass.cpp      pg_activity_sample rows of this run's backends into the windows
//   process_pass.cpp  process_sample (and the driver's thread_sample) rows into the windows
//   accounting.cpp    the windows' figures and time accounting, and the whole run's
//   host_accounting.cpp  the host's CPU time, for a file without query or session time
//   notes.cpp         the report's notes on sampling limits and caveats
//   stall_inputs.cpp  what the stall rules read beyond the windows' sums
//
// Not passes: file_reads.cpp, the read layer (file_reads.h).
//
// No pass holds the Store: each takes its rows and lookups (row_source.h),
// which explain.cpp binds to the run file through file_reads.cpp and a test
// to values. Passes that read a table add what they read into the windows'
// accumulators (WindowAcc) and into the facts the finding rules read (Facts,
// detail.h); the others return their facts (run_facts, the query path,
// outage_facts, error_facts, …).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "correlate/attribution.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/row_source.h"
#include "schema/pgbench_readers.h"
#include "schema/run_reader.h"
#include "schema/sample_readers.h"
#include "schema/store.h"

namespace stallscope::correlate::detail {

// ---- run_info.cpp ----

// The run row and what identifies the driver (run_row: from schema::read_run's).
struct RunRow {
  RunSummary summary;
  int stallscope_pid = 0;
  std::optional<std::int64_t> stallscope_start_ticks;
  std::int64_t clock_ticks_per_s = 0;  // /proc/PID/stat ticks
  bool imported = false;               // an imported pgbench log (schema::RunRow)
};

RunRow run_row(schema::RunRow row);

// What run_facts reads: the schema/run_reader.h functions of the same names.
struct RunFactsInputs {
  std::optional<schema::AggregateTotals> aggregate;  // pgbench_aggregate_totals
  schema::TickRange sample_ticks, ash_ticks;
  bool has_ash_rows = false;
  std::optional<std::int64_t> median_sample_interval_ns;
  Lookup<std::vector<schema::SampleGap>, std::int64_t> sample_gaps;  // by minimum interval
  Lookup<std::optional<std::int64_t>> kept_until_ns;  // read for a run cut short by its file
};

// After the query scan: the facts of the run as a whole (whether it has
// queries, cores, threads, tick periods, whether ASH ran, the analysed span),
// the report's pgbench aggregate summary and kind of windows, and the notes
// on failed queries, a fixed rate not kept, queries spanning much less than
// the run, aggregate-only files and --every without queries — in that order, after a first note on
// how the run ended when it did not end as asked (add_run_end_note).
Facts run_facts(const RunFactsInputs& in, const ExplainOptions& options, Report& report);

// ---- query_scan.cpp ----

// A run still being written (or killed): each driver thread's rows reach the
// file in its own commits, so past the earliest of the clients' latest
// stored queries some clients' rows may be missing — the tail would read as
// a throughput drop. Queries sent after that point are left out, but never
// more than the last second before the latest stored query (a client held up
// longer, e.g. in a lock wait when the run was killed, is part of the
// story): a driver thread hands its rows over every 100 ms and the writer
// commits them in order at most 250 ms later. The same holds for a run cut
// short by a failed commit of its file (end_reason "disk full at …" or
// "write failed at …": the rows of the failed commit are lost). The file's latest query per client
// (schema::latest_query_per_client, a full scan) is read only for those runs; INT64_MAX for the
// others.
std::int64_t query_scan_cut_ns(const RunSummary& run,
                               const Lookup<schema::LatestQueries>& latest_query_per_client);

// What the query scan reads, up to the cut: schema/sample_readers.h's and
// schema/run_reader.h's readers of the same names, bound by file_reads.cpp.
struct QueryReads {
  std::string path;          // the file, for errors
  std::int64_t cut_ns = 0;   // query_scan_cut_ns
  std::int64_t skipped = 0;  // skipped_queries
  // In primary-key order (start_ns, client_id, seq): the queries
  // (QueryRows), and the keys of the failed ones (QueryErrorKeys), their
  // \sleep time (QuerySleeps) and lost connections (ConnectionLossKeys).
  RowSource<schema::QueryTiming> queries;
  RowSource<schema::QueryKey> error_keys;
  RowSource<schema::QuerySleep> sleeps;
  RowSource<schema::ConnectionLossKey> loss_keys;
  std::vector<schema::UnfinishedQuery> unfinished;   // unfinished_queries
  Lookup<std::int64_t, std::int64_t> queries_after;  // sent after a time
  Lookup<std::int64_t> query_rows;                   // every query row
};

// Pass 1: the query table in one scan (see query_scan.cpp): fills
// report.run's query figures (percentiles included) and, for --every, the
// query windows; time windows are opened as queries arrive and closed by
// finish_windows. Returns the number of distinct client ids seen. A row out
// of key order or bounds, or fewer rows read than stored, is a damaged file
// (Error(usage)).
std::int64_t scan_queries(const QueryReads& file, const ExplainOptions& options, Report& report);

// ---- query_path.cpp ----

// The processes whose time is query time: the driver and this run's
// backends, and the poolers between them.
struct QueryPath {
  std::optional<std::int64_t> driver_process_id;
  std::unordered_set<std::int64_t> backend_process_ids;
  std::unordered_set<int> backend_pids;  // for ASH
  // No process matched the driver's backend pids (before poolers were looked
  // for): behind a pooler, or the server ran on another host.
  bool driver_backends_unsampled = false;
  // Path processes whose cgroup's cpu.stat showed throttling in the span.
  std::unordered_set<std::int64_t> throttled_process_ids;
  // Checkpointer processes (cmdline "postgres: checkpointer"), for stalls.
  std::unordered_set<std::int64_t> checkpointer_ids;
  // Poolers and proxies between driver and server: process_id → comm.
  std::unordered_map<std::int64_t, std::string> middle_processes;
  // The driver is another program, not stallscope (pgbench, for an imported
  // log explained with a record file): its process rows are all driver CPU
  // and run delay, with no sampler thread of stallscope's in them.
  bool external_driver = false;
  // An imported pgbench log explained with a record file: how pgbench and
  // its backends were found (find_pgbench).
  std::optional<PgbenchDriver> pgbench;
  bool is_path(std::int64_t id) const {
    return id == driver_process_id || backend_process_ids.contains(id) ||
           middle_processes.contains(id);
  }
};

struct QueryPathInputs {
  const RunRow& run;
  const ExplainOptions& options;
  Span span;
  bool has_queries = false;
  // Client + server (explain_pair): the driver ran on the client host, so no
  // process of this file is the driver.
  bool pair = false;
};

// What the query path looks up among the file's processes, ASH rows and run
// row: the schema/run_reader.h and schema/pgbench_readers.h functions of the
// same names (latest_with_pid: schema::ProcessLookup's), bound to the file
// by file_reads.cpp, to values by a test.
struct ProcessLookups {
  // pid, start_ticks, started by (ns).
  Lookup<std::optional<std::int64_t>, int, std::optional<std::int64_t>, std::int64_t>
      find_driver_process;
  Lookup<std::vector<schema::DriverBackend>> driver_backends;
  // pid, started by (ns).
  Lookup<std::optional<std::int64_t>, int, std::optional<std::int64_t>> latest_with_pid;
  // comm, (from, to] ns.
  Lookup<std::vector<schema::ProcessComm>, const std::string&, std::int64_t, std::int64_t>
      sampled_processes_named;
  Lookup<std::vector<schema::ProcessPid>, std::int64_t, std::int64_t> pooled_client_backends;
  // An imported pgbench log's driver and backends (find_pgbench).
  Lookup<std::vector<schema::SampledProcess>, const std::string&, std::int64_t, std::int64_t>
      sampled_processes_with_cpu;
  Lookup<std::vector<schema::AshBackend>, const std::string&, std::int64_t, std::int64_t>
      ash_pids_with_application_name;
  Lookup<std::vector<int>, const std::string&, std::int64_t, std::int64_t>
      ash_pids_without_application_name;
  Lookup<std::optional<schema::ProcessIdentity>, std::int64_t> process_identity;
  Lookup<std::vector<schema::ProcessIdentity>, std::int64_t, std::int64_t>
      postgres_processes_started_between;
  Lookup<std::optional<std::string>> run_command_line;
  Lookup<bool> has_ash_rows;
};

// The driver, this run's backends and (with queries) the poolers on the
// path; notes what --path-process did not find and what was detected.
QueryPath find_query_path(const ProcessLookups& file, const QueryPathInputs& in,
                          std::vector<std::string>& notes);
// How the server parts of the accounting are tied to the queries
// (Attribution in correlate.h): per query when each query's backend is
// known through `backends`, else host-wide and why. With queries only.
Attribution choose_attribution(const RunRow& run, std::int64_t queries, const QueryPath& qp,
                               const BackendMap& backends);
// An imported pgbench log explained with a record file (pgbench_driver.cpp):
// pgbench's process — comm "pgbench", sampled during the span; the one whose
// pid a log file name gives, else the one with the most CPU — becomes the
// (external) driver, and the pids of ASH rows with application_name
// "pgbench" in the span, and the client backends that started as pgbench
// connected (PgbenchDriver in correlate.h), with their sampled processes,
// this run's backends. `clients`: the log's client count (RunSummary).
// Sets qp.pgbench and adds a note saying how pgbench was found, or why not.
void find_pgbench(const ProcessLookups& file, Span span, std::optional<int> clients, QueryPath& qp,
                  std::vector<std::string>& notes);
// The pids pgbench log file names carry (pgbench writes PREFIX.PID for its
// first thread and PREFIX.PID.N for thread N), from the arguments of an
// import's command line, ascending and without duplicates. A name with two
// trailing numbers gives both (PREFIX may end in a number).
std::vector<int> pids_in_log_names(std::string_view command_line);
// What add_cgroups reads: each sampled process's cgroup
// (schema::process_cgroups), and a cgroup's cpu.stat summed over the
// analysed span (schema::CgroupSums::of).
struct CgroupInputs {
  std::vector<schema::ProcessCgroup> process_cgroups;
  Lookup<schema::CgroupTotals, const std::string&> sums_in_span;
};
// cgroup cpu.stat of the query path's cgroups over the span: marks the path
// processes whose cgroup was throttled (qp) and keeps the most throttled
// cgroup's figures (f).
void add_cgroups(const CgroupInputs& in, QueryPath& qp, Facts& f);

// ---- windows.cpp ----

// What each window accumulates while the passes stream by.
struct WindowAcc {
  HostTotals host;
  std::int64_t sampler_cpu_ns = 0;
  std::int64_t driver_cpu_ns = 0;
  std::int64_t server_cpu_ns = 0;
  std::map<std::string, std::int64_t> path_cpu_ns;  // poolers/proxies by comm
  std::int64_t path_wait_ns = 0;  // queries waiting in the pooler (facts_pooler.cpp)
  // The window's Window::connection_lost_ns (sum_windows copies it here).
  std::int64_t connection_lost_ns = 0;
  std::int64_t run_delay_ns = 0;
  std::int64_t driver_run_delay_ns = 0;  // of which the driver's
  std::int64_t throttled_delay_ns = 0;   // run delay of path processes in throttled cgroups
  // Backend D rows while serving queries (attribution.h), by wchan; the whole
  // run's total also carries the per-window counted D-state time.
  std::map<std::string, std::int64_t> query_d_wchan_rows;
  std::optional<std::map<std::string, std::int64_t>> d_counted_by_wchan_ns;
  // Process rows whose CPU delta covered part of the window: without any,
  // its CPU and run delay are unknown, not 0 (sampling slower than the span).
  std::int64_t cpu_delta_rows = 0;
  std::int64_t ash_cpu_rows = 0;  // backends active with no wait event
  std::int64_t backend_d_rows = 0;
  std::map<std::string, std::int64_t> backend_d_wchan_rows;
  std::int64_t checkpointer_d_rows = 0;
  std::int64_t checkpointer_write_bytes = 0;
  std::map<int, std::int64_t> blocking_pid_rows;  // first blocking pid of Lock rows
  std::map<std::string, std::int64_t> ash_event_rows;
  std::map<std::string, std::int64_t> ash_class_rows;
  // Backends asleep in the kernel outside any wait event while serving the
  // queries, by wchan (kernel_sleep.cpp), and the time no ASH poll covered
  // (ash_coverage.cpp).
  std::map<std::string, std::int64_t> kernel_sleep_ns;
  std::int64_t ash_blind_ns = 0;
};

// Window boundaries: window i covers [starts_ns[i], ends_ns[i]); the windows
// partition the analysed span.
struct WindowIndex {
  std::vector<std::int64_t> starts_ns;
  std::vector<std::int64_t> ends_ns;
  // Time windows: their common length (the last may be shorter), so that
  // find() is a division; 0 for query windows (binary search).
  std::int64_t uniform_ns = 0;
  // Index of the window holding t_ns, or -1 outside the span.
  std::ptrdiff_t find(std::int64_t t_ns) const {
    if (starts_ns.empty() || t_ns < starts_ns.front() || t_ns >= ends_ns.back()) return -1;
    if (uniform_ns > 0) return static_cast<std::ptrdiff_t>((t_ns - starts_ns.front()) / uniform_ns);
    auto it = std::upper_bound(starts_ns.begin(), starts_ns.end(), t_ns);
    return (it - starts_ns.begin()) - 1;
  }
};

// Adds `value`, spread evenly over [t − span, t), to the windows it overlaps.
// Without a span the value goes to the window holding t.
template <typename Add>
void spread(const WindowIndex& wi, std::int64_t t, std::optional<std::int64_t> span_ns,
            std::int64_t value, Add&& add) {
  if (!span_ns || *span_ns <= 0) {
    if (auto i = wi.find(t); i >= 0) add(static_cast<std::size_t>(i), value);
    return;
  }
  const std::int64_t from = t - *span_ns;
  auto i = wi.find(std::max(from, wi.starts_ns.front()));
  if (i < 0) return;
  if (const auto k = static_cast<std::size_t>(i); from >= wi.starts_ns[k] && t <= wi.ends_ns[k]) {
    add(k, value);  // the whole span in one window (value × span ÷ span)
    return;
  }
  for (auto k = static_cast<std::size_t>(i); k < wi.starts_ns.size() && wi.starts_ns[k] < t; ++k) {
    auto overlap = std::min(t, wi.ends_ns[k]) - std::max(from, wi.starts_ns[k]);
    if (overlap <= 0) continue;
    add(k, static_cast<std::int64_t>(static_cast<__int128>(value) * overlap / *span_ns));
  }
}

// What throw_too_many_windows throws: an Error(usage) that keeps the
// window length and how many windows the span needed, so that explain()
// can lengthen a window the user did not choose (ExplainOptions::window_chosen).
class TooManyWindows : public Error {
 public:
  TooManyWindows(std::string message, std::int64_t window_ns, std::int64_t count)
      : Error(ErrorKind::usage, std::move(message)), window_ns(window_ns), count(count) {}
  std::int64_t window_ns;
  std::int64_t count;
};
// Throws TooManyWindows: `count` windows of window_ns exceed kMaxWindows.
[[noreturn]] void throw_too_many_windows(std::int64_t window_ns, std::int64_t count);
// The shortest window of 1, 2 or 5 × 10^k times `window_ns` (k ≥ 0) that
// cuts a span needing `count` windows of window_ns into `target` or fewer.
std::int64_t window_to_fit(std::int64_t window_ns, std::int64_t count, std::int64_t target);
// Closes the windows at the span's end (time windows partition the span;
// without queries they are made here) and returns their index.
WindowIndex finish_windows(const ExplainOptions& options, Report& report, Span span);
// A file with pgbench aggregate intervals but no queries: each time window
// gets the transactions, failures and mean latency of the intervals that
// start in it.
void fill_windows_from_aggregates(const std::vector<schema::AggregateInterval>& intervals,
                                  Report& report);

// ---- host_pass.cpp ----

// Pass 2: the span's sampler ticks (sample and host_sample rows), into the
// windows.
void add_host_ticks(const RowSource<schema::HostTick>& ticks, const WindowIndex& wi,
                    std::vector<WindowAcc>& acc);

// ---- ash_pass.cpp ----

// Per-query attribution: the sweep of the queries and the backends' slots,
// shared by the ASH and process passes.
struct PerQuery {
  QuerySweep& sweep;
  const BackendMap& backends;
};

struct AshInputs {
  const QueryPath& path;
  // Count the rows of path.backend_pids; else every client backend's.
  bool use_pids = false;
  const WindowIndex& windows;
  Span span;
  const PerQuery* per_query = nullptr;  // null: host-wide attribution
};

// Pass 3: ASH rows (pg_activity_sample) of this run's backends, by poll
// time, into the windows and f's ASH counts. With per-query attribution a
// backend's row counts only while it served one of its queries; the process
// pass then drives this scan (run_until each row's tick) so that both share
// one sweep of the queries.
class AshScan {
 public:
  // `rows`: the span's pg_activity_sample rows by poll time (schema::AshRows,
  // with each poll's round trip when attributing per query: it bounds when
  // the backend was seen).
  AshScan(RowSource<schema::AshRow> rows, const AshInputs& in, std::vector<WindowAcc>& acc,
          Facts& f, Attribution& att);
  // Handles the rows polled before until_ns (INT64_MAX: all that are left).
  void run_until(std::int64_t until_ns);

 private:
  void handle();

  AshInputs in_;
  std::vector<WindowAcc>& acc_;
  Facts& f_;
  Attribution& att_;
  RowSource<schema::AshRow> rows_;
  schema::AshRow row_;
  bool pending_ = false;  // row_ is a row not yet handled
  bool done_ = false;
};

// ---- process_pass.cpp ----

struct ProcessInputs {
  const QueryPath& path;
  const WindowIndex& windows;
  Span span;
  std::int64_t clock_ticks_per_s = 0;  // RunRow::clock_ticks_per_s
  // single_thread: the length of the buckets a process's CPU is summed over.
  std::int64_t bucket_ns = 0;
  int stallscope_pid = 0;               // never a single_thread candidate
  const PerQuery* per_query = nullptr;  // null: host-wide attribution
  AshScan* ash = nullptr;               // per-query attribution: driven in step with the rows
};

// What the process pass reads: schema/sample_readers.h's and
// schema/run_reader.h's readers of the same names, bound by file_reads.cpp.
struct ProcessReads {
  RowSource<schema::SampleTime> sample_times;       // every tick, by sample_id
  std::int64_t max_process_id = 0;                  // schema::max_process_id
  Lookup<std::optional<int>, std::int64_t> pid_of;  // schema::ProcessLookup's, by process_id
  Lookup<std::optional<schema::ProcessName>, std::int64_t> name_of;
  Lookup<bool, std::int64_t> has_driver_thread_cpu;  // by process_id
  // process_sample rows from a sample_id on (schema::ProcessRows).
  Lookup<RowSource<schema::ProcessTick>, std::int64_t> process_rows;
  // A process's ss-driver/N thread rows from a sample_id on
  // (schema::DriverThreadRows): process_id, sample_id.
  Lookup<RowSource<schema::DriverThreadRow>, std::int64_t, std::int64_t> driver_thread_rows;
};

// Pass 4: process_sample rows (and the driver's ss-driver/N thread_sample
// rows), each delta spread over the span it covers, into the windows and
// f's process facts, single_thread candidates and top CPU users off the path.
void scan_processes(const ProcessReads& file, const ProcessInputs& in, std::vector<WindowAcc>& acc,
                    Facts& f, Attribution& att);

// ---- accounting.cpp ----

// Client + server (explain_pair): the driver's figures per window from the
// client file (ExplainOptions).
struct ClientDriver {
  const std::optional<std::vector<std::int64_t>>& cpu_ns;
  const std::optional<std::vector<std::int64_t>>& run_delay_ns;
};

struct WindowSums {
  WindowAcc total;                     // the whole run's accumulators
  std::vector<WindowSignals> signals;  // per window, for the stall rules
  std::int64_t perturbed_windows = 0;
  std::int64_t query_ns = 0;         // Σ the windows' query time
  std::int64_t schedule_lag_ns = 0;  // Σ their schedule lag
};

// Turns each window's accumulators into its figures (host shares, top wait
// event, perturbation, accounting) and f's per-window shares, and sums them.
WindowSums sum_windows(Report& report, std::vector<WindowAcc>& acc, Facts& f, int clients,
                       const ClientDriver& client_driver);

// What an accounting splits: the query time of `clients` over `wall_ns`.
struct QueryTime {
  int clients = 0;
  std::int64_t wall_ns = 0;
  std::int64_t query_ns = 0;         // Σ time queries were outstanding
  std::int64_t schedule_lag_ns = 0;  // of it, -R schedule lag
  bool apportion_lag = false;        // the rate was not kept (Accounting::lag_apportioned)
};
// Query time split into parts (Accounting in correlate.h). `pair`:
// explain_pair's server pass — parts are labelled by the host that measured
// them, and the driver's run delay is a part of its own.
Accounting make_accounting(const QueryTime& time, const WindowAcc& a, const Facts& f, bool pair);

// ---- host_accounting.cpp ----

// A file without queries or client sessions: the host's CPU time split into
// the busiest processes', the others', iowait, steal and idle (HostAccounting
// in correlate.h); nullopt without host CPU samples.
std::optional<HostAccounting> host_accounting(const Facts& f, int cores);

// ---- notes.cpp ----

struct NoteInputs {
  const Facts& facts;
  const QueryPath& path;
  std::int64_t perturbed_windows = 0;
  bool client_driver = false;  // explain_pair: the driver's figures come from the client file
};

// The notes on sampling limits and caveats, after the accounting.
void add_sampling_notes(const NoteInputs& in, Report& report);
// --max-tries: how many transactions were retried and how much of their
// latency went into the tries that failed (none when nothing was retried).
void add_retry_note(const schema::RetryTotals& retry, Report& report);
// The first note, when the run did not end as asked: cut short by a failed
// write of its file (status 'failed', end_reason "disk full at …" or "write
// failed at …"), or no end at all (killed, crashed, or still running).
// `analysed`: the span the figures cover; `kept_until_ns`: how far the
// file's rows reach (schema::kept_until_ns, read only for a run cut short
// by its file), the time kept as `run` and `record` stated it on stderr.
void add_run_end_note(const Span& analysed, std::optional<std::int64_t> kept_until_ns,
                      Report& report);
// Whether `run` was cut short by a failed write of its file: status
// 'failed', end_reason "disk full …" or "write failed …".
bool cut_short_by_its_file(const RunSummary& run);

// ---- stall_inputs.cpp ----

// The failed queries that lost their connection, looked up by time
// (schema::ConnectionErrors::between, schema::ConnectionLosses::overlapping).
struct ConnectionErrorLookups {
  Lookup<std::vector<schema::SqlstateCount>, std::int64_t, std::int64_t> errors_between;
  Lookup<std::vector<schema::ConnectionLoss>, std::int64_t, std::int64_t> losses_overlapping;
};
// Per window with errors, the queries that lost their connection and the
// most frequent such SQLSTATE, into signals.
void count_connection_errors(const ConnectionErrorLookups& lookups,
                             const std::vector<Window>& windows,
                             std::vector<WindowSignals>& signals);
// The lost connections and failed connect attempts over the span (all zero
// when there were none).
OutageFacts outage_facts(const ConnectionErrorLookups& lookups, Span span);
// find_stalls' blocker_query: "query (state)" of the latest ASH row of a
// pid at or before a time (schema::ActivityLookup::latest), "" when none.
std::function<std::string(int, std::int64_t)> blocker_queries(
    Lookup<std::optional<schema::LatestActivity>, int, std::int64_t> latest_activity);
// Sets Facts::top_cpu_query: the text (schema::query_text) of the query with
// the most on-CPU ASH rows (Facts::ash_cpu_query_rows) — server_cpu's
// culprit; else Facts::top_active_query, of the most active rows.
void name_top_cpu_query(const Lookup<std::optional<std::string>, std::int64_t>& query_text,
                        Facts& f);

}  // namespace stallscope::correlate::detail
