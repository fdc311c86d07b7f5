// The finding rules. Each scores the share of query time it explains (of the
// service time under -R: detail::service_ns);
// without queries (a record file) each scores a host-side share instead and
// says which. Rules and formulas are documented at each rule.
#include <algorithm>

#include <fmt/format.h>

#include "correlate/detail.h"
#include "correlate/format.h"
#include "correlate/kernel_sleep.h"
#include "correlate/sessions.h"

namespace stallscope::correlate::detail {
namespace {

double ratio(double part, double whole) {
  return whole > 0 ? part / whole : 0;
}
double s(std::int64_t ns) {
  return round4(double(ns) / kNsPerS);
}

// The span of the windows where share_of(window) ≥ kMinScore, or the run span.
template <typename ShareOf>
Span signal_span(const Report& r, const Facts& f, ShareOf&& share_of) {
  std::optional<std::size_t> first, last;
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    if (share_of(i) >= kMinScore) {
      if (!first) first = i;
      last = i;
    }
  }
  if (!first) return f.span;
  return {r.windows[*first].start_ns, r.windows[*last].end_ns};
}

// A finding's time span.
void set_span(Finding& x, Span span) {
  x.start_ns = span.start_ns;
  x.end_ns = span.end_ns;
}

// Most frequent "Class:*" event among the ASH rows.
std::pair<std::string, std::int64_t> top_event_of_class(const Facts& f, const std::string& cls) {
  std::pair<std::string, std::int64_t> best{"", 0};
  for (const auto& [label, rows] : f.ash_event_rows) {
    if (label.starts_with(cls + ":") && rows > best.second) best = {label, rows};
  }
  return best;
}

std::int64_t class_rows(const Facts& f, const std::string& cls) {
  auto it = f.ash_class_rows.find(cls);
  return it == f.ash_class_rows.end() ? 0 : it->second;
}

struct Context {
  const Report& r;
  const Facts& f;
  const Accounting* acc;  // null without queries
  double service_ns;      // detail::service_ns of the run's accounting: what scores are shares of
  std::int64_t wall_ns;
  double share(std::int64_t ns) const { return ratio(double(ns), service_ns); }
  double per_query_ms(std::int64_t ns) const {
    return r.run.queries > 0 ? round4(double(ns) / double(r.run.queries) / common::kNsPerMsDouble)
                             : 0;
  }
  double cores_used(std::int64_t ns) const { return round4(ratio(double(ns), double(wall_ns))); }
};

// Run-queue delay of the query path, charged to whoever used the CPU: a
// saturated host delays the query path because of the backends', the
// driver's or other processes' CPU demand, in proportion to each.
struct Charge {
  std::int64_t backends_ns = 0, driver_ns = 0, others_ns = 0;
};
struct RunDelayCharge {
  Charge delay;      // the query path's run delay (less what cpu_throttle claims)
  Charge remainder;  // on a saturated host: the remainder, as unmeasured contention
};
// A connection per transaction (-C): connections opened during the queries
// are at least half the transactions.
bool connection_per_transaction(const Facts& f, std::int64_t queries) {
  return f.connections.connections > 0 && 2 * f.connections.connections >= queries;
}

// Run delay that cpu_throttle claims (a quota, not contention) is left out.
// A closed loop has at most one runnable query-path task per client (each
// client waits for its backend), so with clients ≤ cores the path cannot queue
// behind itself: while processes off the path used at least
// kRunqueueMinOtherCores, all of its run delay is charged to them. Poolers'
// CPU is the path's own demand: it takes a share of the charge that no
// finding claims. On a CPU-saturated host (busy ≥ kRoundtripMaxHostBusyShare)
// with driver threads serving several clients each (clients > threads) and
// without a pooler on the path, the remainder is not a round trip but
// contention the counters do not attribute — clients queued behind a driver
// thread that itself waited for a CPU — and is charged the same way. With
// one client per thread that queue cannot form (the remainder stays a round
// trip); behind a pooler the remainder holds the time queries wait in the
// pooler; with -C it is connection set-up. The part of the remainder the TCP
// counters explain (network_stack: delayed-ACK and retransmission timers,
// `stack_ns`) is no contention either and is not charged.
RunDelayCharge charge_run_delay(const Accounting& a, const Facts& f, std::int64_t queries,
                                std::int64_t stack_ns) {
  const double o = double(f.other_cpu_ns + a.sampler_cpu_ns);
  const bool path_fits = a.clients > 0 && a.clients <= f.cores && a.wall_ns > 0 &&
                         o / double(a.wall_ns) >= kRunqueueMinOtherCores;
  const double b = path_fits ? 0.0 : double(a.server_cpu_ns),
               d = path_fits ? 0.0 : double(a.driver_cpu_ns),
               m = path_fits ? 0.0 : double(a.path_cpu_ns);
  const double total = b + d + m + o;
  auto split = [&](std::int64_t ns) -> Charge {
    if (total <= 0) return {0, 0, ns};
    const double r = double(ns);
    return {static_cast<std::int64_t>(r * b / total), static_cast<std::int64_t>(r * d / total),
            static_cast<std::int64_t>(r * o / total)};
  };
  RunDelayCharge out;
  out.delay = split(std::max<std::int64_t>(
      0, a.run_delay_ns - std::min(a.run_delay_ns, f.throttled_run_delay_ns)));
  const bool saturated = f.host.total_ns > 0 && f.host.busy_share() >= kRoundtripMaxHostBusyShare;
  const bool multiplexed = f.threads > 0 && a.clients > f.threads;
  if (saturated && multiplexed && a.path_cpu_by_comm_ns.empty() &&
      !connection_per_transaction(f, queries)) {
    out.remainder = split(
        std::max<std::int64_t>(0, a.remainder_ns - f.connections.connect_latency_ns - stack_ns));
  }
  return out;
}

Finding make(const Context& c, FindingKind kind, double score) {
  Finding x;
  x.kind = kind;
  x.score = round4(std::clamp(score, 0.0, 1.0));
  x.start_ns = c.f.span.start_ns;
  x.end_ns = c.f.span.end_ns;
  return x;
}

// server_cpu: (backend CPU × contention weight + run delay and
// saturated-host remainder charged to backends) ÷ query time. On a saturated host
// where processes off the query path used at least kRunqueueMinOtherCores,
// the backends' own CPU counts only in proportion to the query path's part
// of the CPU used (path ÷ (path + others)): the others' part of the
// saturation is runqueue's to explain, and "cheaper queries / more cores" is
// not the first fix while they hold the CPUs.
void server_cpu(const Context& c, const RunDelayCharge& rd, std::vector<Finding>& out) {
  if (!c.acc) return;
  const auto& a = *c.acc;
  const auto queued_ns = rd.delay.backends_ns + rd.remainder.backends_ns;
  const double busy = c.f.host.busy_share();
  const bool saturated = busy >= kRoundtripMaxHostBusyShare;
  const double path_ns = double(a.server_cpu_ns + a.driver_cpu_ns + a.path_cpu_ns);
  const double other_ns = double(c.f.other_cpu_ns);
  const bool others_busy = a.wall_ns > 0 && other_ns / double(a.wall_ns) >= kRunqueueMinOtherCores;
  const double weight =
      saturated && others_busy && path_ns + other_ns > 0 ? path_ns / (path_ns + other_ns) : 1.0;
  auto x = make(c, FindingKind::server_cpu, c.share(a.server_cpu_ns) * weight + c.share(queued_ns));
  if (x.score < kMinScore) return;
  // Saturated by whom: the query path, or processes off it (then runqueue
  // names them and "add cores / cheaper queries" is not the first fix).
  const bool by_others = weight < kServerCpuMinPathWeight;
  x.summary = fmt::format(
      "This run's backends were on CPU for {} of query time ({:.2f} cores) and queued for it for "
      "another {}, with the host {:.0f}% busy on {} cores.",
      share_pct_text(c.share(a.server_cpu_ns)), c.cores_used(a.server_cpu_ns),
      share_pct_text(c.share(queued_ns)), 100 * busy, c.f.cores);
  x.evidence = {{"server_cpu_share", round4(c.share(a.server_cpu_ns))},
                {"run_delay_charged_share", round4(c.share(rd.delay.backends_ns))},
                {"remainder_charged_share", round4(c.share(rd.remainder.backends_ns))},
                {"backend_cpu_cores", c.cores_used(a.server_cpu_ns)},
                {"backend_cpu_per_query_ms", c.per_query_ms(a.server_cpu_ns)},
                {"host_cpu_busy_pct", round4(100 * busy)},
                {"path_cpu_weight", round4(weight)},
                {"cores", std::int64_t{c.f.cores}},
                {"server_cpu_source", std::string(c.f.backends_on_host ? "schedstat" : "ash")}};
  if (!c.f.top_cpu_query.empty()) {
    std::int64_t cpu_rows = 0;
    for (const auto& [id, n] : c.f.ash_cpu_query_rows) cpu_rows += n;
    const double share = ratio(double(c.f.top_cpu_query_rows), double(cpu_rows));
    x.evidence.emplace_back("top_cpu_query", sql_one_line(c.f.top_cpu_query, 200));
    x.evidence.emplace_back("top_cpu_query_share", round4(share));
    x.culprit = fmt::format("{} ({} of the backends' on-CPU samples)",
                            sql_one_line(c.f.top_cpu_query, 100), share_pct_text(share));
  } else if (!c.f.top_active_query.empty()) {
    // Short queries at high rates: ASH caught none on CPU with its query,
    // but saw the backends active in it (just done: Client:ClientRead).
    std::int64_t active_rows = 0;
    for (const auto& [id, n] : c.f.ash_active_query_rows) active_rows += n;
    const double share = ratio(double(c.f.top_active_query_rows), double(active_rows));
    x.evidence.emplace_back("top_active_query", sql_one_line(c.f.top_active_query, 200));
    x.evidence.emplace_back("top_active_query_share", round4(share));
    x.culprit = fmt::format(
        "{} ({} of the backends' active samples; ASH caught none on CPU with its query)",
        sql_one_line(c.f.top_active_query, 100), share_pct_text(share));
  } else if (c.r.run.sql && !c.r.run.sql->empty()) {
    // Short queries at high rates: ASH may catch no backend on CPU with its
    // query (they show ClientRead between queries). The driver ran this SQL.
    x.culprit = fmt::format("{} (the run's SQL; ASH caught no backend on CPU with its query)",
                            sql_one_line(*c.r.run.sql, 100));
  }
  x.suggestion = saturated && !by_others
                     ? "The server's CPUs are the limit: make each query cheaper (EXPLAIN ANALYZE, "
                       "indexes, prepared statements to skip planning) or add cores; more clients "
                       "will only queue."
                     : "Backend CPU is a serial part of every round trip: make each query cheaper "
                       "(EXPLAIN ANALYZE, prepared statements to skip planning).";
  out.push_back(std::move(x));
}

// client_cpu: (driver CPU + run delay and saturated-host remainder charged to
// the driver) ÷ query time.
void client_cpu(const Context& c, const RunDelayCharge& rd, std::vector<Finding>& out) {
  if (!c.acc) return;
  if (c.r.sessions) return;  // a record file: client_process_findings names the clients
  const auto& a = *c.acc;
  const auto queued_ns = rd.delay.driver_ns + rd.remainder.driver_ns;
  auto x = make(c, FindingKind::client_cpu, c.share(a.driver_cpu_ns + queued_ns));
  if (x.score < kMinScore) return;
  const double cores = c.cores_used(a.driver_cpu_ns);
  const bool saturated = cores >= kSingleThreadMinCores * c.f.threads;
  // The driver: stallscope's, or pgbench found in a record file (an
  // imported log explained with it).
  const auto& pgbench = c.r.pgbench;
  const std::string driver =
      pgbench && pgbench->pid ? fmt::format("pgbench, pid {}", *pgbench->pid) : "stallscope";
  x.summary = fmt::format(
      "The driver ({}, {} thread{}) used {:.2f} cores, {} of query time, and queued for "
      "CPU for another {}.",
      driver, c.f.threads, c.f.threads == 1 ? "" : "s", cores,
      share_pct_text(c.share(a.driver_cpu_ns)), share_pct_text(c.share(queued_ns)));
  x.evidence = {{"driver_cpu_share", round4(c.share(a.driver_cpu_ns))},
                {"run_delay_charged_share", round4(c.share(rd.delay.driver_ns))},
                {"remainder_charged_share", round4(c.share(rd.remainder.driver_ns))},
                {"driver_cpu_cores", cores},
                {"threads", std::int64_t{c.f.threads}},
                {"driver_cpu_per_query_ms", c.per_query_ms(a.driver_cpu_ns)},
                {"sampler_cpu_s", s(a.sampler_cpu_ns)}};
  x.culprit = fmt::format("the driver ({}, {} thread{}) at {:.2f} cores", driver, c.f.threads,
                          c.f.threads == 1 ? "" : "s", cores);
  x.suggestion =
      saturated ? "The driver's threads are saturated: add threads (-j) or drive from another host."
                : "Client-side CPU (libpq, result handling) adds to every round trip: "
                  "fetch fewer rows or columns, or use the extended/prepared protocol.";
  out.push_back(std::move(x));
}

// runqueue: run delay (and saturated-host remainder) charged to processes off
// the query path ÷ query time; record files: all processes' run delay ÷ (their CPU +
// run delay). Names the top three processes off the path with their CPU.
void runqueue(const Context& c, const RunDelayCharge& rd, std::vector<Finding>& out) {
  double score = 0;
  std::int64_t delay_ns = 0;
  if (c.acc) {
    score = c.share(rd.delay.others_ns + rd.remainder.others_ns);
    delay_ns = c.acc->run_delay_ns;
  } else {
    // A record file: the share of runnable time spent waiting, once tasks
    // waited for at least kRunqueueMinQueuedCores on average — on a host
    // doing nothing a few µs of wake-up delay are a large share of almost no
    // CPU, not a bottleneck.
    delay_ns = c.f.all_run_delay_ns;
    if (c.wall_ns <= 0 || double(delay_ns) / double(c.wall_ns) < kRunqueueMinQueuedCores) return;
    score = ratio(double(c.f.all_run_delay_ns), double(c.f.all_cpu_ns + c.f.all_run_delay_ns));
  }
  auto x = make(c, FindingKind::runqueue, score);
  if (x.score < kMinScore) return;
  std::string top;
  for (const auto& p : c.f.top_other) {
    top += fmt::format("{}{} (pid {}) {:.2f} cores", top.empty() ? "" : ", ", p.comm, p.pid,
                       c.cores_used(p.cpu_ns));
  }
  if (top.empty()) top = "none sampled";
  x.summary =
      c.acc
          ? fmt::format(
                "Query-path tasks waited for a CPU for {} of query time while processes off "
                "the query path used {:.2f} cores (most: {}).",
                share_pct_text(x.score), c.cores_used(c.f.other_cpu_ns), top)
          : fmt::format(
                "Runnable tasks spent {} of their runnable time waiting for a CPU (most CPU: {}).",
                share_pct_text(x.score), top);
  x.evidence = {{"run_delay_s", s(delay_ns)},
                {"other_cpu_cores", c.cores_used(c.f.other_cpu_ns)},
                {"procs_running_max", std::int64_t{c.f.host.procs_running_max}},
                {"cores", std::int64_t{c.f.cores}}};
  if (c.acc) {
    x.evidence.insert(x.evidence.begin(),
                      {"run_delay_share", round4(c.share(c.acc->run_delay_ns))});
    x.evidence.insert(x.evidence.begin() + 1,
                      {"run_delay_charged_share", round4(c.share(rd.delay.others_ns))});
    x.evidence.insert(x.evidence.begin() + 2,
                      {"remainder_charged_share", round4(c.share(rd.remainder.others_ns))});
  }
  for (std::size_t i = 0; i < c.f.top_other.size(); ++i) {
    const auto& p = c.f.top_other[i];
    x.evidence.emplace_back(fmt::format("top_other_{}", i + 1),
                            fmt::format("{} (pid {})", p.comm, p.pid));
    x.evidence.emplace_back(fmt::format("top_other_{}_cpu_s", i + 1), s(p.cpu_ns));
  }
  if (!c.f.top_other.empty()) {
    std::string named;
    for (const auto& p : c.f.top_other) {
      if (p.cpu_ns * 4 < c.f.top_other.front().cpu_ns) break;  // named: within 4× of the top
      named += fmt::format("{}{} (pid {}) at {:.2f} cores", named.empty() ? "" : ", ", p.comm,
                           p.pid, c.cores_used(p.cpu_ns));
    }
    x.culprit = "processes off the query path: " + named;
  }
  x.suggestion =
      "Move, nice or limit the competing processes, or give the server and the client "
      "their own cores (taskset, cgroup cpusets).";
  out.push_back(std::move(x));
}

// steal: the query path's time the hypervisor took ÷ query time. A task's
// CPU time (schedstat, on the guest's task clock) leaves out what was
// stolen while it ran: steal ÷ busy of each unit of CPU used on the host,
// so the driver's and the backends' CPU × steal ÷ busy. Their run delay
// counts too, × steal ÷ (busy + steal), only on a guest saturated with busy
// and stolen time (they waited for others' slices, which steal stretched);
// elsewhere run delay is wake-up latency or a CPU quota's throttling, which
// steal does not lengthen. Record files: the steal share of the CPU time the
// guest wanted, steal ÷ (busy + steal). None while steal is under
// kStealMinAllCpuShare of all CPU time.
void steal(const Context& c, std::vector<Finding>& out) {
  const auto& h = c.f.host;
  if (ratio(double(h.steal_ns), double(h.total_ns)) < kStealMinAllCpuShare) return;
  const double steal_share = ratio(double(h.steal_ns), double(h.busy_ns + h.steal_ns));
  double score = steal_share;
  double stolen_ns = 0;
  if (c.acc) {
    const bool saturated =
        ratio(double(h.busy_ns + h.steal_ns), double(h.total_ns)) >= kRoundtripMaxHostBusyShare;
    stolen_ns = double(c.acc->driver_cpu_ns + c.acc->server_cpu_ns) *
                    ratio(double(h.steal_ns), double(h.busy_ns)) +
                (saturated ? double(c.acc->run_delay_ns) * steal_share : 0.0);
    score = std::min(1.0, ratio(stolen_ns, c.service_ns));
  }
  auto x = make(c, FindingKind::steal, score);
  if (x.score < kMinScore) return;
  set_span(x, signal_span(c.r, c.f, [&](std::size_t i) { return c.f.window_steal_share[i]; }));
  x.summary = fmt::format(
      "The hypervisor took {} of the CPU time this guest wanted ({:.1f}% of all CPU time).",
      share_pct_text(steal_share), 100 * ratio(double(h.steal_ns), double(h.total_ns)));
  x.evidence = {{"steal_share", round4(steal_share)},
                {"steal_pct", round4(100 * ratio(double(h.steal_ns), double(h.total_ns)))},
                {"host_cpu_busy_pct", round4(100 * h.busy_share())}};
  if (c.acc)
    x.evidence.emplace_back("query_path_stolen_s", round4(stolen_ns / common::kNsPerSDouble));
  x.culprit = fmt::format("the hypervisor: {:.1f}% of this guest's CPU time stolen",
                          100 * ratio(double(h.steal_ns), double(h.total_ns)));
  x.suggestion =
      "Every task runs slower: use dedicated or larger instances, or move off the "
      "oversubscribed host; compare with a run at another time.";
  out.push_back(std::move(x));
}

// cpu_throttle: query-path run delay attributed to a CPU quota ÷ query time. With
// cgroup cpu.stat rows (cgroup_sample): the run delay of path processes whose
// cgroup was throttled. Without them: the path's run delay in windows where
// the host CPU was busy < kThrottleMaxHostBusyShare — runnable while CPUs
// idle, which contention cannot explain (a quota, or a cpuset).
void cpu_throttle(const Context& c, std::vector<Finding>& out) {
  if (!c.acc) return;
  auto x = make(c, FindingKind::cpu_throttle, c.share(c.f.throttled_run_delay_ns));
  if (x.score < kMinScore) return;
  set_span(x, signal_span(c.r, c.f, [&](std::size_t i) { return c.f.window_throttle_share[i]; }));
  const double busy = c.f.host.busy_share();
  if (c.f.cgroup_data) {
    x.summary = fmt::format(
        "Query-path tasks were runnable but throttled by the CPU quota of cgroup {} for {} of "
        "query time ({} of {} periods throttled).",
        c.f.throttled_cgroup, share_pct_text(x.score), c.f.cgroup_nr_throttled,
        c.f.cgroup_nr_periods);
  } else {
    x.summary = fmt::format(
        "Query-path tasks waited to run for {} of query time while the host CPU was only {:.0f}% "
        "busy: a CPU quota or cpuset holds them back (inferred; no cgroup cpu.stat in this file).",
        share_pct_text(x.score), 100 * busy);
  }
  x.evidence = {
      {"throttled_run_delay_share", x.score},
      {"throttled_run_delay_s", s(c.f.throttled_run_delay_ns)},
      {"host_cpu_busy_pct", round4(100 * busy)},
      {"backend_cpu_cores", c.cores_used(c.acc->server_cpu_ns)},
      {"cores", std::int64_t{c.f.cores}},
      {"source", std::string(c.f.cgroup_data ? "cgroup cpu.stat" : "run delay while host idle")}};
  if (c.f.cgroup_data) {
    x.evidence.emplace_back("cgroup", c.f.throttled_cgroup);
    x.evidence.emplace_back("cgroup_nr_throttled", c.f.cgroup_nr_throttled);
    x.evidence.emplace_back("cgroup_nr_periods", c.f.cgroup_nr_periods);
    x.evidence.emplace_back("cgroup_throttled_s", s(c.f.cgroup_throttled_ns));
    x.culprit = fmt::format("the CPU quota of cgroup {} ({} of {} periods throttled)",
                            c.f.throttled_cgroup, c.f.cgroup_nr_throttled, c.f.cgroup_nr_periods);
  }
  x.suggestion =
      "The server (or client) runs under a CPU limit: raise cpu.cfs_quota_us / cpu.max (or the "
      "container's CPU limit), widen its cpuset, or expect throughput to stop at the quota.";
  out.push_back(std::move(x));
}

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
    std::string name = classes[i];
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    x.evidence.emplace_back(fmt::format("ash_{}_samples", name), class_rows(c.f, classes[i]));
  }
  if (kind == FindingKind::lwlock_wait && !top.empty()) x.culprit = top;
  x.suggestion = suggestion;
  out.push_back(std::move(x));
}

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

// single_thread: a process off the query path (not a backend of this run,
// not stallscope) at 0.9–1.2 cores in some windows while the rest of the
// host was mostly idle. otherwise-idle share = (idle + iowait) ÷ (all CPU
// time − the process's CPU), i.e. how idle the other cores were.
// score = its cores in those windows × the share of the span they cover ×
// the otherwise-idle share, capped by the
// remainder share (a pooler's queueing is neither driver, backend CPU nor a
// server wait, so it can only explain the remainder).
void single_thread(const Context& c, std::vector<Finding>& out) {
  const auto& h = c.f.host;
  if (h.total_ns <= 0) return;  // "host mostly idle" cannot be checked
  for (const auto& cand : c.f.single_thread) {
    const double hot_ns = double(cand.hot_buckets) * double(cand.bucket_ns);
    const double core_share = ratio(double(cand.hot_cpu_ns), hot_ns);
    const double hot_fraction = std::min(1.0, ratio(hot_ns, double(c.f.span.duration_ns())));
    // Idle share of the CPU time not taken by this process.
    const double otherwise_idle = std::clamp(
        ratio(double(h.idle_ns + h.iowait_ns), double(h.total_ns - cand.process.cpu_ns)), 0.0, 1.0);
    if (otherwise_idle < kSingleThreadMinOtherwiseIdleShare) continue;
    double score = std::min(1.0, core_share) * hot_fraction * otherwise_idle;
    if (c.acc) score = std::min(score, c.share(c.acc->remainder_ns));
    auto x = make(c, FindingKind::single_thread, score);
    if (x.score < kMinScore) continue;
    x.start_ns = cand.first_hot_ns;
    x.end_ns = cand.last_hot_end_ns;
    x.summary = fmt::format(
        "{} (pid {}) ran at {:.2f} cores for {} of the run while the rest of the host was "
        "{:.0f}% idle: one thread saturated.",
        cand.process.comm, cand.process.pid, core_share, share_pct_text(hot_fraction),
        100 * otherwise_idle);
    x.evidence = {{"comm", cand.process.comm},
                  {"pid", std::int64_t{cand.process.pid}},
                  {"hot_cores", round4(core_share)},
                  {"hot_time_share", round4(hot_fraction)},
                  {"otherwise_idle_share", round4(otherwise_idle)},
                  {"cpu_s", s(cand.process.cpu_ns)}};
    if (c.acc) x.evidence.emplace_back("remainder_share", round4(c.share(c.acc->remainder_ns)));
    x.culprit = fmt::format("{} (pid {}) at {:.2f} of one core", cand.process.comm,
                            cand.process.pid, core_share);
    const std::string& comm = cand.process.comm;
    if (comm == "pgbouncer") {
      x.suggestion = fmt::format(
          "pgbouncer at {:.0f} % of one core: run more pgbouncer processes with so_reuseport or "
          "pool on the client.",
          100 * core_share);
    } else if (is_pooler_comm(comm)) {
      x.suggestion = fmt::format(
          "{} at {:.0f} % of one core: give it more worker threads or processes, or pool on the "
          "client.",
          comm, 100 * core_share);
    } else {
      x.suggestion =
          "If this process is on the query path (a pooler, a proxy, a client), it caps "
          "throughput at one core: run several instances (pgbouncer so_reuseport), "
          "or bypass it to compare.";
    }
    out.push_back(std::move(x));
  }
}

// network_roundtrip: the remainder share minus what a single_thread finding,
// connection_setup and network_stack (delays inside the TCP stack) claimed,
// only while the host CPU is not saturated and ASH was sampled (without ASH
// the remainder would hide server waits). Its culprit names the measured
// round trip × the round trips per query (network.cpp).
void network_roundtrip(const Context& c, const std::vector<Finding>& so_far,
                       std::vector<Finding>& out) {
  if (!c.acc || !c.f.ash_available) return;
  const auto& a = *c.acc;
  const double busy = c.f.host.busy_share();
  if (c.f.host.total_ns > 0 && busy >= kRoundtripMaxHostBusyShare) return;
  // A saturated single thread (a pooler) and connection set-up (its round
  // trips: startup, authentication) explain parts of the remainder.
  double claimed = 0, connect = 0, stack = 0;
  for (const auto& x : so_far) {
    if (x.kind == FindingKind::single_thread) claimed = std::max(claimed, x.score);
    if (x.kind == FindingKind::connection_setup) connect = x.score;
    if (x.kind == FindingKind::network_stack) stack = x.score;
  }
  const double single = claimed;
  claimed += connect + stack;
  const double rem = c.share(a.remainder_ns);
  auto x = make(c, FindingKind::network_roundtrip, rem - claimed);
  if (x.score < kMinScore) return;
  x.summary =
      c.r.sessions
          ? fmt::format(
                "For {} of the session time the clients were asleep on their sockets beyond "
                "what the server's parts explain: round trips (wire, protocol, wake-ups).",
                share_pct_text(rem))
          : fmt::format(
                "{} of query time was neither driver CPU, backend CPU nor a server wait: about "
                "{:.3f} ms of each query went to round trips (wire, protocol, wake-ups) against "
                "{:.3f} ms of backend CPU.",
                share_pct_text(rem), c.per_query_ms(a.remainder_ns),
                c.per_query_ms(a.server_cpu_ns));
  x.evidence = {{"remainder_share", round4(rem)},
                {"host_cpu_busy_pct", round4(100 * busy)},
                {"clients", std::int64_t{a.clients}}};
  if (c.r.run.queries > 0) {
    // Per-query figures: a record file has no queries to divide by.
    x.evidence.emplace_back("remainder_per_query_ms", c.per_query_ms(a.remainder_ns));
    x.evidence.emplace_back("latency_mean_ms", round4(c.r.run.latency_mean_ms.value_or(0)));
    x.evidence.emplace_back("backend_cpu_per_query_ms", c.per_query_ms(a.server_cpu_ns));
    x.evidence.emplace_back("driver_cpu_per_query_ms", c.per_query_ms(a.driver_cpu_ns));
  }
  if (single > 0) x.evidence.emplace_back("single_thread_claimed_share", round4(single));
  if (connect > 0) x.evidence.emplace_back("connection_setup_claimed_share", round4(connect));
  if (stack > 0) x.evidence.emplace_back("network_stack_claimed_share", round4(stack));
  // The round trips' part of the remainder: what network_stack did not claim.
  const auto trips_ns =
      std::max<std::int64_t>(0, a.remainder_ns - static_cast<std::int64_t>(stack * c.service_ns));
  add_roundtrip_evidence(c.f.network, trips_ns, c.r.run.queries, x.evidence);
  x.culprit = roundtrip_culprit(c.f.network, trips_ns, c.r.run.queries);
  // Over a Unix socket (no TCP round-trip time) a closer client is no fix.
  x.suggestion = fmt::format(
      "Each query waits for a round trip: send fewer of them (batch statements, pipeline mode, "
      "prepared statements){}, or add clients — a closed loop of N clients does at most N / "
      "latency queries per second.",
      c.f.network.rtt ? ", use a Unix socket or a closer client" : "");
  out.push_back(std::move(x));
}

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

}  // namespace

std::vector<Finding> find(const Report& r, const Facts& f) {
  const Accounting* acc = r.accounting ? &*r.accounting : nullptr;
  Context c{r, f, acc, acc ? double(service_ns(*acc)) : 0.0, f.span.duration_ns()};
  RunDelayCharge rd;
  if (acc) {
    const auto stack = diagnose_stack(f.network, acc->remainder_ns, r.run.queries);
    rd = charge_run_delay(*acc, f, r.run.queries, stack ? stack->time_ns : 0);
  }
  std::vector<Finding> out;
  server_cpu(c, rd, out);
  client_cpu(c, rd, out);
  runqueue(c, rd, out);
  steal(c, out);
  cpu_throttle(c, out);
  io_wait(c, out);
  ash_class(c, {"Lock", "BufferPin"}, FindingKind::lock_wait, "heavyweight locks",
            "Find the blocker (pg_blocking_pids(), pg_locks): shorten transactions that hold row "
            "locks, avoid updating the same hot row from every client, and look for sessions "
            "idle in transaction.",
            0, out);
  ash_class(
      c, {"LWLock"}, FindingKind::lwlock_wait, "internal locks (LWLock)",
      "Internal lock contention: for WALWrite batch commits or tune wal_buffers; for "
      "LockManager use fewer partitions or fast-path locks; for BufferContent spread hot pages.",
      wal_queue_rows(f), out);
  memory_pressure(c, out);
  kernel_wait(c, out);
  connection_setup(c, out);
  connection_lost(c, out);
  pool_wait(r, f, out);         // facts_pooler.cpp
  replication_wait(r, f, out);  // facts_pgstats.cpp
  single_thread(c, out);
  client_process_findings(r, f, out);      // record --pg files (sessions.cpp)
  network_stack(r, f, c.service_ns, out);  // network.cpp
  if (auto stopped = driver_stopped(r, f)) out.push_back(std::move(*stopped));  // stopped.cpp
  network_roundtrip(c, out, out);
  // The setting behind server_cpu / io_wait, when PostgreSQL's statistics
  // name one (facts_pgstats.cpp).
  add_setting_culprits(r, f, out);
  if (acc && acc->lag_apportioned && acc->query_ns > 0) {
    // Scores count the schedule lag each cause made: say how much was direct.
    const double direct = double(service_ns(*acc)) / double(acc->query_ns);
    for (auto& x : out) {
      x.summary += fmt::format(
          " (The rate was not kept: shares include the schedule lag apportioned to each cause; "
          "directly, {} of query time.)",
          share_pct_text(x.score * direct));
    }
  }
  // Failed queries: the verdict when most transactions failed, else ranked
  // by the query time they took.
  auto failed = errors_finding(r, f);
  const bool failures_first =
      failed && double(f.errors.failed) >= kErrorsVerdictMinShare * double(r.run.queries);
  if (failed && !failures_first) out.push_back(std::move(*failed));
  std::stable_sort(out.begin(), out.end(),
                   [](const Finding& x, const Finding& y) { return x.score > y.score; });
  if (failures_first) out.insert(out.begin(), std::move(*failed));
  // A closed loop that nothing saturated: the loop's latency and concurrency
  // come first, the parts of each answer beneath.
  if (auto loop = latency_bound(r, f, out)) {
    out.front().summary +=
        " It is the largest part of each answer, not a saturated resource (latency_bound).";
    out.insert(out.begin(), std::move(*loop));
  }
  return out;
}

}  // namespace stallscope::correlate::detail
