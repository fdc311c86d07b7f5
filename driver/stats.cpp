#include "driver/stats.h"

#include <algorithm>

namespace stallscope::driver::detail {

Counters sum_counters(const ThreadStatsList& stats) {
  Counters c;
  for (const auto& s : stats) {
    c.lag_sum_ns += s->lag_sum_ns.load(std::memory_order_relaxed);
    c.lag_count += s->lag_count.load(std::memory_order_relaxed);
    c.lag_max_ns = std::max(c.lag_max_ns, s->lag_max_ns.load(std::memory_order_relaxed));
    c.skipped += s->skipped.load(std::memory_order_relaxed);
    c.late += s->late.load(std::memory_order_relaxed);
    c.connections += s->connections.load(std::memory_order_relaxed);
    c.reconnecting += s->reconnecting.load(std::memory_order_relaxed);
    c.clients_lost += s->clients_lost.load(std::memory_order_relaxed);
  }
  return c;
}

common::LatencyHistogram sum_latency(const ThreadStatsList& stats, std::int64_t& errors) {
  common::LatencyHistogram all;
  errors = 0;
  for (const auto& s : stats) {
    s->latency.add_to(all);
    errors += s->errors.load(std::memory_order_relaxed);
  }
  return all;
}

std::int64_t elapsed_ns(const ThreadStatsList& stats) {
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
  for (const auto& s : stats) {
    std::int64_t first = s->first_send_mono_ns.load(std::memory_order_relaxed);
    if (first != 0 && (first_ns == 0 || first < first_ns)) first_ns = first;
    last_ns = std::max(last_ns, s->last_done_mono_ns.load(std::memory_order_relaxed));
  }
  return first_ns != 0 && last_ns > first_ns ? last_ns - first_ns : 0;
}

}  // namespace stallscope::driver::detail
