// Invariants of what import::PgbenchLogParser accepted (import/pgbench_log.h
// promises them): no negative time or count, sums within their bounds.
#pragma once

#include <limits>

#include "fuzz_check.h"
#include "import/pgbench_log.h"

namespace stallscope::fuzz {

inline void check_batch(const import::PgbenchLogParser& p) {
  const auto& b = p.batch();
  for (const auto& q : b.queries) {
    FUZZ_CHECK(q.start_ns >= 0 && q.latency_ns >= 0 && q.client_id >= 0 && q.seq >= 0);
    FUZZ_CHECK(q.start_ns <= std::numeric_limits<std::int64_t>::max() - q.latency_ns);
  }
  for (const auto& s : b.query_skips) FUZZ_CHECK(s.start_ns >= 0 && s.lag_ns >= 0);
  std::int64_t transactions = 0;
  for (const auto& a : b.pgbench_aggregates) {
    FUZZ_CHECK(a.transactions >= 0 && a.latency_sum_ns >= 0 && a.interval_start_ns >= 0);
    FUZZ_CHECK(!a.latency_min_ns || *a.latency_min_ns <= *a.latency_max_ns);
    // No transactions: nothing in the latency and lag statistics.
    FUZZ_CHECK(a.transactions > 0 ||
               (a.latency_sum_ns == 0 && a.latency_sum2_us2 == 0 && a.lag_sum_ns.value_or(0) == 0 &&
                a.lag_sum2_us2.value_or(0) == 0 && a.lag_min_ns.value_or(0) == 0 &&
                a.lag_max_ns.value_or(0) == 0));
    FUZZ_CHECK(!__builtin_add_overflow(transactions, a.transactions, &transactions));
  }
  FUZZ_CHECK(transactions <= import::kMaxCount);
  FUZZ_CHECK(p.totals().transactions == transactions);
}

}  // namespace stallscope::fuzz
