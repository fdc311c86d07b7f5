// Facts for memory_pressure, kernel_wait and connection_setup: host memory
// pressure, the query path's sleeps by kernel wait channel, and the driver's
// connections opened during the queries. The backends', poolers' and
// driver's process rows come from scan_processes' single scan of
// process_sample (add_path_process_row); added here are the host memory
// totals, the driver's thread rows (thread_sample over the span's ticks) and
// the connections of the span, as explain.cpp read them.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "correlate/detail.h"

namespace stallscope::correlate::detail {
namespace {

// The process's name in KernelWaitFacts::rows_by_wait: backend, driver or
// pooler:<comm>.
std::string role_name(const PathProcess& p) {
  switch (p.role) {
    case PathRole::backend:
      return "backend";
    case PathRole::pooler:
      return "pooler:" + p.comm;
    case PathRole::driver:
      return "driver";
  }
  return "";
}

// One row of a query-path task: its state and wchan at the tick.
void classify(Facts& f, const PathProcess& p, char state, const std::optional<std::string>& wchan) {
  const bool futex_counts = p.role != PathRole::backend;
  if (state != 'S' && state != 'D') return;
  const std::string w = wchan.value_or("");
  const auto family = wchan_family(w);
  if (family == WchanFamily::memory) {
    ++f.memory.path_memory_d_rows;
    ++f.memory.path_memory_wchan_rows[w];
    return;
  }
  if (held_on_query_path(family) || (futex_counts && family == WchanFamily::futex)) {
    ++f.kernel.rows;
    const auto key = fmt::format("{} {}", role_name(p), w);
    ++f.kernel.rows_by_wait[key];
    // A backend asleep (S): the accounting measures it (kernel_sleep.cpp).
    if (p.role == PathRole::backend && state == 'S') {
      ++f.kernel.backend_sleep_rows;
    } else {
      ++f.kernel.other_rows_by_wait[key];
    }
  }
}

}  // namespace

void add_path_process_row(Facts& f, const PathProcess& process, char state,
                          const std::optional<std::string>& wchan,
                          std::optional<std::int64_t> majflt) {
  if (majflt) f.memory.path_majflt += *majflt;
  if (process.role != PathRole::driver) classify(f, process, state, wchan);
}

void add_host_memory(const schema::HostMemoryTotals& t, MemoryFacts& m) {
  m.rows = t.rows;
  m.psi_span_ns = t.psi_span_ns;
  m.psi_some_us = t.psi_some_us;
  m.psi_full_us = t.psi_full_us;
  m.major_faults = t.major_faults;
  m.swap_in_pages = t.swap_in_pages;
  m.swap_out_pages = t.swap_out_pages;
}

void add_driver_thread_rows(const RowSource<schema::ThreadState>& rows, Facts& f) {
  const PathProcess driver{PathRole::driver, {}};
  for (schema::ThreadState row; rows(row);) {
    classify(f, driver, row.state.empty() ? '?' : row.state[0], row.wchan);
  }
}

ConnectionFacts connection_facts(const ConnectionInputs& in) {
  ConnectionFacts c;
  c.connections = in.opened.connections;
  c.connect_latency_ns = in.opened.connect_latency_ns;
  if (c.connections == 0) return c;
  if (in.first_query_gap_ns) c.first_query_gap_ns = *in.first_query_gap_ns;
  for (const auto& b : in.backends) {
    ++c.sampled_backends;
    if (!b.last_sample_time_ns) continue;
    const auto lived = *b.last_sample_time_ns - b.start_ns;
    if (lived < kShortLivedBackendNs) ++c.short_lived_backends;
  }
  return c;
}

}  // namespace stallscope::correlate::detail
