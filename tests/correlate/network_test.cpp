// Round trips told apart (correlate/network.h): network_stack and
// network_roundtrip ranked by detail::find on hand-built accountings and TCP
// facts, with the culprits they name.
#include "correlate/network.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "common/units.h"
#include "correlate/detail.h"
#include "support/test_support.h"

namespace stallscope::correlate::detail {
namespace {

using test::kMs;

// A closed loop of one client: `queries` queries of `query_ms` each, of which
// `remainder_ms` per query is neither CPU nor a server wait.
struct Run {
  Report report;
  Facts facts;
};
Run closed_loop(std::int64_t queries, double query_ms, double remainder_ms) {
  Run r;
  r.report.run.queries = queries;
  r.report.run.latency_mean_ms = query_ms;
  Accounting a;
  a.clients = 1;
  a.query_ns = static_cast<std::int64_t>(double(queries) * query_ms * double(kMs));
  a.wall_ns = a.query_ns;
  a.remainder_ns = static_cast<std::int64_t>(double(queries) * remainder_ms * double(kMs));
  r.report.accounting = a;
  r.facts.ash_available = true;
  r.facts.span = {0, a.wall_ns};
  r.facts.network.peer = "127.0.0.1:5433";
  return r;
}

schema::TcpRttSummary rtt(double median_ms) {
  return {.samples = 40,
          .connections = 1,
          .rtt_median_ns = static_cast<std::int64_t>(median_ms * double(kMs)),
          .rtt_min_ns = static_cast<std::int64_t>(median_ms * double(kMs)),
          .rttvar_median_ns = static_cast<std::int64_t>(median_ms * double(kMs)) / 2,
          .retransmits = 0};
}

const Finding* of_kind(const std::vector<Finding>& v, FindingKind k) {
  auto it = std::find_if(v.begin(), v.end(), [&](const Finding& x) { return x.kind == k; });
  return it == v.end() ? nullptr : &*it;
}

TEST(NetworkStack, NagleBehindDelayedAcksRanksFirstAndNamesTcpNodelay) {
  // 1000 queries of 41 ms, 40.5 ms of it remainder; one delayed ACK per
  // query; the driver's connection (to the proxy) has a 0.1 ms RTT.
  auto run = closed_loop(1000, 41, 40.5);
  run.facts.network.rtt = rtt(0.1);
  run.facts.network.stack = schema::TcpStackTotals{
      .rows = 410, .span_ns = 41'000 * kMs, .delayed_acks = 1000, .out_segs = 4000};
  const auto found = find(run.report, run.facts);
  ASSERT_FALSE(found.empty());
  const Finding& first = found.front();
  EXPECT_EQ(first.kind, FindingKind::network_stack);
  // min(1000 × 40 ms, 40.5 s) ÷ 41 s.
  EXPECT_DOUBLE_EQ(first.score, 0.9756);
  EXPECT_NE(first.culprit.find("Nagle + delayed ACK: 1.00 delayed ACKs per query (~40 ms each)"),
            std::string::npos)
      << first.culprit;
  EXPECT_NE(first.culprit.find("127.0.0.1:5433"), std::string::npos);
  EXPECT_NE(first.culprit.find("TCP_NODELAY"), std::string::npos);
  EXPECT_NE(first.suggestion.find("TCP_NODELAY"), std::string::npos);
  // The round trips keep only what the stack did not claim: 0.9878 − 0.9756.
  EXPECT_EQ(of_kind(found, FindingKind::network_roundtrip), nullptr);
}

TEST(NetworkStack, OnASaturatedHostTheStackDelayIsNotChargedAsContention) {
  // Two clients on one driver thread, the host 95 % busy with 1.9 cores of
  // other processes: the remainder would be charged to runqueue as
  // contention, but 40 s of it are delayed-ACK timers.
  auto run = closed_loop(1000, 41, 40.5);
  run.report.accounting->clients = 2;
  run.facts.threads = 1;
  run.facts.cores = 2;
  run.facts.host = HostTotals{.busy_ns = 95, .idle_ns = 5, .total_ns = 100};
  run.facts.other_cpu_ns = 19 * run.report.accounting->wall_ns / 10;
  run.facts.network.rtt = rtt(0.1);
  run.facts.network.stack =
      schema::TcpStackTotals{.rows = 410, .span_ns = 41'000 * kMs, .delayed_acks = 1000};
  const auto found = find(run.report, run.facts);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.front().kind, FindingKind::network_stack);
  // Only the 0.5 s the stack does not explain is charged: 1.2 % < kMinScore.
  EXPECT_EQ(of_kind(found, FindingKind::runqueue), nullptr);
  // Without the counters the same remainder is contention.
  run.facts.network.stack.reset();
  const auto without = find(run.report, run.facts);
  ASSERT_FALSE(without.empty());
  EXPECT_EQ(without.front().kind, FindingKind::runqueue);
}

TEST(NetworkStack, RealDistanceStaysARoundTripNamedByItsRtt) {
  // 2.1 ms of remainder per query against a 2.1 ms smoothed RTT; three
  // delayed ACKs from elsewhere on the host.
  auto run = closed_loop(2000, 2.3, 2.1);
  run.facts.network.rtt = rtt(2.1);
  run.facts.network.stack =
      schema::TcpStackTotals{.rows = 46, .span_ns = 4600 * kMs, .delayed_acks = 3};
  const auto found = find(run.report, run.facts);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.front().kind, FindingKind::network_roundtrip);
  EXPECT_EQ(found.front().culprit,
            "round trip of 2.1 ms (TCP smoothed RTT) × 1 per query to 127.0.0.1:5433");
  EXPECT_EQ(of_kind(found, FindingKind::network_stack), nullptr);
}

TEST(NetworkStack, APacedClientsDelayedAcksAreNoStackDelay) {
  // One delayed ACK per query (the client's ACK of each response, sent by
  // the timer while it thinks) but 0.1 ms of remainder per query: 40 ms each
  // would be far more than the queries waited.
  auto run = closed_loop(1000, 0.2, 0.1);
  run.facts.network.rtt = rtt(0.02);
  run.facts.network.stack =
      schema::TcpStackTotals{.rows = 100, .span_ns = 10'000 * kMs, .delayed_acks = 1000};
  EXPECT_FALSE(diagnose_stack(run.facts.network, run.report.accounting->remainder_ns, 1000));
  const auto found = find(run.report, run.facts);
  EXPECT_EQ(of_kind(found, FindingKind::network_stack), nullptr);
}

TEST(NetworkStack, RetransmissionTimeoutsWithLossArePacketLoss) {
  auto run = closed_loop(1000, 10, 5);
  run.facts.network.rtt = rtt(1);
  run.facts.network.stack = schema::TcpStackTotals{.rows = 100,
                                                   .span_ns = 10'000 * kMs,
                                                   .timeouts = 20,
                                                   .retrans_segs = 200,
                                                   .out_segs = 10'000};
  const auto d = diagnose_stack(run.facts.network, run.report.accounting->remainder_ns, 1000);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->cause, StackCause::retransmission);
  EXPECT_EQ(d->time_ns, 20 * kRtoMinNs);
  const auto found = find(run.report, run.facts);
  const Finding* stack = of_kind(found, FindingKind::network_stack);
  ASSERT_NE(stack, nullptr);
  EXPECT_DOUBLE_EQ(stack->score, 0.4);  // 4 s of 10 s
  EXPECT_EQ(stack->culprit,
            "packet loss: 20 retransmission timeouts, 2.00% of segments retransmitted, on the "
            "path to 127.0.0.1:5433");
  // The rest of the remainder (5 s − 4 s = 10 %) is still round trips.
  const Finding* trips = of_kind(found, FindingKind::network_roundtrip);
  ASSERT_NE(trips, nullptr);
  EXPECT_DOUBLE_EQ(trips->score, 0.1);
  EXPECT_EQ(trips->culprit,
            "round trip of 1 ms (TCP smoothed RTT) × 1 per query to 127.0.0.1:5433");
}

TEST(NetworkStack, TimeoutsWithoutLossOnThePathAreNotNamed) {
  // RTOs elsewhere on the host: 0.1 % of segments retransmitted, none on the
  // driver's connections.
  auto run = closed_loop(1000, 10, 5);
  run.facts.network.rtt = rtt(1);
  run.facts.network.stack = schema::TcpStackTotals{
      .rows = 100, .span_ns = 10'000 * kMs, .timeouts = 20, .retrans_segs = 10, .out_segs = 10'000};
  EXPECT_FALSE(diagnose_stack(run.facts.network, run.report.accounting->remainder_ns, 1000));
  // With retransmissions on the driver's own connections it is loss again.
  run.facts.network.rtt->retransmits = 3;
  EXPECT_TRUE(diagnose_stack(run.facts.network, run.report.accounting->remainder_ns, 1000));
}

TEST(NetworkStack, AZeroWindowTakesTheRemainderBeyondOneRoundTrip) {
  auto run = closed_loop(1000, 40, 30);
  run.facts.network.rtt = rtt(1);
  run.facts.network.stack = schema::TcpStackTotals{
      .rows = 400, .span_ns = 40'000 * kMs, .to_zero_window_adv = 300, .want_zero_window_adv = 200};
  const auto found = find(run.report, run.facts);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.front().kind, FindingKind::network_stack);
  EXPECT_DOUBLE_EQ(found.front().score, 0.725);  // (30 s − 1000 × 1 ms) ÷ 40 s
  EXPECT_NE(found.front().culprit.find("receive window at zero: 0.50 zero-window"),
            std::string::npos)
      << found.front().culprit;
}

TEST(NetworkStack, WithoutTcpOnTheDriversPathTheCountersAreNotRead) {
  // A Unix-socket run: no tcp_sample rows; the host's delayed ACKs are
  // someone else's.
  auto run = closed_loop(1000, 41, 40.5);
  run.facts.network.peer = "/tmp/pg";
  run.facts.network.stack =
      schema::TcpStackTotals{.rows = 410, .span_ns = 41'000 * kMs, .delayed_acks = 1000};
  const auto found = find(run.report, run.facts);
  EXPECT_EQ(of_kind(found, FindingKind::network_stack), nullptr);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.front().kind, FindingKind::network_roundtrip);
  EXPECT_EQ(found.front().culprit,
            "round trips of 40.5 ms per query to /tmp/pg (no TCP round-trip time measured: a "
            "Unix socket, or a file without tcp_sample)");
}

TEST(NetworkStack, ARemainderFarBeyondTheRttIsNotCalledTheWire) {
  EXPECT_EQ(roundtrip_culprit(NetworkFacts{.rtt = rtt(0.01), .peer = "db:5432"}, 500 * kMs, 1000),
            "0.5 ms per query against a round trip of 0.01 ms (TCP smoothed RTT) to db:5432: 50 "
            "round trips' worth, more than the wire (wake-ups, a proxy, the client's own waits)");
  EXPECT_EQ(roundtrip_culprit(NetworkFacts{.rtt = rtt(0.5)}, 1600 * kMs, 1000),
            "round trip of 0.5 ms (TCP smoothed RTT) × 3 per query to the server");
}

}  // namespace
}  // namespace stallscope::correlate::detail
