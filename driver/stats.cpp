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
    c.connect_failures += s->connect_failures.load(std::memory_order_relaxed);
    c.unfinished += s->unfinished.load(std::memory_order_relaxed);
    c.retried += s->retried.load(std::memory_order_relaxed);
    c.retries += s->retries.load(std::memory_order_relaxed);
    c.serialization_failures += s->serialization_failures.load(std::memory_order_relaxed);
    c.deadlock_failures += s->deadlock_failures.load(std::memory_order_relaxed);
    c.ended_on_failure |= s->ended_on_failure.load(std::memory_order_relaxed);
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

}  // namespace stallscope::driver::detail
