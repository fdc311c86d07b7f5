// Facts for memory_pressure, kernel_wait and connection_setup: host memory
// pressure, the query path's sleeps by kernel wait channel, and the driver's
// connections opened during the queries. The backends', poolers' and
// driver's process rows come from read_processes' single scan of
// process_sample (add_path_process_row); read here are the host memory
// totals, the driver's thread rows (thread_sample over the span's ticks) and
// the client rows of the span.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "correlate/detail.h"
#include "schema/fact_readers.h"

namespace stallscope::correlate::detail {
namespace {

void read_memory(schema::Store& store, Facts& f, Span span) {
  const auto t = schema::host_memory_totals(store, span.start_ns, span.end_ns);
  auto& m = f.memory;
  m.rows = t.rows;
  m.psi_span_ns = t.psi_span_ns;
  m.psi_some_us = t.psi_some_us;
  m.psi_full_us = t.psi_full_us;
  m.major_faults = t.major_faults;
  m.swap_in_pages = t.swap_in_pages;
  m.swap_out_pages = t.swap_out_pages;
}

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

// The driver's thread rows; its, the backends' and the poolers' process rows
// come from read_processes' scan through add_path_process_row.
void read_path_rows(schema::Store& store, const PathRoles& path, Facts& f, std::int64_t first_id,
                    std::int64_t last_id) {
  if (!path.driver_process_id) return;
  // The driver's own threads (ss-driver/N); its process row is the main
  // thread's, which only waits for the run to end.
  schema::DriverThreadStateScan threads(store, *path.driver_process_id, first_id, last_id);
  const PathProcess driver{PathRole::driver, {}};
  for (schema::ThreadState row; threads.next(row);) {
    classify(f, driver, row.state.empty() ? '?' : row.state[0], row.wchan);
  }
}

void read_connections(schema::Store& store, Facts& f, Span span) {
  auto& c = f.connections;
  const auto opened = schema::connects_in(store, span.start_ns, span.end_ns);
  c.connections = opened.connections;
  c.connect_latency_ns = opened.connect_latency_ns;
  if (c.connections == 0) return;
  // Connected → its first query sent (query rows name their connection).
  if (auto gap = schema::mean_first_query_gap_ns(store, span.start_ns, span.end_ns)) {
    c.first_query_gap_ns = *gap;
  }
  // Sampled backends of those connections and how long each lived: from its
  // start to its last sampled tick.
  for (const auto& b :
       schema::connection_backends(store, span.start_ns, span.end_ns, kBackendStartSlackNs)) {
    ++c.sampled_backends;
    if (!b.last_sample_time_ns) continue;
    const auto lived = *b.last_sample_time_ns - b.start_ns;
    if (lived < kShortLivedBackendNs) ++c.short_lived_backends;
  }
}

}  // namespace

void add_path_process_row(Facts& f, const PathProcess& process, char state,
                          const std::optional<std::string>& wchan,
                          std::optional<std::int64_t> majflt) {
  if (majflt) f.memory.path_majflt += *majflt;
  if (process.role != PathRole::driver) classify(f, process, state, wchan);
}

void read_path_facts(schema::Store& store, const PathFactsInputs& in, Facts& f) {
  read_memory(store, f, in.span);
  if (auto range = schema::sample_ids_in(store, in.span.start_ns, in.span.end_ns))
    read_path_rows(store, in.path, f, range->first, range->last);
  if (f.has_queries) read_connections(store, f, in.span);
}

}  // namespace stallscope::correlate::detail
