// latency_bound: a closed loop that nothing saturated. Each client waits for
// every answer before it sends the next, so throughput ≈ clients ÷ mean
// latency (Little's law); when the host's CPUs have headroom, nothing queues
// for a CPU beyond noise, no wait, pooler, client thread or outage is a
// finding, and the largest part of each answer is CPU work (the backends' or
// the driver's) or a round trip that is less than half of it, those parts
// are what each answer is made of, not a limit: the loop is bound by its own
// latency and its concurrency. (A round trip that is most of each answer is
// network_roundtrip's verdict: distance, fixed by fewer or closer trips.) The finding says so,
// with the answer's parts per query and an estimate of what more clients
// could reach before a CPU saturates. docs/findings.md, "latency_bound".
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail {
namespace {

// Kinds that are themselves a limit or a wait: with one of them among the
// findings the loop is not merely latency-bound, and the verdict stays theirs.
bool limits_a_closed_loop(FindingKind kind) {
  switch (kind) {
    case FindingKind::server_cpu:
    case FindingKind::client_cpu:
    case FindingKind::steal:
    case FindingKind::network_roundtrip:
    // Others' CPU on a host with headroom: a part of each answer while the
    // run-queue delay stays under kLatencyBoundMaxRunQueueShare (checked below).
    case FindingKind::runqueue:
      return false;
    default:
      return true;
  }
}

// Σ of the accounting parts of the families `parts`.
std::int64_t parts_ns(const Accounting& a, std::initializer_list<Part> parts) {
  std::int64_t ns = 0;
  for (const auto& p : a.parts) {
    const auto kind = p.kind();
    if (kind && std::find(parts.begin(), parts.end(), *kind) != parts.end()) ns += p.time_ns;
  }
  return ns;
}

// The loop's throughput and latency. A run measures both; a record file
// (its client sessions) measures the server's transactions per second
// (pg_stat_database over the span) and derives the latency each session's
// loop implies: sessions ÷ tps.
struct LoopFigures {
  int clients = 0;
  double tps = 0;
  double latency_ms = 0;
  bool latency_derived = false;
  std::int64_t answers = 0;  // answered transactions: what CPU per answer divides by
  // Each part per answer, ms: a run's part ÷ its queries; a record's part's
  // share of the session time × the latency.
  double part_ms(const Accounting& a, std::int64_t part_ns, std::int64_t queries) const {
    if (!latency_derived) return double(part_ns) / double(queries) / common::kNsPerMsDouble;
    return double(part_ns) / double(a.query_ns) * latency_ms;
  }
};

std::optional<LoopFigures> loop_figures(const Report& r, const Facts& f) {
  const Accounting& a = *r.accounting;
  LoopFigures x;
  x.clients = a.clients;
  if (!r.sessions) {
    const RunSummary& run = r.run;
    x.answers = run.queries - run.errors;
    if (x.answers <= 0 || !run.latency_mean_ms || *run.latency_mean_ms <= 0 || !run.tps ||
        *run.tps <= 0)
      return std::nullopt;
    x.tps = *run.tps;
    x.latency_ms = *run.latency_mean_ms;
    return x;
  }
  const auto& c = f.pg_stats.counters;
  if (!c || !c->first.xact_commit || !c->last.xact_commit) return std::nullopt;
  const std::int64_t xacts = *c->last.xact_commit - *c->first.xact_commit +
                             c->last.xact_rollback.value_or(0) - c->first.xact_rollback.value_or(0);
  const double dt_s = double(c->last.time_ns - c->first.time_ns) / common::kNsPerSDouble;
  if (xacts <= 0 || dt_s <= 0 || x.clients <= 0) return std::nullopt;
  x.answers =
      static_cast<std::int64_t>(double(xacts) * double(a.wall_ns) / (dt_s * common::kNsPerSDouble));
  if (x.answers <= 0) return std::nullopt;
  x.tps = double(xacts) / dt_s;
  x.latency_ms = double(x.clients) / x.tps * common::kMsPerSDouble;
  x.latency_derived = true;
  return x;
}

}  // namespace

std::optional<Finding> latency_bound(const Report& r, const Facts& f,
                                     const std::vector<Finding>& ranked) {
  if (!r.accounting || ranked.empty()) return std::nullopt;
  const Accounting& a = *r.accounting;
  // A closed loop: no fixed rate, clients mostly in queries (not think time),
  // everything accounted.
  if (r.run.lag_mean_ms || a.client_ns <= 0 || a.query_ns <= 0 ||
      a.client_busy_share < 1 - kPacedMinIdleShare || a.cannot_account)
    return std::nullopt;
  // The largest part of each answer is CPU work, or a round trip that is not
  // most of it (a round trip that is, is network_roundtrip's: the distance is
  // then the fix), and nothing limits or waits.
  const Finding& first = ranked.front();
  const bool cpu_first =
      first.kind == FindingKind::server_cpu || first.kind == FindingKind::client_cpu;
  const bool short_trips_first =
      first.kind == FindingKind::network_roundtrip && first.score < kLatencyBoundMaxRoundtripShare;
  if (!cpu_first && !short_trips_first) return std::nullopt;
  if (std::any_of(ranked.begin(), ranked.end(),
                  [](const Finding& x) { return limits_a_closed_loop(x.kind); }))
    return std::nullopt;
  // What was not measured is not a loop's part: it keeps its own verdict.
  const double unaccounted_share = double(parts_ns(a, {Part::unaccounted})) / double(a.query_ns);
  if (unaccounted_share > first.score) return std::nullopt;
  // Host headroom (busy and stolen together), and no queueing for a CPU
  // beyond noise.
  if (f.host.total_ns <= 0) return std::nullopt;
  const double busy = double(f.host.busy_ns + f.host.steal_ns) / double(f.host.total_ns);
  if (busy >= kRoundtripMaxHostBusyShare) return std::nullopt;
  const std::int64_t queued_ns = parts_ns(a, {Part::run_queue, Part::client_run_queue});
  const double queued_share = double(queued_ns) / double(a.query_ns);
  if (queued_share >= kLatencyBoundMaxRunQueueShare) return std::nullopt;
  // No thread of the loop at its core: the driver's threads (a record
  // file's client processes: single_thread, a limit, says so), a pooler.
  // A thread's CPU counts its share of its host's steal: on a stolen-from
  // host a thread that never left its core shows less than one. With a
  // server file the driver ran on the other host (its parts are labelled
  // "client"), whose steal f.host does not hold.
  if (a.wall_ns <= 0) return std::nullopt;
  const bool two_hosts =
      !(r.pgbench && r.pgbench->pid) &&
      std::any_of(a.parts.begin(), a.parts.end(), [](const auto& p) { return p.host == "client"; });
  const double driver_cpu_cores = double(a.driver_cpu_ns) / double(a.wall_ns);
  const double driver_cores = two_hosts ? driver_cpu_cores : f.host.with_steal(driver_cpu_cores);
  if (!r.sessions && driver_cores >= kSingleThreadMinCores * std::max(1, f.threads))
    return std::nullopt;
  for (const auto& [comm, ns] : a.path_cpu_by_comm_ns) {
    if (f.host.with_steal(double(ns) / double(a.wall_ns)) >= kSingleThreadMinCores)
      return std::nullopt;
  }
  // A record file's client process whose busiest thread wanted a core (on
  // it, queued for it, or stolen from it) is saturated, even when
  // single_thread's CPU alone fell just short of it.
  if (r.sessions) {
    for (const auto& c : r.sessions->client_processes) {
      const double stolen_cores =
          f.host.with_steal(c.hottest_thread_cores) - c.hottest_thread_cores;
      if (c.sessions > 0 && c.hottest_thread_demand_cores + stolen_cores >= kSingleThreadMinCores)
        return std::nullopt;
    }
  }
  const auto loop = loop_figures(r, f);
  if (!loop) return std::nullopt;

  const int clients = loop->clients;
  const double latency_ms = loop->latency_ms;
  const double little_qps = double(clients) / latency_ms * common::kMsPerSDouble;
  const double idle_cores = (1 - busy) * f.cores;
  // Each answer's parts, largest first (ms per answer).
  auto parts = a.parts;
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& x, const auto& y) { return x.time_ns > y.time_ns; });
  std::string made_of;
  int shown = 0;
  for (const auto& p : parts) {
    if (p.time_ns <= 0 || shown == 4) break;
    made_of += fmt::format("{}{} {:.3f} ms", shown++ ? ", " : "", part_label(p.name),
                           loop->part_ms(a, p.time_ns, r.run.queries));
  }
  // What more clients could reach before a CPU saturates: the CPU each answer
  // takes on each host ÷ that host's cores (one host: driver, poolers and
  // backends share its cores). An estimate at today's CPU per answer. With a
  // server file the driver's CPU was measured on another host (its parts are
  // labelled "client"); then only the server's cores are estimated.
  const double per_answer_server_ms =
      double(a.server_cpu_ns + a.path_cpu_ns) / double(loop->answers) / common::kNsPerMsDouble;
  const double per_answer_driver_ms =
      double(a.driver_cpu_ns) / double(loop->answers) / common::kNsPerMsDouble;
  const double on_this_host_ms = per_answer_server_ms + (two_hosts ? 0 : per_answer_driver_ms);
  std::optional<double> saturation_qps;
  if (on_this_host_ms > 0) saturation_qps = std::max(1, f.cores) / on_this_host_ms * 1e3;

  Finding x;
  x.kind = FindingKind::latency_bound;
  x.score = round4(std::clamp(a.client_busy_share, 0.0, 1.0));
  x.start_ns = f.span.start_ns;
  x.end_ns = f.span.end_ns;
  const std::string who = r.sessions
                              ? fmt::format("{} client session{}", clients, clients == 1 ? "" : "s")
                              : fmt::format("{} client{}", clients, clients == 1 ? "" : "s");
  const std::string loop_text =
      loop->latency_derived
          ? fmt::format(
                "the server answered {} transactions/s (pg_stat_database), so each answer took "
                "about clients ÷ throughput = {} ÷ {} ≈ {:.3f} ms",
                grouped_text(loop->tps), clients, grouped_text(loop->tps), latency_ms)
          : fmt::format(
                "throughput ≈ clients ÷ mean latency = {} ÷ {:.3f} ms ≈ {} q/s "
                "(measured {} tps)",
                clients, latency_ms, grouped_text(little_qps), grouped_text(loop->tps));
  x.summary = fmt::format(
      "A closed loop that nothing saturated: {} waited for every answer: {}; each answer is "
      "{}; the host's CPUs were {:.0f}% idle ({:.2f} of {} cores) and queueing for them took {} "
      "of {} time.",
      who, loop_text, made_of, 100 * (1 - busy), idle_cores, f.cores, share_pct_text(queued_share),
      r.sessions ? "session" : "query");
  x.culprit = fmt::format("the concurrency: {} waiting for every answer at {:.3f} ms each", who,
                          latency_ms);
  x.evidence = {{"clients", std::int64_t{clients}},
                {"latency_mean_ms", round4(latency_ms)},
                {"measured_tps", round4(loop->tps)},
                {"client_busy_share", round4(a.client_busy_share)},
                {"host_cpu_busy_pct", round4(100 * busy)},
                {"host_idle_cores", round4(idle_cores)},
                {"run_queue_share", round4(queued_share)},
                {"server_cpu_per_answer_ms", round4(per_answer_server_ms)},
                {"driver_cpu_per_answer_ms", round4(per_answer_driver_ms)}};
  // A record derives the latency from the throughput: N ÷ latency would
  // only repeat it.
  if (loop->latency_derived) {
    x.evidence.emplace_back("latency_source", "pg_stat_database");
  } else {
    x.evidence.emplace_back("clients_per_latency_qps", round4(little_qps));
  }
  if (saturation_qps && *saturation_qps > little_qps) {
    const double clients_needed = *saturation_qps * latency_ms / common::kMsPerSDouble;
    x.evidence.emplace_back("cpu_saturation_qps_estimate", round4(*saturation_qps));
    x.evidence.emplace_back("clients_to_saturate_estimate", round4(clients_needed));
    x.suggestion = fmt::format(
        "Nothing here is a limit yet: more clients (or libpq's pipeline mode, or batching) "
        "raise throughput until a part saturates. At today's CPU per answer ({:.3f} ms "
        "backend{}, {:.3f} ms {}) the {} would saturate near {} q/s, about {:.1f} clients at "
        "today's latency (an estimate from the parts: CPU per answer usually falls as wake-ups "
        "batch, and latency rises as CPUs fill).",
        per_answer_server_ms, a.path_cpu_ns > 0 ? " and pooler" : "", per_answer_driver_ms,
        r.sessions ? "client" : "driver",
        fmt::format("{}{} cores", two_hosts ? "server's " : "", f.cores),
        grouped_text(*saturation_qps), clients_needed);
  } else {
    x.suggestion =
        "Nothing here is a limit yet: more clients (or pipelining, or batching) raise throughput "
        "until a part saturates; to serve each client faster, shorten the largest part of each "
        "answer.";
  }
  return x;
}

}  // namespace stallscope::correlate::detail
