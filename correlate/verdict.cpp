// The verdict (Verdict in correlate.h): the finding that limited the run, or
// "no bottleneck" when the clients were paced — a fixed rate (-R) kept, or
// think time (\sleep) filling most of their time — and nothing was saturated
// or waiting. Under pacing the throughput is what the clients asked for, so
// the largest part of the latency (a round trip, the backends' own CPU) is
// what the latency is made of, not what limited the run.
#include <algorithm>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail {
namespace {

// Kinds that limit a paced run too: a saturated resource or a wait. Backend
// CPU counts only on a saturated host, steal only on a guest saturated with
// it, the driver's only when its threads were saturated, run-queue delay only
// when other processes took at least kRunqueueMinOtherCores; round trips and connection set-up are
// parts of each query's latency, not a limit on a paced run.
bool limits_paced_run(FindingKind kind, const Facts& f, const Accounting* a) {
  const bool host_saturated =
      f.host.total_ns > 0 && f.host.busy_share() >= kRoundtripMaxHostBusyShare;
  switch (kind) {
    case FindingKind::server_cpu:
      return host_saturated;
    case FindingKind::steal:
      // Stolen time lengthens each query's CPU parts; it limits a paced run
      // only when the guest's CPUs were saturated, busy and stolen together.
      return f.host.total_ns > 0 &&
             double(f.host.busy_ns + f.host.steal_ns) / double(f.host.total_ns) >=
                 kRoundtripMaxHostBusyShare;
    case FindingKind::runqueue: {
      // Run-queue delay on an idle host is wake-up latency, a part of each
      // query's; it limits a paced run when others really took the CPUs.
      const double other_cores =
          a && a->wall_ns > 0 ? double(f.other_cpu_ns) / double(a->wall_ns) : 0.0;
      return host_saturated || other_cores >= kRunqueueMinOtherCores;
    }
    case FindingKind::client_cpu: {
      // The driver's own CPU is a part of each query's latency; it limits a
      // paced run only when its threads (or the host) were saturated.
      const double driver_cores =
          a && a->wall_ns > 0 ? double(a->driver_cpu_ns) / double(a->wall_ns) : 0.0;
      return host_saturated || driver_cores >= kSingleThreadMinCores * std::max(1, f.threads);
    }
    case FindingKind::network_roundtrip:
    case FindingKind::connection_setup:
      return false;
    default:
      return true;
  }
}

// The mean latency's largest parts, "0.120 ms backend CPU, 0.050 ms driver CPU, …".
std::string latency_split(const Report& r) {
  if (!r.accounting || r.run.queries <= 0) return "";
  auto parts = r.accounting->parts;
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& x, const auto& y) { return x.time_ns > y.time_ns; });
  std::string out;
  int shown = 0;
  for (const auto& p : parts) {
    if (p.time_ns <= 0 || shown == 4) break;
    out += fmt::format("{}{:.3f} ms {}", shown ? ", " : "",
                       double(p.time_ns) / double(r.run.queries) / common::kNsPerMsDouble, p.name);
    ++shown;
  }
  return out;
}

// The accounting's "unaccounted" part as a share of its total (0 without).
double unaccounted_share(const Accounting* a) {
  if (!a) return 0;
  for (const auto& p : a->parts) {
    if (p.name == "unaccounted") return p.share;
  }
  return 0;
}

// A record file's session time but the think time, largest parts first:
// "client CPU 4%, server backend CPU 1%, …".
std::string session_split(const Accounting& a) {
  auto parts = a.parts;
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& x, const auto& y) { return x.time_ns > y.time_ns; });
  std::string out;
  int shown = 0;
  for (const auto& p : parts) {
    if (p.kind() == Part::client_sleep || p.kind() == Part::client_idle || p.time_ns <= 0) continue;
    if (shown == 4) break;
    out += fmt::format(
        "{}{} {}", shown++ ? ", " : "",
        p.kind() == Part::remainder ? "round trips (on the socket)" : part_label(p.name),
        share_pct_text(p.share));
  }
  return out.empty() ? std::string("nothing") : out;
}

}  // namespace

bool rate_not_kept(const RunSummary& r) {
  if (!r.lag_mean_ms || !r.tps || *r.tps <= 0) return false;
  // A client's mean gap between scheduled transactions: clients ÷ rate.
  const double gap_ms = double(r.clients.value_or(1)) / *r.tps * common::kMsPerSDouble;
  return *r.lag_mean_ms >= kRateNotKeptMinLagShare * gap_ms;
}

namespace {

// A paced run (-R kept, think time, the workload's pg_sleep) that nothing on
// the query path limited: no bottleneck, and what set the throughput.
// `pg_sleep_share` and `idle_share`: of the client (session) time.
Verdict paced_verdict(const Report& r, const Facts& f, const Accounting* a, bool kept,
                      double pg_sleep_share, double idle_share) {
  Verdict v;
  v.reason = "paced";
  const double idle_pct = f.host.total_ns > 0 ? 100 * (1 - f.host.busy_share()) : 0;
  // A host busy with other work (no finding on the query path) is said so.
  const std::string nothing =
      f.host.total_ns > 0 && f.host.busy_share() >= kRoundtripMaxHostBusyShare
          ? fmt::format(
                "nothing on the query path was saturated or waiting (the host's CPUs "
                "were {:.0f}% busy with other work)",
                100 - idle_pct)
          : std::string("nothing was saturated or waiting");
  const std::string idle_text =
      f.host.total_ns > 0 && f.host.busy_share() < kRoundtripMaxHostBusyShare
          ? fmt::format("; the host's CPUs were {:.0f}% idle", idle_pct)
          : std::string();
  if (pg_sleep_share > idle_share) {
    // SELECT pg_sleep(…): the backends slept by the workload's choice.
    v.summary = fmt::format(
        "The workload slept by choice in its own queries (pg_sleep, wait event {}) for {:.0f}% "
        "of the {} time, so its pacing set the throughput, and {}{}.",
        kPgSleepEvent, 100 * pg_sleep_share, r.sessions ? "session" : "client", nothing, idle_text);
    return v;
  }
  if (r.sessions) {
    // record --pg: the application's clients asleep by choice, or waiting
    // for input that is not the database's (their own requests).
    const auto share = [&](std::int64_t ns) {
      return a->client_ns > 0 ? 100 * double(ns) / double(a->client_ns) : 0.0;
    };
    const std::string idle =
        a->client_idle_ns > a->client_sleep_ns
            ? fmt::format(
                  "The clients waited for input that is not the database's (their own "
                  "requests, another service, a pipe; not an answer from the database) for "
                  "{:.0f}% of their sessions' time{}, so what feeds the "
                  "application set the throughput",
                  share(a->client_idle_ns),
                  a->client_sleep_ns > 0
                      ? fmt::format(" and slept by choice {:.0f}%", share(a->client_sleep_ns))
                      : std::string())
            : fmt::format(
                  "The clients were asleep by choice (think time: a timer, not the database) "
                  "for {:.0f}% of their sessions' time{}, so the application's pacing set the "
                  "throughput",
                  share(a->client_sleep_ns),
                  a->client_idle_ns > 0
                      ? fmt::format(" and waited for other input {:.0f}%", share(a->client_idle_ns))
                      : std::string());
    v.summary =
        fmt::format("{}, and {}: the rest is {}{}.", idle, nothing, session_split(*a), idle_text);
    return v;
  }
  const std::string pacing =
      kept ? fmt::format("The fixed rate was kept ({:.1f} tps, mean schedule lag {:.3f} ms)",
                         r.run.tps.value_or(0), r.run.lag_mean_ms.value_or(0))
           : fmt::format(
                 "The clients spent {:.0f}% of their time between queries (think "
                 "time, \\sleep): the script's pacing set the throughput",
                 100 * (1 - a->client_busy_share));
  // Query time per transaction: the latency net of \sleep.
  const double latency_ms = r.run.latency_mean_ms.value_or(0);
  const double query_ms = r.run.queries > 0
                              ? double(a->query_ns) / double(r.run.queries) / common::kNsPerMsDouble
                              : 0.0;
  const std::string latency =
      latency_ms - query_ms >= 0.01
          ? fmt::format(
                "mean latency {:.3f} ms, {:.3f} ms of it \\sleep; query time {:.3f} ms "
                "a transaction",
                latency_ms, latency_ms - query_ms, query_ms)
          : fmt::format("mean latency {:.3f} ms", latency_ms);
  v.summary =
      fmt::format("{}, and {}: {} = {}{}.", pacing, nothing, latency, latency_split(r), idle_text);
  return v;
}

}  // namespace

Verdict decide_verdict(const Report& r, const Facts& f) {
  Verdict v;
  const auto* a = r.accounting ? &*r.accounting : nullptr;
  const bool fixed_rate = r.run.lag_mean_ms.has_value();
  const bool kept = fixed_rate && !rate_not_kept(r.run) && r.run.skipped == 0;
  // The workload's own pg_sleep (ASH rows × period) is pacing too.
  const auto pg_sleep_rows = f.ash_event_rows.find(std::string(kPgSleepEvent));
  const double pg_sleep_share =
      a && a->client_ns > 0 && pg_sleep_rows != f.ash_event_rows.end()
          ? std::min(1.0, double(pg_sleep_rows->second * f.ash_period_ns) / double(a->client_ns))
          : 0.0;
  const double idle_share = a && a->client_ns > 0 ? 1 - a->client_busy_share : 0.0;
  const bool think_time =
      !fixed_rate && a && a->client_ns > 0 && idle_share + pg_sleep_share >= kPacedMinIdleShare;
  const auto limiting = std::find_if(r.findings.begin(), r.findings.end(), [&](const Finding& x) {
    return limits_paced_run(x.kind, f, a);
  });
  if ((kept || think_time) && limiting == r.findings.end())
    return paced_verdict(r, f, a, kept, pg_sleep_share, idle_share);
  if (kept || think_time) {
    v.kind = limiting->kind;
    v.summary = limiting->summary;
    return v;
  }
  // Time nothing measured (a record file's clients not sampled on this host)
  // larger than what the first finding explains: no verdict from a small
  // part. Failed queries are the answer whatever else the file lacks.
  const double unaccounted = unaccounted_share(a);
  // Faults measured apart from the accounting's parts (failed queries, the
  // driver's own stop) are the answer whatever else the file lacks.
  const auto is_fault = [](FindingKind k) {
    return k == FindingKind::errors || k == FindingKind::driver_stopped;
  };
  if (unaccounted >= kMinScore &&
      (r.findings.empty() ||
       (!is_fault(r.findings.front().kind) && unaccounted > r.findings.front().score))) {
    v.reason = "unaccounted";
    v.summary = fmt::format(
        "{} of the {} time was not measured{}: no measured part explains as much, so no "
        "verdict.{}",
        share_pct_text(unaccounted), r.sessions ? "session" : "query",
        r.sessions ? " (the client's side: where the clients of these sessions spent it was not "
                     "sampled on this host — record on the application's host too, or name its "
                     "processes with --client-process)"
                   : "",
        r.findings.empty() ? std::string()
                           : " The largest measured part: " + r.findings.front().summary);
    return v;
  }
  if (!r.findings.empty()) {
    v.kind = r.findings.front().kind;
    v.summary = r.findings.front().summary;
    if (fixed_rate && a && a->schedule_lag_ns > 0) {
      v.summary += fmt::format(
          " Transactions queued in the client for {:.3f} ms on average ({:.0f}% of query time) "
          "behind earlier ones that this slowed.",
          r.run.lag_mean_ms.value_or(0),
          a->query_ns > 0 ? 100.0 * double(a->schedule_lag_ns) / double(a->query_ns) : 0.0);
    }
    return v;
  }
  if (a && a->cannot_account) {
    v.reason = "cannot_account";
    v.summary = "Nothing measured explains the query time: " + *a->cannot_account + ".";
    return v;
  }
  v.reason = a ? "below_thresholds" : "no_queries";
  v.summary = a ? "No finding reached the thresholds: nothing explains 5% of query time or more."
                : "No finding reached the thresholds (this file holds no queries to account).";
  return v;
}

}  // namespace stallscope::correlate::detail
