// driver_stopped: the driver's own process did not run — stopped by SIGSTOP
// or a debugger, a paused VM, or starved — while its queries were
// outstanding. The host sampler runs in the same process, so its missed
// ticks (Facts::sampler_gaps) mark the time; the query time outstanding in
// it is no round trip and no server time but a fault of the client, and the
// finding says so. docs/findings.md, "driver_stopped".
#include <algorithm>

#include <fmt/format.h>

#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail {

namespace {

// The query time of the windows the gaps overlap, in proportion to the
// overlap; 0 without an accounting of queries.
double stopped_query_ns(const Report& r, const Facts& f) {
  if (!r.accounting || r.sessions || r.accounting->query_ns <= 0) return 0;
  double stopped_ns = 0;
  for (const auto& g : f.sampler_gaps) {
    for (const auto& w : r.windows) {
      const auto from = std::max(g.start_ns, w.start_ns);
      const auto to = std::min(g.end_ns, w.end_ns);
      if (to <= from || w.end_ns <= w.start_ns) continue;
      stopped_ns += double(w.query_time_ns) * double(to - from) / double(w.end_ns - w.start_ns);
    }
  }
  return stopped_ns;
}

}  // namespace

void account_driver_stop(Report& r, const Facts& f) {
  if (!r.accounting) return;
  Accounting& a = *r.accounting;
  // The part that holds what nothing else measured: the remainder, or the
  // whole unaccounted time when CPU could not be split.
  const auto rem = std::find_if(a.parts.begin(), a.parts.end(), [](const AccountingPart& p) {
    return p.kind() == Part::remainder || p.kind() == Part::unaccounted;
  });
  if (rem == a.parts.end()) return;
  const auto stopped_ns =
      std::min<std::int64_t>(std::llround(stopped_query_ns(r, f)), rem->time_ns);
  if (stopped_ns <= 0 || double(stopped_ns) < kMinScore * double(a.query_ns)) return;
  rem->time_ns -= stopped_ns;
  rem->share = double(rem->time_ns) / double(a.query_ns);
  if (rem->kind() == Part::remainder) a.remainder_ns = rem->time_ns;
  a.parts.insert(rem, {.name = part_id(Part::driver_stopped),
                       .time_ns = stopped_ns,
                       .share = double(stopped_ns) / double(a.query_ns),
                       .host = "client"});
}

std::optional<Finding> driver_stopped(const Report& r, const Facts& f) {
  if (!r.accounting || r.sessions || f.sampler_gaps.empty()) return std::nullopt;
  const Accounting& a = *r.accounting;
  if (a.query_ns <= 0) return std::nullopt;
  const double stopped_ns = stopped_query_ns(r, f);
  Finding x;
  x.kind = FindingKind::driver_stopped;
  x.score = round4(std::clamp(stopped_ns / double(a.query_ns), 0.0, 1.0));
  if (x.score < kMinScore) return std::nullopt;
  x.start_ns = f.sampler_gaps.front().start_ns;
  x.end_ns = f.sampler_gaps.back().end_ns;
  const auto& longest = *std::max_element(
      f.sampler_gaps.begin(), f.sampler_gaps.end(),
      [](const Span& p, const Span& q) { return p.duration_ns() < q.duration_ns(); });
  const auto s = [&](std::int64_t ns) { return double(ns) / common::kNsPerSDouble; };
  x.summary = fmt::format(
      "The driver's own process did not run for {:.1f} s ({} gap{} without a tick of its sampler, "
      "the longest {:.1f} s from +{:.1f} s) while its queries were outstanding: {} of query time "
      "is that stop — SIGSTOP, a debugger, a paused VM or a starved process — a fault of the "
      "client, not a measurement of the database.",
      s(f.sampler_gap_ns), f.sampler_gaps.size(), f.sampler_gaps.size() == 1 ? "" : "s",
      s(longest.duration_ns()), s(longest.start_ns - f.span.start_ns), share_pct_text(x.score));
  x.culprit =
      fmt::format("the driver's process (stallscope itself) stopped for {:.1f} s from +{:.1f} s",
                  s(longest.duration_ns()), s(longest.start_ns - f.span.start_ns));
  x.evidence = {{"stopped_s", round4(s(f.sampler_gap_ns))},
                {"gaps", static_cast<std::int64_t>(f.sampler_gaps.size())},
                {"longest_gap_s", round4(s(longest.duration_ns()))},
                {"longest_gap_start_s", round4(s(longest.start_ns - f.span.start_ns))},
                {"query_time_stopped_s", round4(stopped_ns / common::kNsPerSDouble)},
                {"sample_period_ms", round4(double(f.sample_period_ns) / common::kNsPerMsDouble)}};
  x.suggestion =
      "Run again without stopping the driver (no SIGSTOP, debugger or suspend), on a host that "
      "gives it CPU: the stopped windows measure the client's stop, not the database.";
  return x;
}

}  // namespace stallscope::correlate::detail
