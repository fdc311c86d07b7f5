// explain_pair: a client run file with a server record file.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "common/error.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"
#include "schema/records.h"
#include "schema/server_file.h"

namespace stallscope::correlate {
namespace {

using detail::Span;

using Estimate = schema::ClockOffset;

// Server times from which estimate i (i ≥ 1) is the nearest: half way between
// estimates i − 1 and i on the client clock, moved to the server's clock.
std::vector<std::int64_t> boundaries(const std::vector<Estimate>& e) {
  std::vector<std::int64_t> m;
  for (std::size_t i = 1; i < e.size(); ++i) {
    m.push_back(e[i - 1].time_ns / 2 + e[i].time_ns / 2 + e[i - 1].offset_ns);
  }
  return m;
}

// A server time on the client's clock (no estimates: unchanged).
std::int64_t to_client_ns(const std::vector<Estimate>& e, std::int64_t server_ns) {
  if (e.empty()) return server_ns;
  const auto m = boundaries(e);
  std::size_t i = 0;
  while (i < m.size() && server_ns >= m[i]) ++i;
  return server_ns - e[i].offset_ns;
}

// The same mapping for the server file's views.
schema::ClockShift clock_shift(const std::vector<Estimate>& e) {
  schema::ClockShift shift;
  if (e.size() > 1) shift.boundaries_ns = boundaries(e);
  for (const auto& x : e) shift.offsets_ns.push_back(x.offset_ns);
  return shift;
}

// Mean of the windows' host shares, over windows that have them.
HostSummary summarise(const Report& r, std::string role) {
  HostSummary h{std::move(role), r.run.host, r.run.cores, std::nullopt, std::nullopt, std::nullopt};
  double busy = 0, iowait = 0, steal = 0, weight = 0;
  for (const auto& w : r.windows) {
    if (!w.cpu_busy_pct) continue;
    const double d = double(w.end_ns - w.start_ns);
    busy += *w.cpu_busy_pct * d;
    iowait += w.cpu_iowait_pct.value_or(0) * d;
    steal += w.cpu_steal_pct.value_or(0) * d;
    weight += d;
  }
  if (weight > 0) {
    h.cpu_busy_pct = busy / weight;
    h.cpu_iowait_pct = iowait / weight;
    h.cpu_steal_pct = steal / weight;
  }
  return h;
}

// The poolers on a run's query path (its path_cpu parts), "" without one.
std::string pooler_of(const Report& r) {
  if (!r.accounting || r.accounting->path_cpu_by_comm_ns.empty()) return "";
  return r.accounting->path_cpu_by_comm_ns.front().first;
}

RunComparison::Side side_of(const Report& r, const std::string& path) {
  RunComparison::Side s;
  s.path = path;
  s.queries = r.run.queries;
  s.clients = r.run.clients;
  s.tps = r.run.tps;
  s.latency_mean_ms = r.run.latency_mean_ms;
  s.latency_p99_ms = r.run.latency_p99_ms;
  const auto pooler = pooler_of(r);
  s.label = pooler.empty() ? "direct" : "through " + pooler;
  return s;
}

// How server times were moved to the client's clock, as reported: the
// estimate nearest the middle of the queries and the range of all offsets.
ClockAlignment align_clock(const std::vector<Estimate>& estimates, const Span& queries) {
  ClockAlignment clock;
  clock.estimates = static_cast<std::int64_t>(estimates.size());
  if (!estimates.empty()) {
    const auto middle = queries.start_ns / 2 + queries.end_ns / 2;
    const auto nearest = std::min_element(
        estimates.begin(), estimates.end(), [&](const Estimate& x, const Estimate& y) {
          return std::abs(x.time_ns - middle) < std::abs(y.time_ns - middle);
        });
    clock.offset_ns = nearest->offset_ns;
    clock.uncertainty_ns = nearest->uncertainty_ns;
    const auto [lo, hi] = std::minmax_element(
        estimates.begin(), estimates.end(),
        [](const Estimate& x, const Estimate& y) { return x.offset_ns < y.offset_ns; });
    clock.offset_min_ns = lo->offset_ns;
    clock.offset_max_ns = hi->offset_ns;
  }
  return clock;
}

// Pass 2's options: the same windows, with the client's driver CPU and run
// delay per window from pass 1.
ExplainOptions with_client_driver(const ExplainOptions& options, const Report& client_side) {
  ExplainOptions o = options;
  std::vector<std::int64_t> driver, driver_delay;
  for (const auto& w : client_side.windows) {
    driver.push_back(w.accounting ? w.accounting->driver_cpu_ns : 0);
    driver_delay.push_back(w.accounting ? w.accounting->driver_run_delay_ns : 0);
  }
  o.client_driver_cpu_ns = std::move(driver);
  o.client_driver_run_delay_ns = std::move(driver_delay);
  return o;
}

// An imported pgbench log's pass 2: its file holds no samples, so no driver
// figures come from it (set but empty); pgbench is looked for among the
// server file's processes instead (find_pgbench).
ExplainOptions with_driver_in_server_file(const ExplainOptions& options) {
  ExplainOptions o = options;
  o.client_driver_cpu_ns.emplace();
  o.client_driver_run_delay_ns.emplace();
  return o;
}

// The first note of an imported pgbench log explained with a record file:
// which file gave what, and the clocks.
std::string imported_note(const Report& r, const std::string& log_path,
                          const std::string& server_path, const std::string& server_host) {
  const bool found = r.pgbench && r.pgbench->pid;
  return fmt::format(
      "Imported pgbench log + record file: the transactions from {} (pgbench's log, no samples), "
      "{}host, process and ASH figures from {} (host {}). {}",
      log_path, found ? "pgbench's CPU and its backends', " : "the backends', ", server_path,
      server_host,
      found ? "pgbench ran on the host the record file sampled, so the log's times and the "
              "samples are on one clock: no shift is needed, and none is applied."
            : "The log holds no clock-offset estimate: its times are used unshifted (pgbench's "
              "host and the record file's are assumed to share one clock).");
}

}  // namespace

RunComparison compare_runs(const Report& run, const std::string& run_path, const Report& baseline,
                           const std::string& baseline_path) {
  RunComparison c;
  c.run = side_of(run, run_path);
  c.baseline = side_of(baseline, baseline_path);
  if (c.run.label == c.baseline.label) {
    c.run.label = run_path;
    c.baseline.label = baseline_path;
  }
  if (c.run.tps && c.baseline.tps && *c.baseline.tps > 0) {
    c.tps_ratio = *c.run.tps / *c.baseline.tps;
    c.tps_change_pct = (*c.tps_ratio - 1) * 100;
  }
  auto tps = [](const std::optional<double>& v) {
    return v ? detail::grouped_text(*v) + " tps" : std::string("no tps");
  };
  c.summary = fmt::format("{}: {} vs {} {}", c.run.label, tps(c.run.tps), tps(c.baseline.tps),
                          c.baseline.label);
  if (c.tps_change_pct) c.summary += fmt::format(" ({:+.0f}%)", *c.tps_change_pct);
  return c;
}

void add_baseline_notes(Report& report, const std::string& run_path, const Report& baseline,
                        const std::string& baseline_path) {
  std::error_code ec;
  if (std::filesystem::equivalent(run_path, baseline_path, ec)) {
    report.notes.push_back(fmt::format(
        "The baseline {} is the same file as the run {}: the comparison compares the run with "
        "itself.",
        baseline_path, run_path));
  }
  const RunSummary& b = baseline.run;
  if (!b.end_ns && b.mode != to_string(schema::RunMode::import_pgbench)) {
    report.notes.push_back(fmt::format(
        "The baseline {} did not end: its status is still '{}' and it has no end time (its "
        "recorder was killed or crashed, or is still writing); its figures cover what it "
        "committed.",
        baseline_path, b.status));
  } else if (b.status == "interrupted" || b.status == "failed") {
    report.notes.push_back(fmt::format("The baseline {} was {}{}: its figures cover that much.",
                                       baseline_path, b.status,
                                       b.end_reason ? fmt::format(" ({})", *b.end_reason) : ""));
  }
}

ServerFileView::ServerFileView(schema::Store& client, const std::string& server_path) {
  try {
    attached_ = std::make_unique<schema::AttachedServerFile>(client, server_path);
    if (!attached_->sample_span()) {
      throw_usage(fmt::format("cannot read {}: it holds no samples", server_path));
    }
    host_ = attached_->host();
    kernel_ = attached_->kernel();
    cores_ = attached_->cores();
  } catch (const schema::SqliteError& e) {
    throw_usage(fmt::format("cannot read {}: not a stallscope file ({})", server_path, e.what()));
  }
  attached_->shadow_tables(clock_shift(schema::clock_offsets(client)));
}

ServerFileView::~ServerFileView() = default;

Report explain_pair(schema::Store& client, const std::string& server_path,
                    const ExplainOptions& options) {
  // Pass 1: the client file alone (driver CPU, client host).
  const Report client_side = explain(client, options);
  // Pass 2 needs the windows of pass 1, also when pass 1 lengthened them.
  ExplainOptions same_windows = options;
  if (!client_side.query_windows && client_side.window_ns &&
      *client_side.window_ns != options.window_ns) {
    same_windows.window_ns = *client_side.window_ns;
    same_windows.window_chosen = true;
  }
  if (client_side.run.queries == 0 || !client_side.run.query_start_ns) {
    throw_usage(
        fmt::format("cannot explain {} with {}: neither file holds queries (explain a run file "
                    "or an imported pgbench log with the server's record file)",
                    client.path(), server_path));
  }
  const Span queries{*client_side.run.query_start_ns, *client_side.run.query_end_ns};
  std::optional<schema::AttachedServerFile> attached;
  try {
    attached.emplace(client, server_path);
  } catch (const schema::SqliteError& e) {
    throw_usage(fmt::format("cannot open {}: {}", server_path, e.what()));
  }
  auto& srv = *attached;
  Span server;
  std::string server_host;
  const auto estimates = schema::clock_offsets(client);
  try {
    const auto span = srv.sample_span();
    if (!span) {
      throw_usage(fmt::format("cannot explain with {}: it holds no samples", server_path));
    }
    server = {to_client_ns(estimates, span->first_ns), to_client_ns(estimates, span->last_ns)};
    server_host = srv.host();
  } catch (const schema::SqliteError& e) {
    throw_usage(
        fmt::format("cannot explain with {}: not a stallscope file ({})", server_path, e.what()));
  }
  if (server.end_ns < queries.start_ns || server.start_ns > queries.end_ns) {
    throw_usage(fmt::format(
        "cannot explain {} with {}: their time ranges do not overlap (queries {} .. {} s, server "
        "samples {} .. {} s since the epoch)",
        client.path(), server_path, detail::epoch_seconds_text(queries.start_ns),
        detail::epoch_seconds_text(queries.end_ns), detail::epoch_seconds_text(server.start_ns),
        detail::epoch_seconds_text(server.end_ns)));
  }
  srv.shadow_tables(clock_shift(estimates));
  // Pass 2: the same windows, with the server's host, processes and ASH and
  // the client's driver CPU per window (an imported pgbench log: pgbench's,
  // from the server file).
  const bool imported = client_side.run.mode == to_string(schema::RunMode::import_pgbench);
  Report r = explain(client, imported ? with_driver_in_server_file(same_windows)
                                      : with_client_driver(same_windows, client_side));
  if (same_windows.window_ns != options.window_ns) {
    r.notes.push_back(detail::widened_window_note(
        options.window_ns, same_windows.window_ns,
        client_side.windows.empty()
            ? 0.0
            : double(client_side.windows.back().end_ns - client_side.windows.front().start_ns)));
  }
  auto s = summarise(r, "server");
  s.host = server_host;
  s.cores = srv.cores();
  if (!imported) {
    r.hosts.push_back(summarise(client_side, "client"));
  } else if (r.pgbench && r.pgbench->pid) {
    // pgbench ran on the record file's host.
    auto c = s;
    c.role = "client";
    r.hosts.push_back(std::move(c));
  }
  r.hosts.push_back(std::move(s));
  const auto clock = align_clock(estimates, queries);
  r.clock = clock;
  r.notes.insert(
      r.notes.begin(),
      imported ? imported_note(r, client.path(), server_path, server_host)
      : estimates.empty()
          ? fmt::format(
                "Client + server: driver CPU from {} (host {}), host, process and ASH "
                "figures from {} (host {}). {} holds no clock-offset estimate: the server's "
                "times are used unshifted (both hosts are assumed to share one clock).",
                client.path(), client_side.run.host, server_path, server_host, client.path())
          : fmt::format("Client + server: driver CPU from {} (host {}), host, process and ASH "
                        "figures from {} (host {}), whose times are moved to the client's clock "
                        "by the nearest of {} clock-offset estimates (server - client {:+.3f} ms "
                        "+/- {:.3f} ms at the middle of the run).",
                        client.path(), client_side.run.host, server_path, server_host,
                        estimates.size(), detail::ms(*clock.offset_ns),
                        detail::ms(*clock.uncertainty_ns)));
  if (server.start_ns > queries.start_ns || server.end_ns < queries.end_ns) {
    r.notes.push_back(fmt::format(
        "The server file covers only part of the queries ({} .. {} s of {} .. {} s).",
        detail::epoch_seconds_text(server.start_ns), detail::epoch_seconds_text(server.end_ns),
        detail::epoch_seconds_text(queries.start_ns), detail::epoch_seconds_text(queries.end_ns)));
  }
  return r;
}

}  // namespace stallscope::correlate
