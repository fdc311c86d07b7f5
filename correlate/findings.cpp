// The finding rules of the CPU and the query path (server_cpu, client_cpu,
// runqueue, steal, cpu_throttle, single_thread, network_roundtrip) and
// find(), which runs every rule in order (the wait and connection rules are
// in wait_findings.cpp, what they share in rules.h). Each scores the share of
// query time it explains (of the service time under -R:
// detail::service_ns); without queries (a record file) each scores a
// host-side share instead and says which. Rules and formulas are documented
// at each rule.
#include <algorithm>

#include <fmt/format.h>

#include "correlate/detail.h"
#include "correlate/format.h"
#include "correlate/kernel_sleep.h"
#include "correlate/rules.h"
#include "correlate/sessions.h"

namespace stallscope::correlate::detail {
namespace {

using namespace rules;

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

}  // namespace

std::vector<Finding> find(const Report& r, const Facts& f) {
  using namespace rules;
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
