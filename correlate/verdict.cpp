// The verdict (Verdict in correlate.h): the finding that limited the run, or
// "no bottleneck" when the clients were paced — a fixed rate (-R) kept, or
// think time (\sleep) filling most of their time — and nothing was saturated
// or waiting. Under pacing the throughput is what the clients asked for, so
// the largest part of the latency (a round trip, the backends' own CPU) is
// what the latency is made of, not what limited the run.
#include <algorithm>

#include <fmt/format.h>

#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail {
namespace {

// Kinds that limit a paced run too: a saturated resource or a wait. Backend
// CPU counts only on a saturated host; round trips and connection set-up
// are parts of each query's latency, not a limit on a paced run.
bool limits_paced_run(FindingKind kind, const Facts& f) {
  switch (kind) {
    case FindingKind::server_cpu:
      return f.host.total_ns > 0 && f.host.busy_share() >= kRoundtripMaxHostBusyShare;
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

}  // namespace

bool rate_not_kept(const RunSummary& r) {
  return r.lag_mean_ms && r.latency_mean_ms && *r.latency_mean_ms > 0 &&
         *r.lag_mean_ms >= kRateNotKeptMinLagShare * *r.latency_mean_ms;
}

Verdict decide_verdict(const Report& r, const Facts& f) {
  Verdict v;
  const auto* a = r.accounting ? &*r.accounting : nullptr;
  const bool fixed_rate = r.run.lag_mean_ms.has_value();
  const bool kept = fixed_rate && !rate_not_kept(r.run) && r.run.skipped == 0;
  const bool think_time =
      !fixed_rate && a && a->client_ns > 0 && 1 - a->client_busy_share >= kPacedMinIdleShare;
  const auto limiting = std::find_if(r.findings.begin(), r.findings.end(),
                                     [&](const Finding& x) { return limits_paced_run(x.kind, f); });
  if ((kept || think_time) && limiting == r.findings.end()) {
    v.reason = "paced";
    const double idle_pct = f.host.total_ns > 0 ? 100 * (1 - f.host.busy_share()) : 0;
    const std::string pacing =
        kept ? fmt::format("The fixed rate was kept ({:.1f} tps, mean schedule lag {:.3f} ms)",
                           r.run.tps.value_or(0), r.run.lag_mean_ms.value_or(0))
             : fmt::format(
                   "The clients spent {:.0f}% of their time between queries (think "
                   "time, \\sleep): the script's pacing set the throughput",
                   100 * (1 - a->client_busy_share));
    v.summary = fmt::format(
        "{}, and nothing was saturated or waiting: mean latency {:.3f} ms = {}{}.", pacing,
        r.run.latency_mean_ms.value_or(0), latency_split(r),
        f.host.total_ns > 0 ? fmt::format("; the host's CPUs were {:.0f}% idle", idle_pct) : "");
    return v;
  }
  if (kept || think_time) {
    v.kind = limiting->kind;
    v.summary = limiting->summary;
    return v;
  }
  if (!r.findings.empty()) {
    v.kind = r.findings.front().kind;
    v.summary = r.findings.front().summary;
    if (fixed_rate && a && a->schedule_lag_ns > 0) {
      v.summary += fmt::format(
          " The fixed rate was not kept: transactions queued in the client for {:.3f} ms on "
          "average ({:.0f}% of query time) behind earlier ones that this slowed.",
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
