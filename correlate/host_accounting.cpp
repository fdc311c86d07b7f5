// The host's CPU time as an accounting (HostAccounting in correlate.h), for a
// file with neither queries nor client sessions — `record` without --pg, or
// with no client session seen: all CPUs' time over the span split into the
// busiest processes' CPU, everything else that kept a CPU busy, iowait,
// steal and idle. host_sample's deltas give the whole (the eight modes) and
// the busy, iowait, steal and idle parts; process_sample's schedstat deltas
// the named processes', taken out of busy (clamped: the two sources are
// read at slightly different instants).
#include <algorithm>

#include <fmt/format.h>

#include "correlate/passes.h"

namespace stallscope::correlate::detail {

std::optional<HostAccounting> host_accounting(const Facts& f, int cores) {
  const auto& h = f.host;
  if (h.total_ns <= 0) return std::nullopt;
  HostAccounting a;
  a.cores = cores;
  a.wall_ns = f.span.duration_ns();
  a.cpu_ns = h.busy_ns + h.idle_ns + h.iowait_ns + h.steal_ns;
  auto part = [&](Part kind, std::string_view key, std::int64_t ns) {
    a.parts.push_back({.name = part_id(kind, key),
                       .time_ns = ns,
                       .share = a.cpu_ns > 0 ? double(ns) / double(a.cpu_ns) : 0.0});
  };
  std::int64_t busy_left_ns = h.busy_ns;
  for (const auto& p : f.top_other) {
    const auto ns = std::clamp<std::int64_t>(p.cpu_ns, 0, busy_left_ns);
    busy_left_ns -= ns;
    part(Part::process_cpu, fmt::format("{} (pid {})", p.comm, p.pid), ns);
  }
  part(Part::other_cpu, {}, busy_left_ns);
  part(Part::iowait, {}, h.iowait_ns);
  part(Part::steal, {}, h.steal_ns);
  part(Part::idle, {}, h.idle_ns);
  return a;
}

}  // namespace stallscope::correlate::detail
