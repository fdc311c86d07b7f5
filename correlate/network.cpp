// Round trips told apart (correlate/network.h): the network_stack rule, and
// network_roundtrip's culprit and TCP evidence.
#include "correlate/network.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail {
namespace {

double ratio(double part, double whole) {
  return whole > 0 ? part / whole : 0;
}

// A duration in ms with three significant digits: 2.1, 0.0114, 40.
std::string ms_text(double ns) {
  return fmt::format("{:.3g}", ns / common::kNsPerMsDouble);
}

std::string peer_text(const NetworkFacts& n) {
  return n.peer.empty() ? std::string("the server") : n.peer;
}

std::string_view cause_name(StackCause c) {
  switch (c) {
    case StackCause::nagle_delayed_ack:
      return "nagle_delayed_ack";
    case StackCause::retransmission:
      return "retransmission";
    case StackCause::zero_window:
      return "zero_window";
  }
  return "?";
}

}  // namespace

std::optional<StackDiagnosis> diagnose_stack(const NetworkFacts& n, std::int64_t remainder_ns,
                                             std::int64_t queries) {
  // The driver's connections must be TCP for the host's TCP counters to be
  // on its path.
  if (!n.stack || !n.rtt || queries <= 0 || remainder_ns <= 0) return std::nullopt;
  const auto& k = *n.stack;
  const double q = double(queries);
  const double rem = double(remainder_ns);
  const double per_query_ns = rem / q;
  const double rtt_ns = double(n.rtt->rtt_median_ns);
  std::optional<StackDiagnosis> best;
  auto consider = [&](StackCause cause, double time_ns, double events) {
    const auto t = static_cast<std::int64_t>(std::min(time_ns, rem));
    if (t <= 0 || (best && best->time_ns >= t)) return;
    best = StackDiagnosis{cause, t, events / q};
  };
  // Nagle + delayed ACK: delayed ACKs that rose with the queries, standing
  // for about as much time as the remainder holds (a paced client's delayed
  // ACKs of the last response cost nothing, and stand for far more), while
  // the measured round trip explains less than half of it.
  const double delack_ns = double(k.delayed_acks) * double(kDelayedAckNs);
  if (double(k.delayed_acks) >= kStackMinEventsPerQuery * q && delack_ns <= 2 * rem &&
      delack_ns >= kStackMinRemainderShare * rem && rtt_ns < 0.5 * per_query_ns) {
    consider(StackCause::nagle_delayed_ack, delack_ns, double(k.delayed_acks));
  }
  // Packet loss: retransmission timeouts, with retransmissions on the
  // driver's own connections or at ≥ kStackMinRetransShare of the segments.
  const double retrans_share = ratio(double(k.retrans_segs), double(k.out_segs));
  if (k.timeouts > 0 && (n.rtt->retransmits > 0 || retrans_share >= kStackMinRetransShare)) {
    consider(StackCause::retransmission, double(k.timeouts) * double(kRtoMinNs),
             double(k.timeouts));
  }
  // A receive window at zero: the receiver not reading. The delay is the
  // remainder beyond one measured round trip per query.
  const double zero_window = double(k.to_zero_window_adv + k.want_zero_window_adv);
  if (zero_window >= kStackMinEventsPerQuery * q) {
    consider(StackCause::zero_window, rem - q * rtt_ns, zero_window);
  }
  return best;
}

void network_stack(const Report& r, const Facts& f, double service_ns, std::vector<Finding>& out) {
  if (!r.accounting || r.run.queries <= 0) return;
  const auto& a = *r.accounting;
  const auto& n = f.network;
  const auto d = diagnose_stack(n, a.remainder_ns, r.run.queries);
  if (!d) return;
  Finding x;
  x.kind = FindingKind::network_stack;
  x.score = round4(std::clamp(ratio(double(d->time_ns), service_ns), 0.0, 1.0));
  if (x.score < kMinScore) return;
  x.start_ns = f.span.start_ns;
  x.end_ns = f.span.end_ns;
  const auto& k = *n.stack;
  const double queries = double(r.run.queries);
  const std::string peer = peer_text(n);
  const std::string rtt = ms_text(double(n.rtt->rtt_median_ns));
  const double per_query_ms = double(d->time_ns) / queries / common::kNsPerMsDouble;
  const double retrans_pct = 100 * ratio(double(k.retrans_segs), double(k.out_segs));
  switch (d->cause) {
    case StackCause::nagle_delayed_ack:
      x.summary = fmt::format(
          "{} of query time was spent inside the TCP stack, not on the wire: {} delayed ACKs "
          "({:.2f} per query) stand for {:.1f} ms of each query's {:.1f} ms, against a TCP round "
          "trip of {} ms — Nagle's algorithm held a write behind each delayed ACK.",
          share_pct_text(x.score), k.delayed_acks, d->events_per_query, per_query_ms,
          r.run.latency_mean_ms.value_or(0), rtt);
      x.culprit = fmt::format(
          "Nagle + delayed ACK: {:.2f} delayed ACKs per query (~{} ms each) on the path to {} — "
          "a socket without TCP_NODELAY (proxy or client) writing messages in pieces",
          d->events_per_query, ms_text(double(kDelayedAckNs)), peer);
      x.suggestion =
          "Set TCP_NODELAY on every socket of the path that writes a message in more than one "
          "piece — the proxy or pooler between client and server (pgbouncer and libpq set it), "
          "or the client library — or have it write each message whole. Latencies in ~40 ms "
          "steps and TcpExt DelayedACKs rising with the queries are the sign.";
      break;
    case StackCause::retransmission:
      x.summary = fmt::format(
          "{} of query time went to TCP retransmissions: {} retransmission timeouts (at least "
          "{} ms each) and {} segments retransmitted ({:.2f}% of those sent), against a TCP "
          "round trip of {} ms.",
          share_pct_text(x.score), k.timeouts, ms_text(double(kRtoMinNs)), k.retrans_segs,
          retrans_pct, rtt);
      x.culprit = fmt::format(
          "packet loss: {} retransmission timeouts, {:.2f}% of segments retransmitted, on the "
          "path to {}",
          k.timeouts, retrans_pct, peer);
      x.suggestion =
          "Packets are lost between client and server: find the lossy hop (ip -s link and "
          "ethtool -S errors and drops, a full NIC ring, a policer, a netem qdisc left "
          "behind, an overloaded proxy). Each timeout costs at least 200 ms.";
      break;
    case StackCause::zero_window:
      x.summary = fmt::format(
          "{} of query time went to a TCP receive window at zero: {} zero-window "
          "advertisements ({:.2f} per query) — a receiver did not read its socket — against a "
          "TCP round trip of {} ms.",
          share_pct_text(x.score), k.to_zero_window_adv + k.want_zero_window_adv,
          d->events_per_query, rtt);
      x.culprit = fmt::format(
          "receive window at zero: {:.2f} zero-window advertisements per query on the path to "
          "{} — the receiver is not reading",
          d->events_per_query, peer);
      x.suggestion =
          "A receiver of the path stops reading its socket: a client busy between reads of a "
          "large result (fetch in batches, a cursor), a proxy whose buffers are full, or "
          "receive buffers too small for the results (net.ipv4.tcp_rmem).";
      break;
  }
  x.evidence = {
      {"network_stack_share", x.score},
      {"cause", std::string(cause_name(d->cause))},
      {"stack_per_query_ms", round4(per_query_ms)},
      {"remainder_per_query_ms", round4(double(a.remainder_ns) / queries / common::kNsPerMsDouble)},
      {"latency_mean_ms", round4(r.run.latency_mean_ms.value_or(0))},
      {"tcp_rtt_median_ms", round4(ms(n.rtt->rtt_median_ns))},
      {"delayed_acks", k.delayed_acks},
      {"delayed_acks_per_query", round4(double(k.delayed_acks) / queries)},
      {"rto_timeouts", k.timeouts},
      {"retrans_segs", k.retrans_segs},
      {"out_segs", k.out_segs},
      {"retrans_pct", round4(retrans_pct)},
      {"driver_retransmits", n.rtt->retransmits},
      {"zero_window_adv", k.to_zero_window_adv + k.want_zero_window_adv},
      {"zero_window_drops", k.zero_window_drop},
      {"listen_drops", k.listen_drops},
      {"counters_span_s", round4(double(k.span_ns) / common::kNsPerSDouble)}};
  if (!n.peer.empty()) x.evidence.emplace_back("peer", n.peer);
  out.push_back(std::move(x));
}

std::string roundtrip_culprit(const NetworkFacts& n, std::int64_t remainder_ns,
                              std::int64_t queries) {
  if (queries <= 0) return "";
  const double per_query_ns = double(remainder_ns) / double(queries);
  const std::string peer = peer_text(n);
  if (!n.rtt || n.rtt->rtt_median_ns <= 0) {
    return fmt::format(
        "round trips of {} ms per query to {} (no TCP round-trip time measured: a Unix socket, "
        "or a file without tcp_sample)",
        ms_text(per_query_ns), peer);
  }
  const double rtt_ns = double(n.rtt->rtt_median_ns);
  const double trips = per_query_ns / rtt_ns;
  if (trips <= kRoundtripMaxTripsPerQuery) {
    return fmt::format("round trip of {} ms (TCP smoothed RTT) × {} per query to {}",
                       ms_text(rtt_ns), std::max<long long>(1, std::llround(trips)), peer);
  }
  return fmt::format(
      "{} ms per query against a round trip of {} ms (TCP smoothed RTT) to {}: {:.0f} round "
      "trips' worth, more than the wire (wake-ups, a proxy, the client's own waits)",
      ms_text(per_query_ns), ms_text(rtt_ns), peer, trips);
}

void add_roundtrip_evidence(const NetworkFacts& n, std::int64_t remainder_ns, std::int64_t queries,
                            Evidence& evidence) {
  if (!n.rtt || queries <= 0) return;
  const double rtt_ns = double(n.rtt->rtt_median_ns);
  evidence.emplace_back("tcp_rtt_median_ms", round4(ms(n.rtt->rtt_median_ns)));
  evidence.emplace_back("tcp_rttvar_median_ms", round4(ms(n.rtt->rttvar_median_ns)));
  if (rtt_ns > 0) {
    evidence.emplace_back("round_trips_per_query",
                          round4(double(remainder_ns) / double(queries) / rtt_ns));
  }
  evidence.emplace_back("tcp_connections", n.rtt->connections);
  evidence.emplace_back("driver_retransmits", n.rtt->retransmits);
  if (!n.peer.empty()) evidence.emplace_back("peer", n.peer);
}

}  // namespace stallscope::correlate::detail
