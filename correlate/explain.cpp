// explain: reads a run file in a few streaming passes (queries by start time,
// host samples, ASH rows, process rows), each attributed to windows, then
// sums the windows into the whole-run accounting and hands the facts to the
// finding and stall rules. Each pass lives in its own file (passes.h).
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "common/error.h"
#include "common/units.h"
#include "correlate/correlate.h"
#include "correlate/file_reads.h"
#include "correlate/kernel_sleep.h"
#include "correlate/lock_chains.h"
#include "correlate/network.h"
#include "correlate/passes.h"
#include "correlate/pg_stats_facts.h"
#include "correlate/sessions.h"
#include "schema/pg_stats_readers.h"
#include "schema/store.h"
#include "schema/tcp_readers.h"

namespace stallscope::correlate {
namespace {

using namespace detail;

// STALLSCOPE_EXPLAIN_TIMING=1: each pass's wall time on stderr (for
// tools/bench correlate; never part of the report).
class PassClock {
 public:
  PassClock() : on_(std::getenv("STALLSCOPE_EXPLAIN_TIMING") != nullptr) {}
  void lap(const char* pass) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const auto cpu = std::clock();
    fmt::print(stderr, "explain pass {:<22} wall {:7.3f} s  cpu {:7.3f} s\n", pass,
               std::chrono::duration<double>(now - last_).count(),
               double(cpu - last_cpu_) / CLOCKS_PER_SEC);
    last_ = now;
    last_cpu_ = cpu;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::clock_t last_cpu_ = std::clock();
};

void check_options(const ExplainOptions& options) {
  if (options.window_ns <= 0) throw_usage("cannot explain: --window must be positive");
  if (options.every_queries && *options.every_queries <= 0) {
    throw_usage("cannot explain: --every must be a positive number of queries");
  }
}

struct SamplePassInputs {
  schema::Store& store;
  const RunRow& run;
  const ExplainOptions& options;
  const QueryPath& path_processes;
  const WindowIndex& windows;
  const BackendMap* backends;  // with queries
};

// The ASH pass and the process pass. With per-query attribution they share
// one sweep of the queries and run interleaved in time (the process pass
// drives the ASH scan); without, one after the other.
void sample_passes(const SamplePassInputs& in, Report& report, std::vector<WindowAcc>& acc,
                   Facts& f, Attribution& att, PassClock& clock) {
  const auto& qp = in.path_processes;
  const Span span = f.span;
  const bool per_query = att.method == AttributionMethod::per_query;
  // The query sweep reads through a connection of its own on the file's
  // path, on another core (an in-memory store: on its own connection).
  std::optional<schema::QuerySendScan> sends_here;
  std::optional<schema::QuerySendBatches> sends_beside;
  std::optional<QuerySweep> sweep;
  std::optional<PerQuery> pq;
  if (per_query) {
    const auto until_ns =
        report.run.queries_until_ns.value_or(std::numeric_limits<std::int64_t>::max());
    const auto& path = in.store.path();
    RowSource<schema::QuerySend> sends;
    if (path.empty() || path == ":memory:") {
      sends = rows_from<schema::QuerySend>(sends_here.emplace(in.store, until_ns));
    } else {
      sends = rows_from<schema::QuerySend>(sends_beside.emplace(path, until_ns));
    }
    sweep.emplace(std::move(sends), *in.backends);
    pq.emplace(PerQuery{*sweep, *in.backends});
  }
  const PerQuery* pq_ptr = pq ? &*pq : nullptr;
  schema::AshRows ash_rows(in.store, span.start_ns, span.end_ns, per_query);
  AshScan ash(rows_from<schema::AshRow>(ash_rows),
              AshInputs{qp, !qp.backend_pids.empty(), in.windows, span, pq_ptr}, acc, f, att);
  if (!sweep) ash.run_until(INT64_MAX);
  clock.lap("ash");
  const ProcessInputs processes{
      .path = qp,
      .windows = in.windows,
      .span = span,
      .clock_ticks_per_s = in.run.clock_ticks_per_s,
      .bucket_ns = report.query_windows ? common::kNsPerS : in.options.window_ns,
      .stallscope_pid = in.run.stallscope_pid,
      .per_query = pq_ptr,
      .ash = sweep ? &ash : nullptr,
  };
  scan_processes(process_reads(in.store), processes, acc, f, att);
  if (sweep) {
    ash.run_until(INT64_MAX);
    sweep->finish();
    att.joined_queries = sweep->joined();
  }
  if (f.has_queries) report.attribution = att;
  clock.lap(per_query ? "ash + processes" : "processes");
}

// The facts gathered outside the passes (facts_path.cpp, facts_pooler.cpp),
// and the pooler's wait per window.
void path_facts(schema::Store& store, const QueryPath& qp, Report& report,
                std::vector<WindowAcc>& acc, Facts& f) {
  const Span span = f.span;
  add_host_memory(schema::host_memory_totals(store, span.start_ns, span.end_ns), f.memory);
  if (auto ticks = schema::sample_ids_in(store, span.start_ns, span.end_ns);
      ticks && qp.driver_process_id) {
    schema::DriverThreadStateScan threads(store, *qp.driver_process_id, ticks->first, ticks->last);
    add_driver_thread_rows(rows_from<schema::ThreadState>(threads), f);
  }
  if (f.has_queries) {
    ConnectionInputs connections{.opened = schema::connects_in(store, span.start_ns, span.end_ns)};
    if (connections.opened.connections > 0) {
      connections.first_query_gap_ns =
          schema::mean_first_query_gap_ns(store, span.start_ns, span.end_ns);
      connections.backends =
          schema::connection_backends(store, span.start_ns, span.end_ns, kBackendStartSlackNs);
    }
    f.connections = connection_facts(connections);
  }
  const auto conninfo = schema::run_conninfo(store);
  {
    const auto until_ns = span.end_ns + kPoolerSlackNs;
    schema::PoolerSampleScan pooler_rows(store, span.start_ns, until_ns);
    add_pooler_facts({.windows = report.windows,
                      .span = span,
                      .databases = schema::pooler_databases(store, span.start_ns, until_ns),
                      .run_conninfo = conninfo,
                      .rows = rows_from<schema::PoolerSample>(pooler_rows)},
                     f, report.notes);
  }
  f.network = network_facts(schema::tcp_rtt_in(store, span.start_ns, span.end_ns),
                            schema::tcp_stack_totals(store, span.start_ns, span.end_ns), conninfo);
  f.pg_stats = pg_stats_facts({
      .settings = schema::pg_settings(store),
      .counters = schema::pg_stats_counters(store, span.start_ns, span.end_ns),
      .replication = schema::pg_replication_rows(store, span.start_ns, span.end_ns),
      .statements = schema::pg_statement_deltas(store),
  });
  for (std::size_t i = 0; i < acc.size(); ++i) acc[i].path_wait_ns = f.pooler.window_wait_ns[i];
}

// The accounting: of the queries' time (a run, an imported log), of the
// client sessions' (a record --pg file), else of the host's CPU time.
void account(Report& report, const WindowSums& sums, const Facts& f, int clients, bool pair,
             std::optional<SessionScan>& sessions) {
  if (f.has_queries) {
    report.accounting = make_accounting({clients, f.span.duration_ns(), sums.query_ns,
                                         sums.schedule_lag_ns, rate_not_kept(report.run)},
                                        sums.total, f, pair);
  } else if (sessions) {
    report.accounting = session_accounting(*sessions, sums.total, f);
    report.sessions = std::move(sessions->view);
    if (const auto n = report.sessions->idle_pooled_sessions; n > 0) {
      report.notes.push_back(fmt::format(
          "{} server connection{} of {} {} idle at every poll, {} backend using no CPU (the "
          "pool's spare connections, or ones left from an earlier run): left out of the "
          "application's sessions.",
          n, n == 1 ? "" : "s", report.sessions->idle_pooler, n == 1 ? "was" : "were",
          n == 1 ? "its" : "their"));
    }
  } else {
    report.host_accounting = host_accounting(f, report.run.cores);
  }
}

// The errors' and outage's facts, the findings and the verdict, then the
// stalls and the roots of the lock chains behind lock_wait.
void findings_and_stalls(schema::Store& store, const QueryPath& qp, WindowSums& sums, Facts& f,
                         Report& report) {
  const auto lost = connection_error_lookups(store);
  if (report.accounting && report.accounting->connection_lost_ns > 0)
    f.outage = outage_facts(lost, f.span);
  if (report.run.errors > 0)
    f.errors = error_facts(schema::query_errors_by_sqlstate(store, kErrorCodesNamed));
  add_retry_note(schema::read_retry_totals(store), report);
  account_driver_stop(report, f);  // stopped.cpp
  report.findings = find(report, f);
  report.verdict = decide_verdict(report, f);
  count_connection_errors(lost, report.windows, sums.signals);
  report.stalls = find_stalls(report, sums.signals, blocker_queries(latest_activity(store)));
  name_replication_stalls(f, report.stalls);
  name_lock_roots(
      lock_chain_lookups(store), report,
      qp.backend_pids.empty() ? std::function<bool(int)>()
                              : [&qp](int pid) { return qp.backend_pids.contains(pid); });
}

// The passes in order; each is a function of its own file (passes.h).
Report explain_once(schema::Store& store, const ExplainOptions& options) {
  try {
    Report report;
    PassClock clock;
    // The run row, then the queries: the run's figures and the windows' queries.
    const auto run = read_run_row(store);
    report.run = run.summary;
    const auto query_clients = scan_queries(query_reads(store, report.run), options, report);
    clock.lap("queries");
    // The run's facts and the analysed span.
    Facts f = run_facts(run_facts_inputs(store), options, report);
    const Span span = f.span;
    clock.lap("periods, span");
    // The query path, and how queries are tied to its backends.
    const bool pair = options.client_driver_cpu_ns.has_value();
    auto qp = find_query_path(process_lookups(store), {run, options, span, f.has_queries, pair},
                              report.notes);
    report.pgbench = qp.pgbench;
    // A record --pg file: its client sessions, their backends on the path.
    std::optional<SessionScan> sessions;
    if (!f.has_queries && !pair && f.ash_available) {
      sessions = session_view(session_reads(store), {run, span, f.ash_period_ns});
      if (sessions) add_session_backends(*sessions, qp);
    }
    Attribution att;
    std::optional<BackendMap> backends;
    if (f.has_queries) {
      schema::ClientBackendScan clients(store);
      backends.emplace(rows_from<schema::ClientBackend>(clients),
                       [&store] { return schema::queries_name_connections(store); });
      att = choose_attribution(run, report.run.queries, qp, *backends);
    }
    f.backends_on_host = !qp.backend_process_ids.empty();
    clock.lap("query path");
    add_cgroups(cgroup_inputs(store, span), qp, f);
    for (auto id : schema::checkpointer_processes(store)) qp.checkpointer_ids.insert(id);
    const auto wi = finish_windows(options, report, span);
    if (report.pgbench_aggregate && !f.has_queries)
      fill_windows_from_aggregates(schema::pgbench_aggregate_intervals(store), report);
    clock.lap("cgroups, checkpointer");
    // The sample passes: host, ASH, processes.
    std::vector<WindowAcc> acc(report.windows.size());
    {
      schema::HostTicks ticks(store, span.start_ns, span.end_ns);
      add_host_ticks(rows_from<schema::HostTick>(ticks), wi, acc);
      schema::AshPolls polls(store, span.start_ns - kAshCoverageLookBackNs, span.end_ns);
      add_ash_coverage(rows_from<schema::AshPoll>(polls), wi, span, report.run.hz, acc, f);
    }
    if (f.ash_available) report.ash_period_ns = f.ash_period_ns;
    clock.lap("host samples");
    sample_passes({store, run, options, qp, wi, backends ? &*backends : nullptr}, report, acc, f,
                  att, clock);
    path_facts(store, qp, report, acc, f);
    name_top_cpu_query([&store](std::int64_t id) { return schema::query_text(store, id); }, f);
    if (sessions) remove_client_processes(*sessions, f);
    // Accounting: per window, then the whole run.
    const int clients = report.run.clients.value_or(static_cast<int>(query_clients));
    auto sums = sum_windows(report, acc, f, clients,
                            {options.client_driver_cpu_ns, options.client_driver_run_delay_ns});
    f.host = sums.total.host;
    if (report.pgbench && report.pgbench->pid) {
      // pgbench's measured figures, before the accounting trims its parts.
      report.pgbench->cpu_ns = sums.total.driver_cpu_ns;
      report.pgbench->run_delay_ns = sums.total.driver_run_delay_ns;
    }
    account(report, sums, f, clients, pair, sessions);
    // Notes, findings, stalls.
    add_sampling_notes({f, qp, sums.perturbed_windows, options.client_driver_cpu_ns.has_value()},
                       report);
    clock.lap("path facts, windows");
    findings_and_stalls(store, qp, sums, f, report);
    clock.lap("findings, stalls");
    return report;
  } catch (const schema::SqliteError& e) {
    throw detail::read_error(store.path(), e);
  }
}

}  // namespace

Report explain(schema::Store& store, const ExplainOptions& options) {
  check_options(options);
  try {
    return explain_once(store, options);
  } catch (const detail::TooManyWindows& e) {
    if (options.window_chosen) throw;
    // The default window is too fine for this span (a log whose intervals
    // lie decades apart): the same explain with longer windows.
    ExplainOptions wider = options;
    wider.window_ns = detail::window_to_fit(e.window_ns, e.count, detail::kWidenedWindows);
    wider.window_chosen = true;
    Report report = explain_once(store, wider);
    report.notes.push_back(detail::widened_window_note(options.window_ns, wider.window_ns,
                                                       double(e.window_ns) * double(e.count)));
    return report;
  }
}

std::string detail::widened_window_note(std::int64_t default_ns, std::int64_t window_ns,
                                        double span_ns) {
  return fmt::format(
      "Windows of {:g} s instead of the default {:g} s: the run spans {:.0f} days, more than {} "
      "windows of {:g} s; windows of {:g} s give at most {} (--window chooses the length).",
      double(window_ns) / common::kNsPerSDouble, double(default_ns) / common::kNsPerSDouble,
      double(span_ns) / (86400 * common::kNsPerSDouble), kMaxWindows,
      double(default_ns) / common::kNsPerSDouble, double(window_ns) / common::kNsPerSDouble,
      kWidenedWindows);
}

Error detail::read_error(const std::string& path, const Error& e) {
  // Bad input (exit 2): a damaged file, or one without a table or column
  // every run file of a readable schema version has (dropped by hand, or a
  // file stallscope did not write). Optional tables are looked up first
  // (schema/row.h table_exists) and never reach here.
  if (schema::is_damaged(e)) {
    return Error(ErrorKind::usage,
                 fmt::format("cannot read {}: the file is damaged ({})", path, e.what()), e.code());
  }
  if (const auto missing = schema::missing_schema_object(e)) {
    return Error(ErrorKind::usage,
                 fmt::format("cannot read {}: it has no {} (dropped, or not written by stallscope)",
                             path, *missing),
                 e.code());
  }
  return Error(ErrorKind::sqlite, fmt::format("cannot read {}: {}", path, e.what()), e.code());
}

}  // namespace stallscope::correlate
