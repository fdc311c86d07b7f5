// The run as a whole: its `run` row, the tick periods of its samplers, the
// analysed span and the kind of windows explain cuts it into.
#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"
#include "common/units.h"
#include "correlate/format.h"
#include "correlate/passes.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {
namespace {

// add_span_note: below this share of the run's duration, the queries' span
// is noted.
constexpr double kSpanShareForNote = 0.9;

// Mean spacing of a tick table's rows, or 1/hz when there are fewer than 2.
std::int64_t tick_period_ns(const schema::TickRange& ticks, double hz) {
  if (ticks.rows >= 2) {
    auto period = (*ticks.last_ns - *ticks.first_ns) / (ticks.rows - 1);
    if (period > 0) return period;
  }
  return hz > 0 ? static_cast<std::int64_t>(common::kNsPerSDouble / hz) : common::kNsPerS;
}

// The pgbench_aggregate rows' totals (an imported aggregate log), if any.
std::optional<PgbenchAggregateSummary> pgbench_aggregate_summary(
    const std::optional<schema::AggregateTotals>& totals) {
  if (!totals) return std::nullopt;
  PgbenchAggregateSummary a;
  a.intervals = totals->intervals;
  a.transactions = totals->transactions;
  a.failures = totals->failures;
  a.skipped = totals->skipped;
  a.interval_ns = totals->span.interval_ns;
  a.start_ns = totals->span.start_ns;
  a.end_ns = totals->span.end_ns;
  a.tps = double(a.transactions) / (double(a.end_ns - a.start_ns) / common::kNsPerSDouble);
  if (a.transactions > 0) {
    a.latency_mean_ms =
        double(totals->latency_sum_ns) / double(a.transactions) / common::kNsPerMsDouble;
    if (totals->lag_sum_ns) {
      a.lag_mean_ms = double(*totals->lag_sum_ns) / double(a.transactions) / common::kNsPerMsDouble;
    }
  }
  if (totals->latency_min_ns) a.latency_min_ms = ms(*totals->latency_min_ns);
  if (totals->latency_max_ns) a.latency_max_ms = ms(*totals->latency_max_ns);
  return a;
}

// Notes on the queries' figures: most queries failed; a fixed rate (-R)
// that the clients could not keep.
void add_query_notes(Report& report) {
  const auto& r = report.run;
  if (r.queries > 0 && 2 * r.errors >= r.queries) {
    report.notes.push_back(fmt::format(
        "{} of {} queries failed: throughput and latency count only the {} that succeeded "
        "({}).",
        r.errors, r.queries, r.queries - r.errors, schema::kFailedQueriesRecipeSql));
  }
  if (r.unfinished > 0) {
    report.notes.push_back(fmt::format(
        "{} transaction{} still unanswered when the run ended, for up to {:.3f} s (cut short: "
        "the driver cancelled {} after the end): not counted in throughput or latency, but "
        "their time in flight is query time and the analysed span runs to it, so a stall "
        "that lasted to the end is seen (SELECT * FROM query_unfinished).",
        r.unfinished, r.unfinished == 1 ? " was" : "s were",
        double(r.unfinished_max_ns) / common::kNsPerSDouble, r.unfinished == 1 ? "it" : "them"));
  }
  if (rate_not_kept(r) && r.latency_mean_ms && *r.latency_mean_ms > 0) {
    const double gap_ms = double(r.clients.value_or(1)) / *r.tps * common::kMsPerSDouble;
    report.notes.push_back(fmt::format(
        "The fixed rate (-R) was not kept: the mean schedule lag, {:.3f} ms (max {:.3f} ms), is "
        "{:.0f} % of a client's mean gap between transactions ({:.3f} ms) and {:.0f} % of the "
        "mean latency, {:.3f} ms, which counts from the scheduled start. The clients could not "
        "send as fast as scheduled; tps {:.1f} is what was served.",
        *r.lag_mean_ms, r.lag_max_ms.value_or(0), 100.0 * *r.lag_mean_ms / gap_ms, gap_ms,
        100.0 * *r.lag_mean_ms / *r.latency_mean_ms, *r.latency_mean_ms, r.tps.value_or(0)));
  }
}

// A run that drove much longer than its queries span (a slow -R schedule,
// clients that stopped early): tps is over the queries' span, so the note
// gives it over the run's duration too.
void add_span_note(Report& report) {
  const auto& r = report.run;
  if (r.mode != to_string(schema::RunMode::run) || !r.duration_ns || !r.query_start_ns ||
      *r.duration_ns <= 0) {
    return;
  }
  const std::int64_t span_ns = *r.query_end_ns - *r.query_start_ns;
  if (double(span_ns) >= kSpanShareForNote * double(*r.duration_ns)) return;
  const double run_s = double(*r.duration_ns) / common::kNsPerSDouble;
  report.notes.push_back(fmt::format(
      "The queries span {:.2f} s of the run's {:.2f} s (a slow -R schedule, or clients that "
      "stopped early): tps {:.1f} is over the queries' span; over the run it is {:.2f}.",
      double(span_ns) / common::kNsPerSDouble, run_s, r.tps.value_or(0),
      double(r.queries - r.errors) / run_s));
}

// The analysed span: first query sent → last answered (or cut short at the
// end); without queries the
// samples' span (its last tick included), else the run's.
Span analysed_span(const schema::TickRange& samples, const RunSummary& run, bool has_queries) {
  Span span;
  if (has_queries) {
    span = {*run.query_start_ns, *run.query_end_ns};
  } else if (samples.first_ns) {
    span = {*samples.first_ns, *samples.last_ns + 1};  // include the last tick
  } else {
    span = {run.start_ns, run.end_ns.value_or(run.start_ns)};
  }
  span.end_ns = std::max(span.end_ns, span.start_ns + 1);
  return span;
}

}  // namespace

RunRow run_row(schema::RunRow row_in) {
  auto* row = &row_in;
  RunRow r;
  auto& s = r.summary;
  s.host = std::move(row->host);
  s.kernel = std::move(row->kernel);
  s.cores = row->cores;
  r.imported = schema::parse_run_mode(row->mode) == schema::RunMode::import_pgbench;
  s.mode = std::move(row->mode);
  s.status = std::move(row->status);
  s.start_ns = row->start_ns;
  s.end_ns = row->end_ns;
  if (s.end_ns) s.duration_ns = *s.end_ns - s.start_ns;
  s.clients = row->clients;
  s.threads = row->threads;
  s.protocol = std::move(row->protocol);
  s.sql = std::move(row->sql);
  s.server_version = std::move(row->server_version);
  s.end_reason = std::move(row->end_reason);
  s.hz = row->hz;
  s.rate_tps = row->rate_tps;
  s.machine_id = std::move(row->machine_id);
  s.boot_id = std::move(row->boot_id);
  r.stallscope_pid = row->stallscope_pid;
  r.stallscope_start_ticks = row->stallscope_start_ticks;
  r.clock_ticks_per_s = row->clock_ticks_per_s;
  return r;
}

Facts run_facts(const RunFactsInputs& in, const ExplainOptions& options, Report& report) {
  Facts f;
  // Transactions cut short at the end count: a run whose every transaction
  // hung still has query time.
  f.has_queries =
      report.run.queries > 0 || report.run.unfinished > 0 || report.run.connect_failures > 0;
  add_query_notes(report);
  add_span_note(report);
  report.pgbench_aggregate = pgbench_aggregate_summary(in.aggregate);
  if (report.pgbench_aggregate && !f.has_queries) {
    report.notes.push_back(
        "Throughput and latency come from imported pgbench aggregate intervals: no "
        "percentiles, windows of queries or per-query attribution (they need a "
        "per-transaction log, pgbench -l without --aggregate-interval).");
  }
  f.cores = report.run.cores;
  f.threads = report.run.threads.value_or(1);
  const auto& samples = in.sample_ticks;
  f.ash_period_ns = tick_period_ns(in.ash_ticks, report.run.hz);
  f.sample_period_ns = tick_period_ns(samples, report.run.hz);
  f.ash_available = in.has_ash_rows;
  if (f.ash_available) report.ash_period_ns = f.ash_period_ns;
  f.span = analysed_span(samples, report.run, f.has_queries);
  const auto min_gap_ns =
      std::max(kSamplerGapMinPeriods * in.median_sample_interval_ns.value_or(f.sample_period_ns),
               kSamplerGapMinNs);
  for (const auto& g : in.sample_gaps(min_gap_ns)) {
    const Span gap{std::max(g.start_ns, f.span.start_ns), std::min(g.end_ns, f.span.end_ns)};
    if (gap.duration_ns() <= 0) continue;
    f.sampler_gaps.push_back(gap);
    f.sampler_gap_ns += gap.duration_ns();
  }
  add_run_end_note(f.span, cut_short_by_its_file(report.run) ? in.kept_until_ns() : std::nullopt,
                   report);  // notes.cpp

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
