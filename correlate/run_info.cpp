// The run as a whole: its `run` row, the tick periods of its samplers, the
// analysed span and the kind of windows explain cuts it into.
#include <algorithm>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/units.h"
#include "correlate/passes.h"
#include "schema/store.h"

namespace stallscope::correlate::detail {
namespace {

std::optional<std::int64_t> opt_int64(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  return c.getInt64();
}
std::optional<int> opt_int(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  return c.getInt();
}
std::optional<std::string> opt_string(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  return c.getString();
}

double ms(std::int64_t ns) {
  return double(ns) / common::kNsPerMsDouble;
}

// Mean spacing of rows in a tick table, or 1/hz when there are fewer than 2.
std::int64_t tick_period_ns(SQLite::Database& db, const char* table, double hz) {
  SQLite::Statement st(db,
                       fmt::format("SELECT count(*), min(time_ns), max(time_ns) FROM {}", table));
  st.executeStep();
  auto n = st.getColumn(0).getInt64();
  if (n >= 2) {
    auto period = (st.getColumn(2).getInt64() - st.getColumn(1).getInt64()) / (n - 1);
    if (period > 0) return period;
  }
  return hz > 0 ? static_cast<std::int64_t>(common::kNsPerSDouble / hz) : common::kNsPerS;
}

// The pgbench_aggregate rows' totals (an imported aggregate log), if any.
std::optional<PgbenchAggregateSummary> read_pgbench_aggregate(SQLite::Database& db) {
  const auto span = schema::pgbench_aggregate_span(db);
  if (!span) return std::nullopt;
  SQLite::Statement st(db,
                       "SELECT count(*), sum(transactions), sum(coalesce(serialization_failures, "
                       "0) + coalesce(deadlock_failures, 0)), sum(coalesce(skipped, 0)), "
                       "sum(latency_sum_ns), min(latency_min_ns), max(latency_max_ns), "
                       "sum(lag_sum_ns) FROM pgbench_aggregate");
  st.executeStep();
  PgbenchAggregateSummary a;
  a.intervals = st.getColumn(0).getInt64();
  a.transactions = st.getColumn(1).getInt64();
  a.failures = st.getColumn(2).getInt64();
  a.skipped = st.getColumn(3).getInt64();
  a.interval_ns = span->interval_ns;
  a.start_ns = span->start_ns;
  a.end_ns = span->end_ns;
  a.tps = double(a.transactions) / (double(a.end_ns - a.start_ns) / common::kNsPerSDouble);
  if (a.transactions > 0) {
    a.latency_mean_ms =
        double(st.getColumn(4).getInt64()) / double(a.transactions) / common::kNsPerMsDouble;
    if (!st.getColumn(7).isNull()) {
      a.lag_mean_ms =
          double(st.getColumn(7).getInt64()) / double(a.transactions) / common::kNsPerMsDouble;
    }
  }
  if (!st.getColumn(5).isNull()) a.latency_min_ms = ms(st.getColumn(5).getInt64());
  if (!st.getColumn(6).isNull()) a.latency_max_ms = ms(st.getColumn(6).getInt64());
  return a;
}

// Notes on the queries' figures: most queries failed; a fixed rate (-R)
// that the clients could not keep.
void add_query_notes(Report& report) {
  const auto& r = report.run;
  if (r.queries > 0 && 2 * r.errors >= r.queries) {
    report.notes.push_back(fmt::format(
        "{} of {} queries failed: throughput and latency count only the {} that succeeded "
        "(SELECT sqlstate, count(*), min(error) FROM query_error GROUP BY 1).",
        r.errors, r.queries, r.queries - r.errors));
  }
  if (r.lag_mean_ms && r.latency_mean_ms && *r.latency_mean_ms > 0 &&
      *r.lag_mean_ms >= 0.5 * *r.latency_mean_ms) {
    report.notes.push_back(fmt::format(
        "The fixed rate (-R) was not kept: the mean schedule lag, {:.3f} ms (max {:.3f} ms), is "
        "{:.0f} % of the mean latency, {:.3f} ms, which counts from the scheduled start. The "
        "clients could not send as fast as scheduled; tps {:.1f} is what was served.",
        *r.lag_mean_ms, r.lag_max_ms.value_or(0), 100.0 * *r.lag_mean_ms / *r.latency_mean_ms,
        *r.latency_mean_ms, r.tps.value_or(0)));
  }
}

// The analysed span: first query sent → last answered; without queries the
// samples' span (its last tick included), else the run's.
Span analysed_span(SQLite::Database& db, const RunSummary& run, bool has_queries) {
  Span span;
  if (has_queries) {
    span = {*run.query_start_ns, *run.query_end_ns};
  } else {
    SQLite::Statement st(db, "SELECT min(time_ns), max(time_ns) FROM sample");
    st.executeStep();
    if (!st.getColumn(0).isNull()) {
      span = {st.getColumn(0).getInt64(), st.getColumn(1).getInt64() + 1};
    } else {
      span = {run.start_ns, run.end_ns.value_or(run.start_ns)};
    }
  }
  span.end_ns = std::max(span.end_ns, span.start_ns + 1);
  return span;
}

}  // namespace

RunRow read_run(SQLite::Database& db) {
  SQLite::Statement st(db,
                       "SELECT host, kernel, cores, mode, status, start_ns, end_ns, clients, "
                       "threads, protocol, sql, server_version, end_reason, hz, stallscope_pid, "
                       "stallscope_start_ticks FROM run WHERE run_id = 1");
  if (!st.executeStep())
    throw_usage(fmt::format("cannot explain {}: it holds no run", db.getFilename()));
  RunRow r;
  auto& s = r.summary;
  s.host = st.getColumn(0).getString();
  s.kernel = st.getColumn(1).getString();
  s.cores = st.getColumn(2).getInt();
  s.mode = st.getColumn(3).getString();
  s.status = st.getColumn(4).getString();
  s.start_ns = st.getColumn(5).getInt64();
  s.end_ns = opt_int64(st.getColumn(6));
  if (s.end_ns) s.duration_ns = *s.end_ns - s.start_ns;
  s.clients = opt_int(st.getColumn(7));
  s.threads = opt_int(st.getColumn(8));
  s.protocol = opt_string(st.getColumn(9));
  s.sql = opt_string(st.getColumn(10));
  s.server_version = opt_string(st.getColumn(11));
  s.end_reason = opt_string(st.getColumn(12));
  s.hz = st.getColumn(13).getDouble();
  r.stallscope_pid = st.getColumn(14).getInt();
  r.stallscope_start_ticks = opt_int64(st.getColumn(15));
  return r;
}

Facts read_run_facts(SQLite::Database& db, const ExplainOptions& options, Report& report) {
  Facts f;
  f.has_queries = report.run.queries > 0;
  add_query_notes(report);
  report.pgbench_aggregate = read_pgbench_aggregate(db);
  if (report.pgbench_aggregate && !f.has_queries) {
    report.notes.push_back(
        "Throughput and latency come from imported pgbench aggregate intervals: no "
        "percentiles, windows of queries or per-query attribution (they need a "
        "per-transaction log, pgbench -l without --aggregate-interval).");
  }
  f.cores = report.run.cores;
  f.threads = report.run.threads.value_or(1);
  f.ash_period_ns = tick_period_ns(db, "ash_tick", report.run.hz);
  f.sample_period_ns = tick_period_ns(db, "sample", report.run.hz);
  f.ash_available = db.execAndGet("SELECT count(*) FROM ash_tick").getInt64() > 0 ||
                    db.execAndGet("SELECT count(*) FROM pg_activity_sample").getInt64() > 0;
  if (f.ash_available) report.ash_period_ns = f.ash_period_ns;
  const auto span = analysed_span(db, report.run, f.has_queries);
  f.span_start_ns = span.start_ns;
  f.span_end_ns = span.end_ns;

  report.query_windows = options.every_queries.has_value() && f.has_queries;
  if (report.query_windows) {
    report.every_queries = options.every_queries;
  } else {
    report.window_ns = options.window_ns;
  }
  if (options.every_queries && !f.has_queries) {
    report.notes.push_back(
        "--every needs queries and this file has none: windows are by time instead.");
  }
  return f;
}

}  // namespace stallscope::correlate::detail
