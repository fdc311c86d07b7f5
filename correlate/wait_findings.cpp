// The wait and connection finding rules (correlate/rules.h): ASH wait
// classes (lock_wait, lwlock_wait), io_wait, memory_pressure, kernel_wait,
// connection_lost and connection_setup. Each scores the share of query time
// it explains, or a host-side share without queries, as findings.cpp's.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "common/ascii.h"
#include "correlate/kernel_sleep.h"
#include "correlate/rules.h"

namespace stallscope::correlate::detail::rules {

// lock_wait / lwlock_wait: ASH rows of the class × ASH period ÷ query time; record
// files: the class's share of sampled non-idle client-backend rows.
// LWLock:WALWrite rows: committers queued behind a WAL flush. With storage
// evidence (ASH IO rows or D-state backends) they are io_wait, not lwlock_wait.
std::int64_t wal_queue_rows(const Facts& f) {
  if (class_rows(f, "IO") == 0 && f.backend_d_rows == 0) return 0;
  auto it = f.ash_event_rows.find("LWLock:WALWrite");
  return it == f.ash_event_rows.end() ? 0 : it->second;
}

// classes: the wait classes counted (the first names the finding's main
// one; lock_wait also counts BufferPin: a backend waiting for other
// sessions to drop their pin on a buffer is a lock-like wait on them).
// excluded_rows: rows of the class another rule claims (WALWrite for io_wait).
void ash_class(const Context& c, const std::vector<std::string>& classes, FindingKind kind,
               const std::string& what, const std::string& suggestion, std::int64_t excluded_rows,
               std::vector<Finding>& out) {
  std::int64_t all_rows = 0;
  for (const auto& cls : classes) all_rows += class_rows(c.f, cls);
  const auto rows = std::max<std::int64_t>(0, all_rows - excluded_rows);
  const auto ns = rows * c.f.ash_period_ns;
  auto x = make(c, kind, c.acc ? c.share(ns) : ratio(double(rows), double(c.f.ash_rows)));
  if (x.score < kMinScore) return;
  set_span(x, signal_span(c.r, c.f, [&](std::size_t i) {
             double share = 0;
             for (const auto& cls : classes) {
               auto it = c.f.window_wait_share[i].find(cls);
               if (it != c.f.window_wait_share[i].end()) share += it->second;
             }
             return c.acc ? share : (share > 0 ? 1.0 : 0.0);
           }));
  std::pair<std::string, std::int64_t> best{"", 0};
  for (const auto& cls : classes) {
    auto cand = top_event_of_class(c.f, cls);
    if (cand.second > best.second) best = cand;
  }
  auto [top, top_rows] = best;
  const auto& cls = classes.front();
  if (excluded_rows > 0 && top == "LWLock:WALWrite") {
    top_rows -= excluded_rows;  // claimed by io_wait; name the next event instead
    for (const auto& [label, n] : c.f.ash_event_rows) {
      if (label.starts_with(cls + ":") && label != "LWLock:WALWrite" && n > top_rows) {
        top = label;
        top_rows = n;
      }
    }
  }
  x.summary =
      c.acc ? fmt::format("This run's backends waited on {} for {} of query time (mostly {}).",
                          what, share_pct_text(x.score), top)
            : fmt::format(
                  "Client backends waited on {} in {} of sampled non-idle moments (mostly {}).",
                  what, share_pct_text(x.score), top);
  const std::string name(to_string(kind));
  x.evidence = {{name + "_share", x.score},
                {name + "_s", s(ns)},
                {"ash_samples", rows},
                {"top_wait_event", top},
                {"top_wait_event_samples", top_rows},
                {"ash_period_ms", round4(double(c.f.ash_period_ns) / common::kNsPerMsDouble)}};
  for (std::size_t i = 1; i < classes.size(); ++i) {
    x.evidence.emplace_back(fmt::format("ash_{}_samples", common::lowered(classes[i])),
                            class_rows(c.f, classes[i]));
  }
  if (kind == FindingKind::lwlock_wait && !top.empty()) x.culprit = top;
  x.suggestion = suggestion;
  out.push_back(std::move(x));
}

namespace {

// What an IO wait event is, for io_wait's culprit ("" when not listed).
std::string_view io_event_meaning(std::string_view event) {
  if (event == "IO:WALSync" || event == "IO:WALWrite") return "the WAL flush at commit";
  if (event == "LWLock:WALWrite") return "committers queued behind the WAL flush";
  if (event == "IO:DataFileRead")
    return "reads of table and index pages missing from shared_buffers";
  if (event == "IO:DataFileWrite" || event == "IO:DataFileExtend")
    return "backends writing data pages themselves";
  if (event == "IO:DataFileSync" || event == "IO:DataFileFlush") return "data file fsync";
  if (event == "IO:BufFileWrite" || event == "IO:BufFileRead")
    return "temporary files (sorts and hashes spilling past work_mem)";
  return "";
}

}  // namespace

// io_wait: max(ASH IO rows × ASH period, backend D-state rows × sample
// period) ÷ query time — the same stall seen from PostgreSQL and from the kernel,
// so the larger view counts, never their sum. Record files: the larger of
// the ASH IO share of non-idle rows and iowait ÷ (busy + iowait + steal).
// Host iowait is corroboration in the evidence.
void io_wait(const Context& c, std::vector<Finding>& out) {
  const auto& h = c.f.host;
  const auto ash_rows = class_rows(c.f, "IO");
  const auto wal_queue = wal_queue_rows(c.f);
  const auto ash_ns = (ash_rows + wal_queue) * c.f.ash_period_ns;
  // D state on a wchan of another family (reclaim, a pipe) is not storage.
  std::int64_t d_rows = 0;
  for (const auto& [w, n] : c.f.backend_d_wchan_rows) {
    const auto family = wchan_family(w);
    if (family == WchanFamily::storage || family == WchanFamily::none) d_rows += n;
  }
  const auto d_ns = d_rows * c.f.sample_period_ns;
  const auto io_ns = std::max(ash_ns, d_ns);
  const double iowait_share =
      ratio(double(h.iowait_ns), double(h.busy_ns + h.iowait_ns + h.steal_ns));
  const double score = c.acc
                           ? c.share(io_ns)
                           : std::max(ratio(double(ash_rows), double(c.f.ash_rows)), iowait_share);
  auto x = make(c, FindingKind::io_wait, score);
  if (x.score < kMinScore) return;
  set_span(x, signal_span(c.r, c.f, [&](std::size_t i) {
             auto it = c.f.window_wait_share[i].find("IO");
             if (it == c.f.window_wait_share[i].end()) return 0.0;
             return c.acc ? it->second : (it->second > 0 ? 1.0 : 0.0);
           }));
  auto [top, top_rows] = top_event_of_class(c.f, "IO");
  std::string wchan = "-";
  std::int64_t wchan_rows = 0;
  for (const auto& [w, n] : c.f.backend_d_wchan_rows) {
    if (n > wchan_rows) std::tie(wchan, wchan_rows) = std::tie(w, n);
  }
  x.summary = c.acc
                  ? fmt::format(
                        "This run's backends waited on storage for {} of query time ({}; host "
                        "iowait {:.1f}%).",
                        share_pct_text(x.score), top.empty() ? "seen as D state" : "mostly " + top,
                        100 * ratio(double(h.iowait_ns), double(h.total_ns)))
                  : fmt::format(
                        "Storage waits: {} (ASH IO share of non-idle rows, or iowait share of "
                        "non-idle CPU time).",
                        share_pct_text(x.score));
  x.evidence = {{"io_wait_share", x.score},
                {"ash_io_samples", ash_rows},
                {"ash_wal_queue_samples", wal_queue},
                {"ash_io_s", s(ash_ns)},
                {"backend_d_state_samples", d_rows},
                {"backend_d_state_s", s(d_ns)},
                {"top_wait_event", top},
                {"top_wchan", wchan},
                {"host_iowait_pct", round4(100 * ratio(double(h.iowait_ns), double(h.total_ns)))},
                {"processes_d_state_max", std::int64_t{h.processes_d_state_max}}};
  // The culprit: the wait event with the most rows (the WAL queue counted
  // as LWLock:WALWrite), else the D-state wait channel.
  const std::string event = wal_queue > top_rows ? "LWLock:WALWrite" : top;
  if (!event.empty()) {
    const auto meaning = io_event_meaning(event);
    x.culprit = meaning.empty() ? event : fmt::format("{} ({})", event, meaning);
    if (wchan != "-") x.culprit += fmt::format("; backends in D state on {}", wchan);
  } else if (wchan != "-") {
    x.culprit = fmt::format("backends in D state on {}", wchan);
  }
  x.suggestion =
      "Backends block on storage: check the disk's IOPS/throughput limit (iostat), "
      "shared_buffers and the working set for reads, wal_sync_method, commit_delay or "
      "synchronous_commit for WAL flushes, and checkpoint settings.";
  out.push_back(std::move(x));
}

namespace {

// The largest entries of a name → rows map as "name (rows)" text.
std::string top_entries(const std::map<std::string, std::int64_t>& m, std::size_t n) {
  std::vector<std::pair<std::string, std::int64_t>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.second > y.second; });
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < n; ++i) {
    out += fmt::format("{}{} ({})", i ? ", " : "", v[i].first, v[i].second);
  }
  return out;
}

}  // namespace

// memory_pressure: the larger of (query-path rows in S/D on a memory-family
// wchan — reclaim, swap, memory cgroup over its mark — × sample period ÷
// query time) and PSI memory "full" ÷ wall time (every non-idle task stalled on
// memory, the query path included). Record files: PSI memory "some" ÷ wall
// time. Major faults and swap traffic are evidence: a count, not a time.
void memory_pressure(const Context& c, std::vector<Finding>& out) {
  const auto& m = c.f.memory;
  const auto d_ns = m.path_memory_d_rows * c.f.sample_period_ns;
  const double full = ratio(double(m.psi_full_us) * common::kNsPerUsDouble, double(m.psi_span_ns));
  const double some = ratio(double(m.psi_some_us) * common::kNsPerUsDouble, double(m.psi_span_ns));
  const double score = c.acc ? std::max(c.share(d_ns), full) : some;
  auto x = make(c, FindingKind::memory_pressure, score);
  if (x.score < kMinScore) return;
  const double span_s = double(c.wall_ns) / kNsPerS;
  x.summary = fmt::format(
      "Memory was short: tasks stalled on memory for {:.0f}% of the time (PSI some; all of them "
      "at once {:.0f}%), with {} major faults and {} pages swapped in, {} out{}.",
      100 * some, 100 * full, m.major_faults, m.swap_in_pages, m.swap_out_pages,
      m.path_memory_d_rows > 0 ? fmt::format("; the query path slept in reclaim or swap ({})",
                                             top_entries(m.path_memory_wchan_rows, 2))
                               : std::string());
  x.evidence = {{"memory_pressure_share", x.score},
                {"psi_memory_some_share", round4(some)},
                {"psi_memory_full_share", round4(full)},
                {"path_memory_wait_samples", m.path_memory_d_rows},
                {"path_memory_wait_s", s(d_ns)},
                {"host_major_faults", m.major_faults},
                {"host_major_faults_per_s", round4(ratio(double(m.major_faults), span_s))},
                {"path_major_faults", m.path_majflt},
                {"swap_in_pages", m.swap_in_pages},
                {"swap_out_pages", m.swap_out_pages}};
  if (!m.path_memory_wchan_rows.empty())
    x.evidence.emplace_back("top_wchan", top_entries(m.path_memory_wchan_rows, 3));
  x.suggestion =
      "The host (or the server's memory cgroup) is short of memory: stop what else uses it, raise "
      "memory.limit_in_bytes / memory.max, lower shared_buffers or work_mem so the working set "
      "fits, and avoid swap for the database.";
  out.push_back(std::move(x));
}

// kernel_wait: query-path tasks asleep in the kernel on something that is
// neither storage, lock nor memory (WchanFamily::other: a full pipe to the
// log collector, a socket send buffer, a timer; for the driver and poolers
// also a futex — a futex outside PostgreSQL), rows × sample period; plus the
// backends' ASH waits of the classes no other kind covers — IPC (another
// process: parallel workers, synchronous replication), Timeout (vacuum
// delay, spin delay; not pg_sleep, the workload's own pacing) and Extension — rows × ASH period; ÷
// query time. The two views see different waits (a pipe write has no wait event; an IPC wait sleeps
// on the latch, a latch family wchan), so they add. With an accounting (queries, or a record --pg
// file's sessions), backends asleep (S) count as its kernel_wait parts (kernel_sleep.cpp: each
// row's span when the backend did not run in it, only while it served the queries) rather than rows
// × period. Record files: those ASH classes' share of sampled non-idle rows. The culprit is the
// largest of them (kernel_wait_culprit).
void kernel_wait(const Context& c, std::vector<Finding>& out) {
  static const std::vector<std::string> kClasses = {"IPC", "Timeout", "Extension"};
  std::int64_t ash_rows = 0;
  std::map<std::string, std::int64_t> events;
  for (const auto& cls : kClasses) {
    ash_rows += class_rows(c.f, cls);
    for (const auto& [label, n] : c.f.ash_event_rows) {
      if (!label.starts_with(cls + ":")) continue;
      // Waits for a standby are replication_wait's (facts_pgstats.cpp); the
      // workload's own pg_sleep is its pacing (the verdict's), not a wait.
      if (is_replication_wait(label) || label == kPgSleepEvent) {
        ash_rows -= n;
        continue;
      }
      events[label] += n;
    }
  }
  const auto& k = c.f.kernel;
  const auto backend_sleep_ns = c.acc ? c.acc->kernel_wait_ns : 0;
  const auto os_rows = c.acc ? k.rows - k.backend_sleep_rows : k.rows;
  const auto os_ns = os_rows * c.f.sample_period_ns + backend_sleep_ns;
  const auto ash_ns = ash_rows * c.f.ash_period_ns;
  const double score =
      c.acc ? c.share(os_ns + ash_ns) : ratio(double(ash_rows), double(c.f.ash_rows));
  auto x = make(c, FindingKind::kernel_wait, score);
  if (x.score < kMinScore) return;
  std::string what;
  if (!c.f.kernel.rows_by_wait.empty())
    what = "kernel wait channels " + top_entries(c.f.kernel.rows_by_wait, 3);
  if (!events.empty())
    what += (what.empty() ? "" : "; ") + std::string("wait events ") + top_entries(events, 3);
  x.culprit = kernel_wait_culprit(c.acc, c.f, events);
  // Mostly backends asleep: the span of the windows where they were.
  if (c.acc && 2 * backend_sleep_ns >= os_ns + ash_ns) {
    set_span(x, signal_span(c.r, c.f, [&](std::size_t i) {
               const auto& w = c.r.windows[i];
               const auto sv = w.accounting ? service_ns(*w.accounting) : 0;
               return sv > 0 ? double(w.accounting->kernel_wait_ns) / double(sv) : 0.0;
             }));
  }
  // PostgreSQL saw those backends active with no wait event (as on CPU):
  // what ASH called CPU against the CPU they used.
  const auto ash_cpu_rows = c.f.ash_event_rows.contains("CPU") ? c.f.ash_event_rows.at("CPU") : 0;
  x.summary = fmt::format(
      "Query-path tasks slept on something other than storage, locks or memory for {} of query "
      "time: {}.{}",
      share_pct_text(x.score), what,
      backend_sleep_ns > 0
          ? fmt::format(" PostgreSQL showed those backends active with no wait event; the kernel "
                        "had them asleep: {}.",
                        x.culprit)
          : std::string());
  x.evidence = {{"kernel_wait_share", x.score},
                {"os_wait_samples", k.rows},
                {"os_wait_s", s(os_ns)},
                {"ash_samples", ash_rows},
                {"ash_wait_s", s(ash_ns)}};
  if (c.acc) {
    x.evidence.emplace_back("backend_sleep_s", s(backend_sleep_ns));
    x.evidence.emplace_back("ash_cpu_share", round4(c.share(ash_cpu_rows * c.f.ash_period_ns)));
    x.evidence.emplace_back("backend_cpu_share", round4(c.share(c.acc->server_cpu_ns)));
  }
  if (k.ash_blind_ns > 0) x.evidence.emplace_back("ash_blind_s", s(k.ash_blind_ns));
  if (!k.rows_by_wait.empty()) x.evidence.emplace_back("top_wchan", top_entries(k.rows_by_wait, 3));
  if (!events.empty()) x.evidence.emplace_back("top_wait_events", top_entries(events, 3));
  x.suggestion =
      "Find what the named wait is for: a pipe write is the server's stderr (or the log "
      "collector) not drained fast enough — turn logging_collector on, log less (log_statement, "
      "log_min_duration_statement), or fix the reader (a container's logging driver, journald "
      "rate limits); a socket send the reader not reading (syslog), a futex a lock in "
      "the client or pooler, IPC:SyncRep a synchronous standby.";
  out.push_back(std::move(x));
}

// connection_setup: the connect latency of the driver connections opened
// during the queries (client rows with connect_ns in the span; with -C one per
// transaction) ÷ query time — connecting (fork, authentication, TLS, backend start)
// is query time no statement used (with -C a transaction's latency includes
// its connect). With a connection per transaction (-C) the
// remainder is connection set-up too — the handshakes and the new backend's
// start and cold first query, whose CPU the sampler cannot see (a process's
// first row has no deltas) — so the score is the larger of the two shares.
// Evidence: connections per second, mean
// connect latency against the mean query latency net of it, short-lived
// backends (sampled, living < kShortLivedBackendNs), connected → first query.
// connection_lost: the clients' time without a server — queries that lost
// their connection and the driver's failed reconnect attempts (the
// accounting's exact connection_lost part) — as a share of query time. An
// outage is not the server's throughput: it leads whenever it is the
// largest share, whatever else the run shows.
void connection_lost(const Context& c, std::vector<Finding>& out) {
  if (!c.acc || c.acc->connection_lost_ns <= 0 || c.acc->query_ns <= 0) return;
  const auto& o = c.f.outage;
  if (o.lost_queries + o.connect_failures == 0) return;
  auto x = make(c, FindingKind::connection_lost,
                double(c.acc->connection_lost_ns) / double(c.acc->query_ns));
  if (x.score < kMinScore) return;
  const double lost_s = double(c.acc->connection_lost_ns) / kNsPerS;
  const double from_s = double(o.first_ns - c.f.span.start_ns) / kNsPerS;
  const double to_s = double(o.last_ns - c.f.span.start_ns) / kNsPerS;
  std::string what;
  if (o.lost_queries > 0) {
    what = fmt::format("{} {} lost {} connection", o.lost_queries,
                       o.lost_queries == 1 ? "query" : "queries",
                       o.lost_queries == 1 ? "its" : "their");
  }
  if (o.connect_failures > 0) {
    what += fmt::format("{}{} connection {} failed", what.empty() ? "" : " and ",
                        o.connect_failures, o.connect_failures == 1 ? "attempt" : "attempts");
  }
  x.start_ns = std::max(o.first_ns, c.f.span.start_ns);
  x.end_ns = std::min(o.last_ns, c.f.span.end_ns);
  x.summary = fmt::format(
      "The clients were without a server for {} of query time ({:.1f} s of client time, "
      "{:.1f}–{:.1f} s into the run): {} (SQLSTATE {}){}.",
      share_pct_text(x.score), lost_s, from_s, to_s, what, o.sqlstates,
      o.last_error.empty() ? "" : fmt::format("; last: {}", o.last_error));
  // How the connections went, then whether the server stayed away.
  const auto& code = o.top_lost_sqlstate;
  x.culprit = fmt::format(
      "server unreachable {:.1f}–{:.1f} s: {}{}", from_s, to_s,
      code.empty() ? std::string()
                   : fmt::format("connections lost with SQLSTATE {}{}", code,
                                 code == "57P01"   ? " (admin shutdown)"
                                 : code == "57P02" ? " (crash shutdown)"
                                 : code == "57P03" ? " (cannot connect now)"
                                                   : ""),
      o.connect_failures > 0
          ? fmt::format("{}{} reconnect {} failed", code.empty() ? "" : ", ", o.connect_failures,
                        o.connect_failures == 1 ? "attempt" : "attempts")
          : std::string());
  x.evidence = {{"connection_lost_share", x.score}, {"connection_lost_s", round4(lost_s)},
                {"lost_queries", o.lost_queries},   {"connect_failures", o.connect_failures},
                {"sqlstates", o.sqlstates},         {"outage_start_s", round4(from_s)},
                {"outage_end_s", round4(to_s)}};
  x.suggestion =
      "The throughput of this run is not the server's: find in the server's log why it went "
      "away (a restart, a crash, a failover, the network), then run again.";
  out.push_back(std::move(x));
}

void connection_setup(const Context& c, std::vector<Finding>& out) {
  if (!c.acc) return;
  const auto& k = c.f.connections;
  if (k.connections == 0) return;
  const bool per_transaction = connection_per_transaction(c.f, c.r.run.queries);
  auto x =
      make(c, FindingKind::connection_setup,
           per_transaction ? std::max(c.share(k.connect_latency_ns), c.share(c.acc->remainder_ns))
                           : c.share(k.connect_latency_ns));
  if (x.score < kMinScore) return;
  const double span_s = double(c.wall_ns) / kNsPerS;
  const double connect_ms =
      double(k.connect_latency_ns) / double(k.connections) / common::kNsPerMsDouble;
  // With -C a transaction's latency includes its connect; net of it:
  const double latency_ms = c.r.run.latency_mean_ms.value_or(0);
  const double net_ms =
      std::max(0.0, latency_ms - double(k.connect_latency_ns) /
                                     double(std::max<std::int64_t>(1, c.r.run.queries)) /
                                     common::kNsPerMsDouble);
  x.summary = fmt::format(
      "Connecting took {} of query time: {} connections ({:.0f}/s) at {:.3f} ms each, against "
      "{:.3f} ms per query once connected.",
      share_pct_text(x.score), k.connections, ratio(double(k.connections), span_s), connect_ms,
      net_ms);
  x.evidence = {{"connection_setup_share", x.score},
                {"connect_latency_share", round4(c.share(k.connect_latency_ns))},
                {"connections", k.connections},
                {"connection_per_transaction", std::int64_t{per_transaction ? 1 : 0}},
                {"connections_per_s", round4(ratio(double(k.connections), span_s))},
                {"connect_latency_mean_ms", round4(connect_ms)},
                {"query_latency_net_mean_ms", round4(net_ms)},
                {"sampled_backends", k.sampled_backends},
                {"short_lived_backends", k.short_lived_backends}};
  x.culprit = per_transaction
                  ? fmt::format(
                        "a new connection per transaction: {:.0f} connections/s at {:.3f} "
                        "ms each (backend fork, authentication)",
                        ratio(double(k.connections), span_s), connect_ms)
                  : fmt::format("{} connections opened during the run at {:.3f} ms each",
                                k.connections, connect_ms);
  if (k.first_query_gap_ns)
    x.evidence.emplace_back("first_query_gap_mean_ms",
                            round4(double(*k.first_query_gap_ns) / common::kNsPerMsDouble));
  x.suggestion =
      "Connecting costs more than querying: keep connections open (a pool in the application, or "
      "pgbouncer in transaction mode in front of the server), and check what each connect pays "
      "(authentication method, TLS handshake, a backend fork).";
  out.push_back(std::move(x));
}

}  // namespace stallscope::correlate::detail::rules
