// The pooler's part of the query path beyond its CPU: the time queries
// waited in pgbouncer for a server connection (pooler_sample, written by the
// pooler sampler from SHOW STATS total_wait_time and SHOW POOLS), per window
// and over the span, and the pool_wait finding built on it.
#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/conninfo.h"
#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail {
namespace {

// How much of (from, to] lies in [a, b).
std::int64_t overlap_ns(std::int64_t from, std::int64_t to, std::int64_t a, std::int64_t b) {
  return std::max<std::int64_t>(0, std::min(to, b) - std::max(from, a));
}

// value × part ÷ whole without overflow.
std::int64_t prorate(std::int64_t value, std::int64_t part, std::int64_t whole) {
  if (whole <= 0) return 0;
  return static_cast<std::int64_t>(static_cast<__int128>(value) * part / whole);
}

}  // namespace

void add_pooler_facts(const PoolerFactsInputs& in, Facts& f, std::vector<std::string>& notes) {
  const auto& windows = in.windows;
  const Span span = in.span;
  auto& p = f.pooler;
  p.window_wait_ns.assign(windows.size(), 0);
  // Rows whose poll interval (time_ns − interval_ns, time_ns] reaches into
  // the span [start, end), and gauges of polls within [start, end].
  const std::set<std::string>& seen = in.databases;
  if (seen.empty()) return;
  // The driver's database, as the pooler names it: the run's dbname.
  std::optional<std::string> dbname;
  if (in.run_conninfo) dbname = conninfo_value(*in.run_conninfo, "dbname");
  if (dbname && seen.contains(*dbname)) {
    p.databases = {*dbname};
    p.driver_database = true;
  } else {
    p.databases.assign(seen.begin(), seen.end());
  }
  const std::set<std::string> counted(p.databases.begin(), p.databases.end());
  std::vector<std::int64_t> intervals;  // for the note: the median poll period
  for (schema::PoolerSample row; in.rows(row);) {
    if (!counted.contains(row.database)) continue;
    const std::int64_t t = row.time_ns;
    if (t <= span.end_ns) {
      keep_max(p.cl_waiting_max, row.cl_waiting);
      keep_max(p.sv_active_max, row.sv_active);
      keep_max(p.maxwait_max_ns, row.maxwait_ns);
    }
    if (!row.interval_ns) continue;  // first poll: no deltas
    const std::int64_t interval = *row.interval_ns;
    const std::int64_t from = t - interval;
    const std::int64_t in_span = overlap_ns(from, t, span.start_ns, span.end_ns);
    if (in_span <= 0) continue;
    p.available = true;
    intervals.push_back(interval);
    const std::int64_t wait = row.wait_ns.value_or(0);
    const std::int64_t xacts = row.xacts.value_or(0);
    p.wait_ns += prorate(wait, in_span, interval);
    p.xacts += prorate(xacts, in_span, interval);
    if (row.xact_ns) p.xact_ns = p.xact_ns.value_or(0) + prorate(*row.xact_ns, in_span, interval);
    if (wait == 0) continue;
    // Windows are in time order and partition the span [start, end): those the interval overlaps.
    auto it = std::upper_bound(windows.begin(), windows.end(), std::max(from, span.start_ns),
                               [](std::int64_t v, const Window& w) { return v < w.start_ns; });
    for (auto k = static_cast<std::size_t>(std::max<std::ptrdiff_t>(0, it - windows.begin() - 1));
         k < windows.size() && windows[k].start_ns < t; ++k) {
      p.window_wait_ns[k] +=
          prorate(wait, overlap_ns(from, t, windows[k].start_ns, windows[k].end_ns), interval);
    }
  }
  if (!p.available) return;
  // The poll interval the note shows: the upper median (the element at
  // size/2, not a mean of the two middle ones as stalls.cpp's median takes).
  std::nth_element(intervals.begin(), intervals.begin() + intervals.size() / 2, intervals.end());
  const std::int64_t upper_median_interval_ns = intervals[intervals.size() / 2];
  notes.push_back(fmt::format(
      "{} wait for a server connection (path_wait:{}) is its SHOW STATS total_wait_time for {} "
      "{}, polled every {:.1f} s (median) and prorated over the windows by time.",
      kPoolerName, kPoolerName, p.driver_database ? "the run's database" : "the databases",
      fmt::join(p.databases, ", "), double(upper_median_interval_ns) / kNsPerS));
}

void pool_wait(const Report& r, const Facts& f, std::vector<Finding>& out) {
  if (!r.accounting || !r.accounting->path_wait_ns || service_ns(*r.accounting) <= 0) return;
  const auto& a = *r.accounting;
  const double share = double(*a.path_wait_ns) / double(service_ns(a));
  const bool have_host = f.host.total_ns > 0;
  const double busy = have_host ? f.host.busy_share() : 0.0;
  // Saturated CPUs discount the wait only as far as the pool's server
  // connections were busy on CPU while held: connections held mostly waiting
  // (round trips through the pooler, sleeps, I/O) would serve more clients if
  // there were more of them, whoever saturates the CPUs.
  // pgbouncer counts a transaction's time from the client's first query, so
  // total_xact_time includes the wait for a server connection: held = xact − wait.
  const bool held_known = f.pooler.xact_ns.has_value();
  const std::int64_t held_ns =
      held_known ? std::max<std::int64_t>(0, f.pooler.xact_ns.value_or(0) - f.pooler.wait_ns) : 0;
  const double cpu_bound =
      held_ns > 0 ? std::clamp(double(a.server_cpu_ns) / double(held_ns), 0.0, 1.0) : 1.0;
  const double saturation =
      1.0 - std::clamp((1.0 - busy) / (1.0 - kRoundtripMaxHostBusyShare), 0.0, 1.0);
  const double idle_weight = 1.0 - saturation * cpu_bound;
  Finding x;
  x.kind = FindingKind::pool_wait;
  x.score = round4(std::clamp(share * idle_weight, 0.0, 1.0));
  if (x.score < kMinScore) return;
  // The windows where the wait was at least kMinScore of their query time.
  std::optional<std::size_t> first, last;
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    const auto& w = r.windows[i].accounting;
    if (w && w->path_wait_ns && service_ns(*w) > 0 &&
        double(*w->path_wait_ns) / double(service_ns(*w)) >= kMinScore) {
      if (!first) first = i;
      last = i;
    }
  }
  x.start_ns = first ? r.windows[*first].start_ns : f.span.start_ns;
  x.end_ns = last ? r.windows[*last].end_ns : f.span.end_ns;
  const double wait_s = double(*a.path_wait_ns) / kNsPerS;
  const double per_xact_ms =
      f.pooler.xacts > 0 ? double(*a.path_wait_ns) / double(f.pooler.xacts) / common::kNsPerMsDouble
                         : 0;
  x.summary = fmt::format(
      "Queries waited {:.3f} s for a server connection in {}, {:.0f}% of query time ({:.3f} ms "
      "per transaction; cl_waiting up to {}, {} server connections busy at most).",
      wait_s, kPoolerName, 100 * share, per_xact_ms,
      f.pooler.cl_waiting_max ? fmt::format("{}", *f.pooler.cl_waiting_max) : std::string("?"),
      f.pooler.sv_active_max ? fmt::format("{}", *f.pooler.sv_active_max) : std::string("?"));
  x.evidence = {{"pool_wait_share", round4(share)},
                {"pool_wait_s", round4(wait_s)},
                {"pool_wait_per_xact_ms", round4(per_xact_ms)},
                {"pooler", std::string(kPoolerName)},
                {"databases", fmt::format("{}", fmt::join(f.pooler.databases, ","))},
                {"pooled_xacts", f.pooler.xacts}};
  if (f.pooler.cl_waiting_max) x.evidence.emplace_back("cl_waiting_max", *f.pooler.cl_waiting_max);
  if (f.pooler.sv_active_max) x.evidence.emplace_back("sv_active_max", *f.pooler.sv_active_max);
  if (f.pooler.maxwait_max_ns)
    x.evidence.emplace_back("maxwait_max_ms",
                            round4(double(*f.pooler.maxwait_max_ns) / common::kNsPerMsDouble));
  if (a.clients > 0) x.evidence.emplace_back("clients", std::int64_t{a.clients});
  if (have_host) x.evidence.emplace_back("host_cpu_busy_pct", round4(100 * busy));
  x.evidence.emplace_back("server_cpu_of_held_share", round4(cpu_bound));
  if (held_known) x.evidence.emplace_back("server_held_s", round4(double(held_ns) / kNsPerS));
  x.evidence.emplace_back("idle_cpu_weight", round4(idle_weight));
  x.culprit = fmt::format(
      "{}'s pool for {}: {} server connection{} busy at most, up to {} clients waiting",
      kPoolerName, fmt::join(f.pooler.databases, ","),
      f.pooler.sv_active_max ? fmt::format("{}", *f.pooler.sv_active_max) : std::string("?"),
      f.pooler.sv_active_max == 1 ? "" : "s",
      f.pooler.cl_waiting_max ? fmt::format("{}", *f.pooler.cl_waiting_max) : std::string("?"));
  x.suggestion =
      idle_weight <= 0.5 + 1e-9
          ? fmt::format(
                "The host's CPUs were {:.0f}% busy and the pool's server connections were on CPU "
                "for most of the time they were held: a larger pool would move this queue into "
                "the run queue. Make each transaction cheaper or add "
                "cores before raising {}'s default_pool_size.",
                100 * busy, kPoolerName)
          : fmt::format(
                "The pool has fewer server connections than clients wanting one: raise {}'s "
                "default_pool_size (or the database's pool_size) towards the {} clients, or run "
                "fewer clients (-c); SHOW POOLS cl_waiting should drop to 0.",
                kPoolerName, a.clients);
  out.push_back(std::move(x));
}

}  // namespace stallscope::correlate::detail
