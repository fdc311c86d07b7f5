// Round trips told apart (internal to the correlator): what explain knows of
// the network between the driver and the server, and the two kinds that read
// it — network_roundtrip (real distance: the remainder is about the measured
// round-trip time × the round trips per query) and network_stack (delays
// inside the client's or server's TCP stack: Nagle's algorithm held behind a
// delayed ACK, retransmission timeouts, a receive window at zero).
//
// Sources: tcp_sample (TCP_INFO of each driver connection, about once a
// second: the kernel's smoothed RTT, retransmissions) and tcp_stack_sample
// (the host's TcpExt and Tcp counters per host tick), both read over the
// analysed span and handed to network_facts (facts_tcp.cpp); the rules are in
// network.cpp, called by findings.cpp. Thresholds are documented in
// docs/findings.md ("Round trips and the TCP stack").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/units.h"
#include "correlate/correlate.h"
#include "schema/tcp_readers.h"

namespace stallscope::schema {
class Store;
}

namespace stallscope::correlate::detail {

struct Facts;

// ---- Thresholds ----

// Linux's delayed-ACK timer at its floor (TCP_DELACK_MIN, HZ/25): what one
// delayed ACK costs a query whose second write Nagle held behind it.
inline constexpr std::int64_t kDelayedAckNs = 40 * common::kNsPerMs;
// Linux's smallest retransmission timeout (TCP_RTO_MIN): what one RTO costs
// at least.
inline constexpr std::int64_t kRtoMinNs = 200 * common::kNsPerMs;
// network_stack reads the host-wide counters as the run's only when they rose
// with its queries: delayed ACKs (or zero-window advertisements) at least
// this many per query ...
inline constexpr double kStackMinEventsPerQuery = 0.1;
// ... and the time they stand for at least this share of the remainder.
inline constexpr double kStackMinRemainderShare = 0.5;
// Retransmissions count as packet loss at this share of segments sent or more
// (with an RTO, or retransmissions on the driver's own connections).
inline constexpr double kStackMinRetransShare = 0.01;
// network_roundtrip's culprit names the round trips per query (remainder ÷
// RTT) up to this many; above, the remainder is more than the wire.
inline constexpr double kRoundtripMaxTripsPerQuery = 10;

// What explain read of the network over the analysed span.
struct NetworkFacts {
  // tcp_sample: the driver's TCP connections (absent: Unix sockets, an
  // imported log, a file without the table).
  std::optional<schema::TcpRttSummary> rtt;
  // tcp_stack_sample: the host's TCP counters (absent: a file without the table).
  std::optional<schema::TcpStackTotals> stack;
  // The server as the run's conninfo names it, "host:port" (a Unix socket:
  // its directory); empty when unknown.
  std::string peer;
};

// The network facts (facts_tcp.cpp) from the analysed span's TCP samples
// (schema::tcp_rtt_in, schema::tcp_stack_totals) and the run's conninfo
// (schema::run_conninfo), whose host and port name the server.
NetworkFacts network_facts(std::optional<schema::TcpRttSummary> rtt,
                           std::optional<schema::TcpStackTotals> stack,
                           const std::optional<std::string>& conninfo);

// What the TCP stack did, as network_stack names it.
enum class StackCause {
  nagle_delayed_ack,  // delayed ACKs with the queries: Nagle held a write behind each
  retransmission,     // RTOs / retransmitted segments: packet loss
  zero_window,        // a receive window advertised at 0: the receiver not reading
};

// The stack's part of the remainder, when the counters name one (network.cpp).
struct StackDiagnosis {
  StackCause cause = StackCause::nagle_delayed_ack;
  std::int64_t time_ns = 0;  // the delay it stands for, at most the remainder
  double events_per_query = 0;
};
// nullopt when the counters explain no part of the remainder: no stack rows,
// no TCP on the driver's path, or no cause reaching its thresholds.
std::optional<StackDiagnosis> diagnose_stack(const NetworkFacts& n, std::int64_t remainder_ns,
                                             std::int64_t queries);

// network_stack (network.cpp): the remainder the TCP counters explain, as a
// share of `service_ns`; appended to `out` when ≥ kMinScore.
void network_stack(const Report& r, const Facts& f, double service_ns, std::vector<Finding>& out);

// network_roundtrip's culprit: the measured round trip × the round trips per
// query to the peer, e.g. "round trip of 2.1 ms (TCP smoothed RTT) × 1 per
// query to 127.0.0.1:5433"; without a measured RTT, the remainder per query
// and the peer.
std::string roundtrip_culprit(const NetworkFacts& n, std::int64_t remainder_ns,
                              std::int64_t queries);
// Evidence network_roundtrip adds from the TCP samples (nothing without them).
void add_roundtrip_evidence(const NetworkFacts& n, std::int64_t remainder_ns, std::int64_t queries,
                            Evidence& evidence);

}  // namespace stallscope::correlate::detail
