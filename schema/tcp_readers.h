// Typed reads of the run file's TCP tables for explain's network facts
// (correlate/facts_tcp.cpp): tcp_sample (TCP_INFO of the driver's
// connections) and tcp_stack_sample (the host's TCP counters per tick). The
// SQL lives here, callers get values. A file written before a table existed
// lacks it: its reader returns nullopt, as for a table without rows in the
// span.
//
//   if (auto rtt = schema::tcp_rtt_in(store, from_ns, to_ns)) use(rtt->rtt_median_ns);
//   if (auto k = schema::tcp_stack_totals(store, from_ns, to_ns)) use(k->delayed_acks);
//
// Times are wall clock, ns since the epoch. Errors (a failed step) throw
// schema::SqliteError (store.h).
#pragma once

#include <cstdint>
#include <optional>

#include "schema/store.h"

namespace stallscope::schema {

// tcp_sample rows with time_ns in [from_ns, to_ns]: the kernel's smoothed
// round-trip time of the driver's connections as the driver read it.
struct TcpRttSummary {
  std::int64_t samples = 0;        // rows
  std::int64_t connections = 0;    // distinct (client_id, connection)
  std::int64_t rtt_median_ns = 0;  // median of rtt_ns over the rows (lower middle)
  std::int64_t rtt_min_ns = 0;     // smallest rtt_ns
  std::int64_t rttvar_median_ns = 0;
  // Σ over connections of (last − first total_retrans) within the span:
  // segments the driver's connections retransmitted.
  std::int64_t retransmits = 0;
};
// nullopt when the table is absent or has no row in the span.
std::optional<TcpRttSummary> tcp_rtt_in(Store& store, std::int64_t from_ns, std::int64_t to_ns);

// Sums of the tcp_stack_sample rows whose tick (sample.time_ns) is in
// (after_ns, until_ns]; a row covers the span_ns before its tick (about a
// second), so the sums reach up to that far before after_ns. A NULL delta adds nothing; `rows`
// counts the rows with deltas (delayed_acks not NULL), `span_ns` their Σ span_ns.
struct TcpStackTotals {
  std::int64_t rows = 0;
  std::int64_t span_ns = 0;
  std::int64_t delayed_acks = 0, delayed_ack_locked = 0, delayed_ack_lost = 0;
  std::int64_t timeouts = 0, loss_probes = 0, slow_start_retrans = 0, fast_retrans = 0,
               syn_retrans = 0;
  std::int64_t zero_window_drop = 0, to_zero_window_adv = 0, want_zero_window_adv = 0;
  std::int64_t rcvq_drop = 0, listen_overflows = 0, listen_drops = 0;
  std::int64_t retrans_segs = 0, out_segs = 0, in_segs = 0, in_errs = 0, out_rsts = 0;
};
// nullopt when the table is absent or no row in the span has deltas.
std::optional<TcpStackTotals> tcp_stack_totals(Store& store, std::int64_t after_ns,
                                               std::int64_t until_ns);

}  // namespace stallscope::schema
