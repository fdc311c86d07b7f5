// Renderers: the same Report as text (for terminals) and as JSON.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "common/printable.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate {
namespace detail {

std::string escape_text(std::string_view s) {
  return common::printable(s);
}

std::string valid_utf8(std::string_view s) {
  return common::valid_utf8(s);
}

namespace {

template <typename T>
std::string opt_text(const std::optional<T>& v, const char* spec = "{}", const char* none = "-") {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string(none);
}

std::string evidence_text(const Evidence& ev) {
  std::string out;
  for (const auto& [name, value] : ev) {
    if (!out.empty()) out += "  ";
    out += escape_text(name) + "=";
    if (auto* i = std::get_if<std::int64_t>(&value)) {
      out += fmt::format("{}", *i);
    } else if (auto* d = std::get_if<double>(&value)) {
      out += fmt::format("{:.4g}", *d);
    } else {
      out += escape_text(std::get<std::string>(value));
    }
  }
  return out;
}

std::string session_part_label(const std::string& name) {
  if (name == "on_cpu") return "on CPU";
  if (name == "idle") return "idle: waiting for the client";
  if (name == "idle_in_transaction") return "idle in transaction";
  if (name.starts_with("wait:")) return "wait " + escape_text(name.substr(5));
  return escape_text(name);
}

// record --pg: the client sessions by group, their parts, and the client
// processes found.
void render_sessions(const Report& r, std::ostream& out) {
  if (!r.sessions) return;
  const auto& v = *r.sessions;
  fmt::print(out,
             "\nclient sessions: {} over {} ASH polls every {:.1f} ms, {:.3f} s of session time\n",
             v.sessions, v.polls, double(v.ash_period_ns) / common::kNsPerMsDouble,
             double(v.session_ns) / kNsPerS);
  for (const auto& g : v.groups) {
    fmt::print(out, "  application '{}', client {}, user {}, database {}: {} session{}, {:.3f} s\n",
               escape_text(g.application_name), escape_text(g.client_addr), escape_text(g.user),
               escape_text(g.database), g.sessions, g.sessions == 1 ? "" : "s",
               double(g.session_ns) / kNsPerS);
    for (const auto& p : g.parts) {
      fmt::print(out, "    {:<30} {:>10.3f} {:>7.1f}%\n", session_part_label(p.name),
                 double(p.time_ns) / kNsPerS, 100 * p.share);
    }
    if (!g.client_pids.empty()) {
      std::string pids;
      for (int pid : g.client_pids) pids += fmt::format("{}{}", pids.empty() ? "" : ", ", pid);
      fmt::print(out, "    client process pid {}\n", pids);
    }
  }
  for (const auto& g : v.other_groups) {
    std::string pids;
    for (int pid : g.client_pids) pids += fmt::format("{}{}", pids.empty() ? "" : ", ", pid);
    fmt::print(out,
               "  other load, not the application's: application '{}', client {}, user {}, "
               "database {}: {} session{}, {:.3f} s (client pid {})\n",
               escape_text(g.application_name), escape_text(g.client_addr), escape_text(g.user),
               escape_text(g.database), g.sessions, g.sessions == 1 ? "" : "s",
               double(g.session_ns) / kNsPerS, pids);
  }
  if (v.client_processes.empty()) {
    fmt::print(out,
               "  client processes: none found (no command after --, no client socket on "
               "this host, no --client-process)\n");
    return;
  }
  fmt::print(out, "  client processes\n");
  for (const auto& c : v.client_processes) {
    fmt::print(
        out,
        "    {} (pid {}, {}): {:.2f} cores, busiest thread {:.2f}; {} session{} idle {:.1f}%\n",
        escape_text(c.comm), c.pid, c.found_by, c.cores, c.hottest_thread_cores, c.sessions,
        c.sessions == 1 ? "" : "s", 100 * c.sessions_idle_share);
  }
}

void render_header(const Report& r, std::ostream& out) {
  const auto& run = r.run;
  fmt::print(out, "stallscope explain: host {}, kernel {}, {} cores, mode {}, status {}\n",
             escape_text(run.host), escape_text(run.kernel), run.cores, escape_text(run.mode),
             escape_text(run.status));
  fmt::print(out, "run       {} -> {}  ({})\n", utc_time_text(run.start_ns),
             run.end_ns
                 ? utc_time_text(*run.end_ns)
                 : std::string("no end recorded (still running, or the recorder was killed)"),
             run.duration_ns ? fmt::format("{:.2f} s", double(*run.duration_ns) / kNsPerS)
                             : std::string("?"));
  if (run.clients || run.protocol) {
    fmt::print(out, "driver    clients {}, threads {}, protocol {}, sampling {:g} Hz\n",
               opt_text(run.clients), opt_text(run.threads),
               escape_text(run.protocol.value_or("-")), run.hz);
  } else {
    fmt::print(out, "sampling  {:g} Hz\n", run.hz);
  }
  if (run.sql) {
    // Trailing line breaks of a -f file are not part of what the user reads.
    std::string sql = *run.sql;
    while (!sql.empty() && (sql.back() == '\n' || sql.back() == '\r' || sql.back() == ' ')) {
      sql.pop_back();
    }
    fmt::print(out, "sql       {}\n", escape_text(sql));
  }
  if (run.server_version)
    fmt::print(out, "server    PostgreSQL {}\n", escape_text(*run.server_version));
  if (run.end_reason) fmt::print(out, "ended     {}\n", escape_text(*run.end_reason));
  if (run.queries > 0) {
    fmt::print(
        out, "queries   {} ({} errors{})  tps {}  latency ms: mean {}  p50 {}  p99 {}  max {}{}\n",
        run.queries, run.errors,
        (run.skipped > 0 ? fmt::format(", {} skipped as late, not counted", run.skipped)
                         : std::string()) +
            (run.unfinished > 0
                 ? fmt::format(", {} cut short at the end, not counted", run.unfinished)
                 : std::string()) +
            (run.connect_failures > 0
                 ? fmt::format(", {} failed connect attempts, not counted", run.connect_failures)
                 : std::string()),
        opt_text(run.tps, "{:.1f}"), opt_text(run.latency_mean_ms, "{:.3f}"),
        opt_text(run.latency_p50_ms, "{:.3f}"), opt_text(run.latency_p99_ms, "{:.3f}"),
        opt_text(run.latency_max_ms, "{:.3f}"),
        run.lag_mean_ms ? fmt::format("  lag ms: mean {:.3f}  max {:.3f}", *run.lag_mean_ms,
                                      run.lag_max_ms.value_or(0))
                        : std::string());
  } else if (run.unfinished > 0) {
    fmt::print(out,
               "queries   none answered; {} cut short at the end, unanswered for up to {:.3f} s\n",
               run.unfinished, double(run.unfinished_max_ns) / kNsPerS);
  } else if (!r.pgbench_aggregate) {
    fmt::print(out, "queries   none (host state only)\n");
  }
  if (const auto& a = r.pgbench_aggregate) {
    fmt::print(
        out,
        "pgbench   {} transactions ({} failed{}) in {} aggregate intervals of {:g} s  tps {}  "
        "latency ms: mean {}  min {}  max {}{}\n",
        a->transactions, a->failures,
        a->skipped > 0 ? fmt::format(", {} skipped", a->skipped) : std::string(), a->intervals,
        double(a->interval_ns) / kNsPerS, opt_text(a->tps, "{:.1f}"),
        opt_text(a->latency_mean_ms, "{:.3f}"), opt_text(a->latency_min_ms, "{:.3f}"),
        opt_text(a->latency_max_ms, "{:.3f}"),
        a->lag_mean_ms ? fmt::format("  lag mean {:.3f}", *a->lag_mean_ms) : std::string());
  }
}

void render_windows(const Report& r, std::ostream& out) {
  if (r.windows.empty()) return;
  if (r.query_windows) {
    fmt::print(out, "\nwindows of {} queries\n", r.every_queries.value_or(0));
    fmt::print(out,
               "{:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>4} {:>6} {:>6} {:>7} {:>6} "
               "{:>4} {:>3}  {}\n",
               "start_s", "queries", "dur_s", "tps", "min_ms", "max_ms", "mean_ms", "sd_ms", "err",
               "busy%", "idle%", "iowait%", "steal%", "runq", "D", "top wait");
  } else {
    fmt::print(out, "\nwindows of {:g} s\n", double(r.window_ns.value_or(0)) / kNsPerS);
    fmt::print(out, "{:>9} {:>8} {:>9} {:>9} {:>9} {:>4} {:>6} {:>6} {:>7} {:>6} {:>4} {:>3}  {}\n",
               "start_s", "queries", "tps", "mean_ms", "p99_ms", "err", "busy%", "idle%", "iowait%",
               "steal%", "runq", "D", "top wait");
  }
  for (const auto& w : r.windows) {
    // The sliver between the last query and the end of the run (shutdown)
    // is not a window worth a line of text; JSON keeps it.
    if (!r.query_windows && w.queries == 0 && &w == &r.windows.back() && r.window_ns &&
        w.duration_s * common::kNsPerSDouble < 0.2 * static_cast<double>(*r.window_ns)) {
      continue;
    }
    std::string host =
        fmt::format("{:>6} {:>6} {:>7} {:>6} {:>4} {:>3}", opt_text(w.cpu_busy_pct, "{:.1f}"),
                    opt_text(w.cpu_idle_pct, "{:.1f}"), opt_text(w.cpu_iowait_pct, "{:.1f}"),
                    opt_text(w.cpu_steal_pct, "{:.1f}"), opt_text(w.procs_running_max),
                    opt_text(w.processes_d_state_max));
    std::string wait = w.top_wait_event ? escape_text(*w.top_wait_event) : std::string("-");
    if (w.perturbed)
      wait += "  [perturbed: sampler > " + fmt::format("{:.0f}", 100 * kPerturbationMaxCoreShare) +
              "% of a core]";
    if (r.query_windows) {
      fmt::print(out, "{:>9.3f} {:>8} {:>9.3f} {:>9} {:>9} {:>9} {:>9} {:>9} {:>4} {}  {}\n",
                 w.start_offset_s, w.queries, w.duration_s, opt_text(w.tps, "{:.1f}"),
                 opt_text(w.latency_min_ms, "{:.3f}"), opt_text(w.latency_max_ms, "{:.3f}"),
                 opt_text(w.latency_mean_ms, "{:.3f}"), opt_text(w.latency_stddev_ms, "{:.3f}"),
                 w.errors, host, wait);
    } else {
      fmt::print(out, "{:>9.3f} {:>8} {:>9} {:>9} {:>9} {:>4} {}  {}\n", w.start_offset_s,
                 w.queries, opt_text(w.tps, "{:.1f}"), opt_text(w.latency_mean_ms, "{:.3f}"),
                 opt_text(w.latency_p99_ms, "{:.3f}"), w.errors, host, wait);
    }
  }
}

// One line: how the server parts were tied to the queries.
void render_attribution(const Report& r, std::ostream& out) {
  if (!r.attribution) return;
  const auto& t = *r.attribution;
  if (t.method == AttributionMethod::per_query) {
    fmt::print(out,
               "  per query: {} of {} queries joined to their backend (its samples count only "
               "while it served them; left out: {:.3f} s of backend CPU, {} ASH samples)\n",
               t.joined_queries, t.queries, double(t.backend_cpu_outside_ns) / kNsPerS,
               t.ash_samples_outside);
  } else {
    fmt::print(out, "  host-wide: {}\n", escape_text(t.reason));
  }
}

// A part's time per query sent, ms (the mean latency is the sum of the parts').
double per_query_ms(const Report& r, std::int64_t ns) {
  return r.run.queries > 0 ? double(ns) / double(r.run.queries) / common::kNsPerMsDouble : 0.0;
}

void render_verdict(const Report& r, std::ostream& out) {
  const auto& v = r.verdict;
  const std::string head = v.kind                ? std::string(to_string(*v.kind))
                           : v.reason == "paced" ? std::string("no bottleneck")
                           : v.reason == "cannot_account" || v.reason == "unaccounted"
                               ? std::string("unknown")
                               : std::string("none found");
  fmt::print(out, "\nverdict: {} — {}\n", head, escape_text(v.summary));
}

// A file without query or session time: the host's CPU time by part.
void render_host_accounting(const HostAccounting& h, std::ostream& out) {
  fmt::print(out,
             "\ntime accounting: no queries and no client sessions (record --pg samples them): "
             "the host's CPU time, {:.3f} s on {} cores over {:.3f} s (as /proc/stat counted "
             "it between the samples)\n",
             double(h.cpu_ns) / kNsPerS, h.cores, double(h.wall_ns) / kNsPerS);
  fmt::print(out, "  {:<40} {:>12} {:>8}\n", "part", "seconds", "share");
  for (const auto& p : h.parts) {
    fmt::print(out, "  {:<40} {:>12.3f} {:>7.1f}%\n", escape_text(p.name),
               double(p.time_ns) / kNsPerS, 100 * p.share);
  }
}

// What the accounting's time is: session time (record --pg) or query time
// and the clients' busy share; the failed and cut-short queries in it.
void render_accounting_header(const Report& r, const Accounting& a, std::ostream& out) {
  if (r.sessions) {
    // record --pg: the session view's time (sessions come and go).
    fmt::print(out,
               "\ntime accounting: {:.3f} s of session time (ASH polls) of {} client session{} in "
               "a {:.3f} s span; the client's side of their idle time is split by what the "
               "client processes did: on CPU, queued for it, asleep by choice, blocked in the "
               "kernel, waiting for other input, or asleep on the database socket (the round "
               "trips); what no client sample explains is unaccounted\n",
               double(a.query_ns) / kNsPerS, a.clients, a.clients == 1 ? "" : "s",
               double(a.wall_ns) / kNsPerS);
  } else {
    const std::string use =
        a.query_ns > a.client_ns && a.client_ns > 0
            ? fmt::format(
                  "{:.1f} transactions outstanding per client on average (queued behind "
                  "their schedule)",
                  double(a.query_ns) / double(a.client_ns))
            : fmt::format("{:.1f}% of it in queries, {:.1f}% idle between them",
                          100 * a.client_busy_share,
                          a.client_ns > 0 ? 100 * (1 - a.client_busy_share) : 0.0);
    fmt::print(out,
               "\ntime accounting: {:.3f} s of query time (Σ latency{}); {} client{} x {:.3f} s = "
               "{:.3f} s of client time, {}\n",
               double(a.query_ns) / kNsPerS,
               a.schedule_lag_ns > 0 ? " from the scheduled start" : "", a.clients,
               a.clients == 1 ? "" : "s", double(a.wall_ns) / kNsPerS,
               double(a.client_ns) / kNsPerS, use);
  }
  if (!r.sessions && r.run.queries > 0 &&
      (r.run.errors > 0 || r.run.unfinished > 0 || r.run.connect_failures > 0)) {
    // Failed rows (a broken transaction, a failed reconnect attempt) and
    // transactions cut short at the end carry query time too.
    fmt::print(out,
               "  query time includes {} failed queries{}{}; ms/query divides by the {} queries "
               "answered or failed, while the mean latency counts the {} that succeeded\n",
               r.run.errors,
               r.run.connect_failures > 0
                   ? fmt::format(", {} failed connect attempts (time without a server)",
                                 r.run.connect_failures)
                   : std::string(),
               r.run.unfinished > 0
                   ? fmt::format(" and {} transactions cut short at the end (unanswered for up to "
                                 "{:.3f} s)",
                                 r.run.unfinished, double(r.run.unfinished_max_ns) / kNsPerS)
                   : std::string(),
               r.run.queries, r.run.queries - r.run.errors);
  }
}

// The parts: by host for a client + server pair, else one table with a
// column wide enough for the longest label.
void render_parts(const Report& r, const Accounting& a, std::ostream& out) {
  const bool by_host =
      std::any_of(a.parts.begin(), a.parts.end(), [](const auto& p) { return !p.host.empty(); });
  if (by_host) {
    // Client + server: the parts each host measured, then the remainder.
    for (const char* host : {"client", "server", ""}) {
      const auto* h = [&]() -> const HostSummary* {
        for (const auto& x : r.hosts)
          if (x.role == host) return &x;
        return nullptr;
      }();
      if (*host) {
        fmt::print(out, "  {} host {}\n", host, h ? escape_text(h->host) : std::string("?"));
      } else {
        fmt::print(out, "  between the hosts\n");
      }
      for (const auto& p : a.parts) {
        if (p.host != host) continue;
        fmt::print(out, "    {:<26} {:>12.3f} {:>7.1f}% {:>12.4f}\n",
                   escape_text(part_label(p.name)), double(p.time_ns) / kNsPerS, 100 * p.share,
                   per_query_ms(r, p.time_ns));
      }
    }
  }
  // The labels, and a first column wide enough for the longest (a wait
  // channel's name can be long).
  std::vector<std::string> labels;
  std::size_t width = 28;
  for (const auto& p : a.parts) {
    // record --pg: the remainder of session time is no driver's round trip.
    labels.push_back(escape_text(r.sessions && p.kind() == Part::remainder
                                     ? std::string("round trips (on the socket)")
                                     : part_label(p.name)));
    width = std::max(width, labels.back().size());
  }
  if (!by_host && !a.parts.empty()) {
    fmt::print(out, "  {:<{}} {:>12} {:>8}{}\n", "part", width, "seconds", "share",
               r.run.queries > 0 ? fmt::format(" {:>12}", "ms/query") : std::string());
    for (std::size_t i = 0; i < a.parts.size(); ++i) {
      const auto& p = a.parts[i];
      if (r.run.queries > 0) {
        fmt::print(out, "  {:<{}} {:>12.3f} {:>7.1f}% {:>12.4f}\n", labels[i], width,
                   double(p.time_ns) / kNsPerS, 100 * p.share, per_query_ms(r, p.time_ns));
      } else {
        fmt::print(out, "  {:<{}} {:>12.3f} {:>7.1f}%\n", labels[i], width,
                   double(p.time_ns) / kNsPerS, 100 * p.share);
      }
    }
  }
  if (a.excess_ns > 0) {
    fmt::print(out, "  {:<{}} {:>12.3f}\n", "(measured parts trimmed by)", width,
               double(a.excess_ns) / kNsPerS);
  }
}

// -R: what the schedule lag was (the driver's wake-up, or time queued
// behind slow transactions, and what made those slow).
void render_schedule_lag(const Accounting& a, std::ostream& out) {
  if (a.schedule_lag_ns > 0 && !a.lag_apportioned) {
    fmt::print(out,
               "  schedule lag: the rate was kept; the lag is the time from each scheduled start "
               "to the send (the driver's wake-up), not queueing behind slow transactions\n");
  } else if (a.schedule_lag_ns > 0) {
    // The lag is time queued behind earlier transactions: what made those
    // slow is the service time's parts.
    std::string causes;
    const auto service = a.query_ns - a.schedule_lag_ns;
    auto parts = a.parts;
    std::stable_sort(parts.begin(), parts.end(),
                     [](const auto& x, const auto& y) { return x.time_ns > y.time_ns; });
    int shown = 0;
    for (const auto& p : parts) {
      if (p.kind() == Part::schedule_lag || p.time_ns <= 0 || shown == 3 || service <= 0) continue;
      causes += fmt::format("{}{} {:.0f}%", shown++ ? ", " : "", escape_text(part_label(p.name)),
                            100.0 * double(p.time_ns) / double(service));
    }
    fmt::print(out,
               "  schedule lag: transactions queued in the client behind earlier ones, whose "
               "service time went to {}\n",
               causes.empty() ? std::string("-") : causes);
  }
}

void render_accounting(const Report& r, std::ostream& out) {
  if (!r.accounting && r.host_accounting) {
    render_host_accounting(*r.host_accounting, out);
    return;
  }
  if (!r.accounting) {
    fmt::print(out, "\ntime accounting: none (this file holds no queries and no host samples)\n");
    return;
  }
  const auto& a = *r.accounting;
  render_accounting_header(r, a, out);
  render_attribution(r, out);
  if (a.cannot_account) {
    fmt::print(out, "  cannot account CPU, run-queue delay or the remainder: {}\n",
               escape_text(*a.cannot_account));
  }
  render_parts(r, a, out);
  render_schedule_lag(a, out);
}

void render_findings(const Report& r, std::ostream& out) {
  fmt::print(out, "\nfindings{}\n",
             r.verdict.reason == "paced" && !r.findings.empty()
                 ? " (what the latency is made of; none limited the paced clients)"
                 : "");
  if (r.findings.empty()) fmt::print(out, "  none above the thresholds\n");
  int rank = 1;
  for (const auto& f : r.findings) {
    fmt::print(out, "{:>3}. {:<18} score {:.2f}  {}\n", rank++, escape_text(to_string(f.kind)),
               f.score, escape_text(f.summary));
    fmt::print(
        out, "     span: +{:.3f} s .. +{:.3f} s\n",
        double(f.start_ns - (r.windows.empty() ? f.start_ns : r.windows.front().start_ns)) /
            kNsPerS,
        double(f.end_ns - (r.windows.empty() ? f.start_ns : r.windows.front().start_ns)) / kNsPerS);
    if (!f.culprit.empty()) fmt::print(out, "     culprit: {}\n", escape_text(f.culprit));
    fmt::print(out, "     evidence: {}\n", evidence_text(f.evidence));
    fmt::print(out, "     suggestion: {}\n", escape_text(f.suggestion));
  }
}

void render_stalls(const Report& r, std::ostream& out) {
  if (r.stalls.empty()) return;
  fmt::print(out,
             "\nstalls (windows far slower than typical: robust z beyond {:.0f} and {:.0f}% off "
             "the median)\n",
             kStallZ, 100 * kStallMinDrop);
  for (const auto& s : r.stalls) {
    const double off =
        double(s.start_ns - (r.windows.empty() ? s.start_ns : r.windows.front().start_ns)) /
        kNsPerS;
    fmt::print(out, "  +{:.3f} s  window {:<5} {:<12} {}\n", off, s.window_index,
               escape_text(to_string(s.cause)), escape_text(s.explanation));
    if (!s.culprit.empty()) fmt::print(out, "  {:>9}  culprit: {}\n", "", escape_text(s.culprit));
  }
}

}  // namespace
}  // namespace detail

void render_text(const Report& report, std::ostream& out) {
  using namespace detail;
  render_header(report, out);
  for (const auto& h : report.hosts) {
    fmt::print(out, "{:<9} {} ({} cores): CPU busy {}%, iowait {}%, steal {}%\n", h.role,
               escape_text(h.host), h.cores, opt_text(h.cpu_busy_pct, "{:.1f}"),
               opt_text(h.cpu_iowait_pct, "{:.1f}"), opt_text(h.cpu_steal_pct, "{:.1f}"));
  }
  if (const auto& c = report.comparison) {
    fmt::print(out, "compared  {}\n", escape_text(c->summary));
    for (const auto* side : {&c->run, &c->baseline}) {
      fmt::print(out, "          {:<24} {:>9} queries  tps {:>10}  latency ms: mean {}  p99 {}\n",
                 escape_text(side->label), side->queries, opt_text(side->tps, "{:.1f}"),
                 opt_text(side->latency_mean_ms, "{:.3f}"),
                 opt_text(side->latency_p99_ms, "{:.3f}"));
    }
  }
  if (const auto& c = report.clock) {
    if (c->offset_ns) {
      fmt::print(out,
                 "clock     server - client {:+.3f} ms +/- {:.3f} ms (nearest of {} estimates, "
                 "applied per time; offsets {:+.3f} .. {:+.3f} ms)\n",
                 double(*c->offset_ns) / common::kNsPerMsDouble,
                 double(c->uncertainty_ns.value_or(0)) / common::kNsPerMsDouble, c->estimates,
                 double(c->offset_min_ns.value_or(0)) / common::kNsPerMsDouble,
                 double(c->offset_max_ns.value_or(0)) / common::kNsPerMsDouble);
    } else {
      fmt::print(out,
                 "clock     no clock-offset estimate in the run file: server times used "
                 "unshifted\n");
    }
  }
  render_windows(report, out);
  render_sessions(report, out);
  render_accounting(report, out);
  render_verdict(report, out);
  render_findings(report, out);
  render_stalls(report, out);
  if (!report.notes.empty()) {
    fmt::print(out, "\nnotes\n");
    for (const auto& n : report.notes) fmt::print(out, "  - {}\n", escape_text(n));
  }
}

}  // namespace stallscope::correlate
