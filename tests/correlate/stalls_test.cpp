// The correlator on hand-made run files with exact numbers (run_fixture.h):
// stalls: the slow window explained by its lock wait and the root blocker, restarts and outages,
// failed answers, a stall to the end.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"
#include "correlate/run_fixture.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using namespace test_run;

TEST(CorrelateStall, ExplainsTheSlowWindowByItsLockWaitAndBlocker) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 50);
  fx.rows(kBackendId[1], 50);
  // Window 5 (t0 + 5 s): both queries take 3 s instead of 1 s ...
  for (auto& q : fx.batch().queries) {
    if (q.seq == 5) q.latency_ns = 3 * kS;
  }
  // ... while both backends wait on a row lock held by pid 999.
  for (int pid : kBackendPid) fx.ash(pid, "Lock", "transactionid", 10, 50);
  for (auto& a : fx.batch().pg_activity) a.blocking_pids = "999";
  fx.batch().pg_activity.push_back({.time_ns = kT0 + 5 * kS,
                                    .ash_tick = 51,
                                    .pid = 999,
                                    .backend_type = "client backend",
                                    .state = "idle in transaction",
                                    .wait_event_type = "Client",
                                    .wait_event = "ClientRead"});
  auto r = fx.explain();
  // Window 5: the queries sent there are outstanding throughout and none is
  // answered — a full stop, explained by the lock wait and its blocker.
  ASSERT_EQ(r.stalls.size(), 2u);
  const auto& s = r.stalls[0];
  EXPECT_EQ(s.window_index, 5u);
  EXPECT_EQ(s.queries, 0);
  EXPECT_EQ(r.windows[5].query_time_ns, 2 * kS);
  EXPECT_EQ(to_string(s.cause), "lock_wait");
  EXPECT_FALSE(s.latency_mean_ms);
  EXPECT_DOUBLE_EQ(*s.typical_latency_mean_ms, 1000);
  EXPECT_NE(s.explanation.find("no query answered"), std::string::npos) << s.explanation;
  EXPECT_NE(s.explanation.find("pid 999"), std::string::npos) << s.explanation;
  EXPECT_NE(s.explanation.find("idle in transaction"), std::string::npos) << s.explanation;
  // Window 7: the held-up queries are answered there (3 s and 1 s), part of
  // the same stall.
  const auto& tail = r.stalls[1];
  EXPECT_EQ(tail.window_index, 7u);
  EXPECT_DOUBLE_EQ(*tail.latency_mean_ms, 2000);
  EXPECT_EQ(to_string(tail.cause), "lock_wait");
  EXPECT_NE(tail.explanation.find("Part of the stall at +5 s"), std::string::npos)
      << tail.explanation;
  // Saved into the run file, replacing earlier rows on each save.
  save_report(fx.store(), r);
  save_report(fx.store(), r);
  auto& db = fx.store().db();
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM stall").getInt64(), 2);
  EXPECT_EQ(db.execAndGet("SELECT cause FROM stall WHERE window_index = 5").getString(),
            "lock_wait");
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM finding").getInt64(),
            static_cast<std::int64_t>(r.findings.size()));
  EXPECT_EQ(db.execAndGet("SELECT kind FROM finding WHERE rank = 1").getString(),
            to_string(r.findings[0].kind));
}

TEST(CorrelateStall, NamesTheRootOfTheChainNotAFirstBlockerThatWaitsItself) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 50);
  fx.rows(kBackendId[1], 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq == 5) q.latency_ns = 3 * kS;
  }
  // Window 5: backend 201 waits for the tuple lock 202 holds, 202 for the
  // transaction of pid 999, idle in transaction (an outside session, with
  // a row in each of those polls, as the ASH sampler now stores it).
  fx.ash(kBackendPid[0], "Lock", "tuple", 10, 50);
  fx.ash(kBackendPid[1], "Lock", "transactionid", 10, 50);
  fx.ash(999, "Client", "ClientRead", 10, 50, "idle in transaction");
  fx.batch().pg_query_texts.push_back(
      {.query_text_id = 1, .query = "UPDATE acct SET n = 0", .first_time_ns = kT0});
  for (auto& a : fx.batch().pg_activity) {
    if (a.pid == kBackendPid[0]) a.blocking_pids = std::to_string(kBackendPid[1]);
    if (a.pid == kBackendPid[1]) a.blocking_pids = "999";
    if (a.pid == 999) {
      a.application_name = "batch";
      a.query_text_id = 1;
      a.xact_start_ns = kT0 + 2 * kS;
    }
  }
  auto r = fx.explain();
  ASSERT_FALSE(r.stalls.empty());
  const auto& s = r.stalls[0];
  EXPECT_EQ(to_string(s.cause), "lock_wait");
  // 201's first blocker is 202, which itself waits: the root is named.
  EXPECT_EQ(s.explanation.find("blocked mostly by"), std::string::npos) << s.explanation;
  EXPECT_NE(s.explanation.find("the root blocker pid 999 idle in transaction for 3.9 s"),
            std::string::npos)
      << s.explanation;
  // The last of the 10 polls is at +5.9 s, the transaction began at +2 s.
  EXPECT_EQ(s.culprit,
            "pid 999 idle in transaction for 3.9 s (client backend, app 'batch'): UPDATE acct SET "
            "n = 0 — holds the transactionid lock 2 backends wait for (chain: tuple → "
            "transactionid); the application holds it (cycle through the application likely)");
  const auto* f = finding(r, "lock_wait");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->culprit, s.culprit);
  EXPECT_EQ(evidence<std::int64_t>(*f, "root_blocker_pid"), 999);
  EXPECT_EQ(evidence<std::int64_t>(*f, "root_blocker_waiter_samples"), 20);
}

// A server restart: in window 5 one client's query is cut by the shutdown
// (57P01) and the other waits 3 s for the server to come back. The stall is
// the lost connections, not whatever else moved.
TEST(CorrelateStall, ARestartIsNamedByItsLostConnections) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq == 5 && q.client_id == 0) q.latency_ns = 3 * kS;
    if (q.seq == 5 && q.client_id == 1) {
      fx.batch().query_errors.push_back({.client_id = 1,
                                         .seq = 5,
                                         .start_ns = q.start_ns,
                                         .sqlstate = "57P01",
                                         .error = "terminating connection due to administrator "
                                                  "command"});
    }
  }
  auto r = fx.explain();
  // Window 5, and window 7 where client 0's 3 s query was answered: one stall.
  ASSERT_EQ(r.stalls.size(), 2u);
  EXPECT_EQ(r.stalls[0].window_index, 5u);
  EXPECT_EQ(to_string(r.stalls[0].cause), "connection_lost");
  EXPECT_NE(r.stalls[0].explanation.find("1 query lost its connection in this window "
                                         "(SQLSTATE 57P01, admin shutdown)"),
            std::string::npos)
      << r.stalls[0].explanation;
  EXPECT_EQ(r.stalls[1].window_index, 7u);
  EXPECT_EQ(to_string(r.stalls[1].cause), "connection_lost");
  EXPECT_NE(r.stalls[1].explanation.find("Part of the stall at +5 s"), std::string::npos)
      << r.stalls[1].explanation;
}

// An outage as the driver stores it: client 1's query at 5 s is cut by the
// shutdown (57P01) and its next two rows are failed reconnect attempts
// (08001) covering 6–8 s. The three rows' 3 s are the accounting part
// connection_lost (exact, the parts still adding up to the query time), and
// the stall in window 6 gives the clients' time reconnecting and the last
// error.
TEST(CorrelateStall, AnOutageIsTimeReconnectingInTheAccountingAndTheStall) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.client_id != 1 || q.seq < 5 || q.seq > 7) continue;
    q.connection.reset();
    fx.batch().query_errors.push_back(
        {.client_id = 1,
         .seq = q.seq,
         .start_ns = q.start_ns,
         .sqlstate = q.seq == 5 ? "57P01" : "08001",
         .error = q.seq == 5 ? "terminating connection due to administrator command"
                             : fmt::format("cannot reconnect: attempt {} refused", q.seq)});
  }
  auto r = fx.explain();
  ASSERT_TRUE(r.accounting.has_value());
  std::int64_t sum_ns = 0, lost_ns = -1;
  for (const auto& p : r.accounting->parts) {
    sum_ns += p.time_ns;
    if (p.name == "connection_lost") lost_ns = p.time_ns;
  }
  EXPECT_EQ(lost_ns, 3 * kS);
  EXPECT_EQ(r.accounting->connection_lost_ns, 3 * kS);
  EXPECT_EQ(sum_ns, r.accounting->query_ns);
  const auto six = std::find_if(r.stalls.begin(), r.stalls.end(),
                                [](const Stall& s) { return s.window_index == 6; });
  ASSERT_NE(six, r.stalls.end());
  EXPECT_EQ(to_string(six->cause), "connection_lost");
  // A failed reconnect attempt is not a query that lost its connection.
  EXPECT_NE(six->explanation.find("1 connection attempt failed in this window (SQLSTATE "
                                  "08001): the server could not be reached, and the clients "
                                  "were reconnecting for 1.0 s of client time in this window."),
            std::string::npos)
      << six->explanation;
  EXPECT_EQ(six->culprit,
            "lost connections: SQLSTATE 08001 (last: cannot reconnect: attempt 6 "
            "refused)");
}

// A long outage in a short run: windows 3–5 answer nothing (every query
// failed: 08001), and the other windows' throughput varies (2 to 11 q/s), so
// the MAD is wide enough that 0 q/s is within 3 of it (z ≈ −0.7). A window
// with queries outstanding and none answered successfully is a stall anyway.
TEST(CorrelateStall, WindowsWithOnlyFailedAnswersAreStallsWhateverTheSpread) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq < 3 || q.seq > 5) continue;
    q.connection.reset();
    fx.batch().query_errors.push_back({.client_id = q.client_id,
                                       .seq = q.seq,
                                       .start_ns = q.start_ns,
                                       .sqlstate = "08001",
                                       .error = "cannot reconnect: refused"});
  }
  std::int64_t seq = 0;
  for (int w : {1, 2, 6, 7, 8, 9}) {
    for (int j = 0; j < w; ++j) {
      fx.batch().queries.push_back({.client_id = 2,
                                    .seq = seq++,
                                    .start_ns = kT0 + w * kS + j * 10 * kMs,
                                    .latency_ns = 5 * kMs});
    }
  }
  auto r = fx.explain();
  std::vector<std::size_t> lost;
  for (const auto& s : r.stalls) {
    if (to_string(s.cause) == "connection_lost") lost.push_back(s.window_index);
  }
  EXPECT_EQ(lost, (std::vector<std::size_t>{3, 4, 5}));
}

// A lock held past the run's end: both clients' transactions sent at 3 s
// wait on it until the driver gives up on them at 10.5 s (query_unfinished).
// Without those rows the span would end at the last answer (3 s): no stall,
// and tps over 3 s. With them the span runs to 10.5 s, windows 3–10 are full
// stops with the clients' lock waits, and lock_wait leads.
TEST(CorrelateStall, AStallLastingToTheEndIsSeenThroughTheTransactionsCutShort) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  auto& queries = fx.batch().queries;
  std::erase_if(queries, [](const schema::QueryRow& q) { return q.seq >= 3; });
  for (int c = 0; c < 2; ++c) {
    fx.batch().query_unfinished.push_back({.client_id = c,
                                           .seq = 3,
                                           .start_ns = kT0 + 3 * kS,
                                           .elapsed_ns = 7500 * kMs,
                                           .connection = 0});
    fx.ash(kBackendPid[c], std::string("Lock"), std::string("transactionid"), 71, 30);
  }
  auto r = fx.explain();
  EXPECT_EQ(r.run.queries, 6);
  EXPECT_EQ(r.run.unfinished, 2);
  EXPECT_EQ(r.run.unfinished_max_ns, 7500 * kMs);
  ASSERT_TRUE(r.run.query_end_ns.has_value());
  EXPECT_EQ(*r.run.query_end_ns, kT0 + 10500 * kMs);
  ASSERT_TRUE(r.run.tps.has_value());
  EXPECT_NEAR(*r.run.tps, 6.0 / 10.5, 1e-9);
  ASSERT_TRUE(r.accounting.has_value());
  EXPECT_EQ(r.accounting->query_ns, 6 * kS + 15 * kS);  // answered + in flight at the end
  std::vector<std::size_t> stalled;
  for (const auto& st : r.stalls) {
    stalled.push_back(st.window_index);
    EXPECT_EQ(to_string(st.cause), "lock_wait") << st.explanation;
  }
  EXPECT_EQ(stalled, (std::vector<std::size_t>{3, 4, 5, 6, 7, 8, 9, 10}));  // 10: 10.0–10.5 s
  ASSERT_TRUE(r.verdict.kind.has_value());
  EXPECT_EQ(to_string(*r.verdict.kind), "lock_wait");
  EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                         [](const std::string& n) {
                           return n.starts_with(
                               "2 transactions were still unanswered when the "
                               "run ended, for up to 7.500 s");
                         }),
            r.notes.end());
}

TEST(CorrelateStall, SteadyRunHasNoStall) {
  Fixture fx;
  fx.host({});
  auto r = fx.explain();
  EXPECT_TRUE(r.stalls.empty());
}

}  // namespace
}  // namespace stallscope::correlate
