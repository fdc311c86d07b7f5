// The query driver against a real PostgreSQL 15 (the scratch_pg fixture).
#include "driver/driver.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/stop.h"
#include "common/units.h"
#include "support/test_support.h"

namespace stallscope::driver {
namespace {

using test::Collected;

DriverOptions options(int clients, int threads, std::string sql,
                      Protocol protocol = Protocol::simple) {
  DriverOptions o;
  o.conninfo = test::scratch_conninfo();
  o.clients = clients;
  o.threads = threads;
  o.sql = std::move(sql);
  o.protocol = protocol;
  return o;
}

std::string application_name_of(int pid) {
  return test::psql(
      test::scratch_conninfo(),
      fmt::format("SELECT application_name FROM pg_stat_activity WHERE pid = {}", pid));
}

TEST(Driver, TwoClientsOnTwoThreadsRecordEveryQuery) {
  auto o = options(2, 2, "SELECT 1");
  o.queries_per_client = 50;
  Collected got;
  // The server's application_name of each `client` row's pid, read when the
  // row arrives (its connection is open then; they close when run() ends).
  std::mutex names_mu;
  std::map<int, std::string> live_names;
  auto collect = got.sink();
  Driver d(o, [&](schema::Batch b) {
    for (const auto& c : b.clients) {
      if (!c.backend_pid) continue;
      std::string name = application_name_of(*c.backend_pid);
      std::lock_guard lock(names_mu);
      live_names[c.client_id] = name;
    }
    collect(std::move(b));
  });
  d.connect();
  EXPECT_EQ(d.server_version().substr(0, 3), "15.");
  // Client 0 connects here (for the checks), the others in run().
  ASSERT_EQ(got.clients().size(), 1u);
  EXPECT_EQ(got.clients()[0].client_id, 0);

  std::int64_t before_ns = wall_now_ns();
  d.run();
  std::int64_t after_ns = wall_now_ns();

  auto clients = got.clients();
  ASSERT_EQ(clients.size(), 2u);
  std::set<int> pids, threads;
  for (const auto& c : clients) {
    ASSERT_TRUE(c.backend_pid.has_value());
    pids.insert(*c.backend_pid);
    threads.insert(c.thread);
    EXPECT_EQ(c.application_name, fmt::format("stallscope/{}", c.client_id));
    // The pid was a live backend of this server that carried our name.
    EXPECT_EQ(live_names[c.client_id], fmt::format("stallscope/{}", c.client_id));
    ASSERT_TRUE(c.connect_ns && c.connect_latency_ns);
    EXPECT_GT(*c.connect_latency_ns, 0);
    EXPECT_NEAR(static_cast<double>(*c.connect_ns), static_cast<double>(wall_now_ns()), 60e9);
  }
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_EQ(threads, (std::set<int>{0, 1}));

  auto queries = got.queries();
  ASSERT_EQ(queries.size(), 100u);
  auto per_client = got.by_client();
  ASSERT_EQ(per_client.size(), 2u);
  for (const auto& [id, rows] : per_client) {
    ASSERT_EQ(rows.size(), 50u) << id;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& q = rows[i];
      EXPECT_EQ(q.seq, static_cast<std::int64_t>(i));
      EXPECT_FALSE(q.sqlstate.has_value()) << q.error.value_or("");
      EXPECT_FALSE(q.error.has_value());
      EXPECT_EQ(q.rows, 1);
      EXPECT_GT(q.latency_ns, 0);
      EXPECT_GE(q.start_ns, before_ns);
      EXPECT_LE(q.start_ns + q.latency_ns, after_ns + 1'000'000);
      if (i > 0) {
        EXPECT_GE(q.start_ns, rows[i - 1].start_ns + rows[i - 1].latency_ns - 1'000'000);
      }
    }
  }

  auto s = d.summary();
  EXPECT_EQ(s.queries, 100);
  EXPECT_EQ(s.errors, 0);
  EXPECT_GT(s.elapsed_ns, 0);
  EXPECT_NEAR(s.tps, 100 * 1e9 / static_cast<double>(s.elapsed_ns), 1e-6);
  // Mean and p99 agree with the rows (p99 from the histogram: ±3 %).
  std::vector<std::int64_t> latencies;
  double sum_ns = 0;
  for (const auto& q : queries) {
    latencies.push_back(q.latency_ns);
    sum_ns += static_cast<double>(q.latency_ns);
  }
  std::sort(latencies.begin(), latencies.end());
  double p99_ms = static_cast<double>(latencies[98]) / 1e6;  // ceil(0.99 · 100)-th
  EXPECT_NEAR(s.p99_latency_ms, p99_ms, p99_ms * 0.03);
  EXPECT_NEAR(s.mean_latency_ms, sum_ns / 100 / 1e6, 1e-9);

  auto first = d.take_interval_stats();
  EXPECT_EQ(first.queries, 100);
  EXPECT_EQ(first.errors, 0);
  EXPECT_GT(first.interval_ns, 0);
  auto second = d.take_interval_stats();
  EXPECT_EQ(second.queries, 0);

  // run() closed the connections: the backends go away.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = test::psql(o.conninfo, fmt::format("SELECT count(*) FROM pg_stat_activity WHERE pid IN "
                                              "({}, {})",
                                              *clients[0].backend_pid, *clients[1].backend_pid)) ==
           "0";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone);
}

class DriverProtocol : public ::testing::TestWithParam<Protocol> {};

TEST_P(DriverProtocol, CountsRowsReturnedAndAffected) {
  std::string table = fmt::format("drv_seven_{}", protocol_name(GetParam()));
  std::string conninfo = test::scratch_conninfo();
  test::psql(conninfo, fmt::format("DROP TABLE IF EXISTS {0}; CREATE TABLE {0} (id int, v int); "
                                   "INSERT INTO {0} SELECT g, g * 10 FROM generate_series(1, 7) g",
                                   table));
  for (auto [sql, expected] : {std::pair<std::string, std::int64_t>{"SELECT * FROM " + table, 7},
                               {"UPDATE " + table + " SET v = v + 1 WHERE id <= 3", 3}}) {
    auto o = options(2, 1, sql, GetParam());
    o.queries_per_client = 3;
    Collected got;
    Driver d(o, got.sink());
    d.connect();
    d.run();
    auto queries = got.queries();
    ASSERT_EQ(queries.size(), 6u) << sql;
    for (const auto& q : queries) {
      EXPECT_FALSE(q.sqlstate.has_value()) << sql << ": " << q.error.value_or("");
      EXPECT_EQ(q.rows, expected) << sql;
    }
  }
  // 6 updates of ids 1..3 really ran.
  EXPECT_EQ(test::psql(conninfo, fmt::format("SELECT sum(v) FROM {}", table)),
            std::to_string(10 * 28 + 3 * 6));
}

INSTANTIATE_TEST_SUITE_P(AllProtocols, DriverProtocol,
                         ::testing::Values(Protocol::simple, Protocol::extended,
                                           Protocol::prepared),
                         [](const auto& info) { return std::string(protocol_name(info.param)); });

TEST(Driver, OneThreadServesFourClientsConcurrently) {
  // Each query sleeps 50 ms: one thread serving the clients one after the
  // other could finish at most ~20 in a second; served concurrently, ~80.
  auto o = options(4, 1, "SELECT pg_sleep(0.05)");
  o.duration_s = 1.0;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  for (const auto& c : got.clients()) EXPECT_EQ(c.thread, 0);
  auto t0 = std::chrono::steady_clock::now();
  d.run();
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(950));
  EXPECT_LT(took, std::chrono::milliseconds(1500));

  auto per_client = got.by_client();
  ASSERT_EQ(per_client.size(), 4u);
  std::size_t total = 0;
  for (const auto& [id, rows] : per_client) {
    EXPECT_GT(rows.size(), 5u) << "client " << id;
    total += rows.size();
    for (const auto& q : rows) {
      EXPECT_FALSE(q.sqlstate.has_value());
      EXPECT_GE(q.latency_ns, 50'000'000);
    }
  }
  EXPECT_GT(total, 40u);
}

TEST(Driver, FailingQueryIsRecordedAndTheRunGoesOn) {
  auto o = options(1, 1, "SELECT 1/0");
  o.queries_per_client = 5;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  auto queries = got.by_client()[0];
  ASSERT_EQ(queries.size(), 5u);
  for (std::size_t i = 0; i < queries.size(); ++i) {
    EXPECT_EQ(queries[i].seq, static_cast<std::int64_t>(i));
    EXPECT_EQ(queries[i].sqlstate, "22012");
    ASSERT_TRUE(queries[i].error.has_value());
    EXPECT_NE(queries[i].error->find("division by zero"), std::string::npos) << *queries[i].error;
    EXPECT_EQ(queries[i].error->find('\n'), std::string::npos);
    EXPECT_FALSE(queries[i].rows.has_value());
  }
  EXPECT_EQ(d.summary().errors, 5);
}

// As pgbench: tps and the latency figures count successful transactions
// only. Every other transaction fails at once, the others take ≥ 20 ms: a
// mean over all of them would be about half that.
TEST(Driver, TpsAndLatencyCountSuccessfulTransactionsOnly) {
  std::string conninfo = test::scratch_conninfo();
  test::psql(conninfo, "DROP SEQUENCE IF EXISTS drv_alt; CREATE SEQUENCE drv_alt");
  // Odd n: 20 ms of sleep, then 1/1. Even n: no sleep, then 1/0.
  auto o = options(1, 1,
                   "SELECT pg_sleep((n % 2) * 0.02), 1 / (n % 2)::int FROM (SELECT "
                   "nextval('drv_alt') AS n) a");
  o.queries_per_client = 10;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  const auto s = d.summary();
  EXPECT_EQ(s.queries, 10);
  EXPECT_EQ(s.errors, 5);
  EXPECT_GE(s.mean_latency_ms, 20.0);
  ASSERT_GT(s.elapsed_ns, 0);
  EXPECT_DOUBLE_EQ(s.tps, 5 * 1e9 / static_cast<double>(s.elapsed_ns));
  // Every transaction is still stored, the failed ones with their latency.
  auto q = got.queries();
  ASSERT_EQ(q.size(), 10u);
  EXPECT_EQ(std::count_if(q.begin(), q.end(), [](const auto& t) { return t.sqlstate == "22012"; }),
            5);
}

TEST(Driver, FailureInsideAnExplicitTransactionDoesNotPoisonTheNext) {
  // The error aborts the rest of the string, COMMIT included; without a
  // ROLLBACK every later transaction would fail with 25P02.
  auto o = options(1, 1, "BEGIN; SELECT 1/0; COMMIT;");
  o.queries_per_client = 3;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  auto queries = got.queries();
  ASSERT_EQ(queries.size(), 3u);
  for (const auto& q : queries) EXPECT_EQ(q.sqlstate, "22012") << q.error.value_or("");
}

TEST(Driver, MultiStatementTransactionRunsWhole) {
  std::string conninfo = test::scratch_conninfo();
  test::psql(conninfo,
             "DROP TABLE IF EXISTS drv_hot; CREATE TABLE drv_hot (id int PRIMARY KEY, n int); "
             "INSERT INTO drv_hot VALUES (1, 0)");
  auto o = options(3, 2, "BEGIN; UPDATE drv_hot SET n = n + 1 WHERE id = 1; COMMIT;");
  o.queries_per_client = 20;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  auto queries = got.queries();
  ASSERT_EQ(queries.size(), 60u);
  for (const auto& q : queries) {
    EXPECT_FALSE(q.sqlstate.has_value()) << q.error.value_or("");
    EXPECT_EQ(q.rows, 1);  // BEGIN and COMMIT affect none, the UPDATE one
  }
  EXPECT_EQ(test::psql(conninfo, "SELECT n FROM drv_hot WHERE id = 1"), "60");
}

Error connect_error(DriverOptions o) {
  o.queries_per_client = 1;
  Driver d(std::move(o), [](schema::Batch) {});
  try {
    d.connect();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "connect() did not throw";
  return Error(ErrorKind::runtime, "");
}

TEST(Driver, SqlTheServerCannotPrepareIsAUsageError) {
  auto bad = connect_error(options(2, 1, "SELEC 1", Protocol::prepared));
  EXPECT_EQ(bad.kind(), ErrorKind::usage);
  EXPECT_EQ(bad.sqlstate(), "42601");
  EXPECT_EQ(std::string(bad.what()).rfind("cannot prepare SQL: ", 0), 0u) << bad.what();

  for (auto p : {Protocol::extended, Protocol::prepared}) {
    auto several = connect_error(options(1, 1, "SELECT 1; SELECT 2", p));
    EXPECT_EQ(several.kind(), ErrorKind::usage);
    std::string msg = several.what();
    EXPECT_NE(msg.find(fmt::format("the {} protocol", protocol_name(p))), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }

  auto params = connect_error(options(1, 1, "SELECT $1::int", Protocol::extended));
  EXPECT_EQ(params.kind(), ErrorKind::usage);

  // Simple mode has no check before the run: the run records the error.
  auto o = options(1, 1, "SELEC 1");
  o.queries_per_client = 1;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  ASSERT_EQ(got.queries().size(), 1u);
  EXPECT_EQ(got.queries()[0].sqlstate, "42601");
}

TEST(Driver, UnreachableServerIsAPostgresErrorWithoutThePassword) {
  DriverOptions o;
  o.conninfo = "host=127.0.0.1 port=1 connect_timeout=2 password=secret";
  o.sql = "SELECT 1";
  auto e = connect_error(o);
  EXPECT_EQ(e.kind(), ErrorKind::postgres);
  std::string msg = e.what();
  EXPECT_NE(msg.find("cannot connect"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("secret"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// Backends of `role` on the scratch server, once the count settles (a
// closed connection's backend exits asynchronously).
std::string backends_of(const std::string& role, const std::string& want) {
  std::string n;
  for (int i = 0; i < 50; ++i) {
    n = test::psql(test::scratch_conninfo(),
                   fmt::format("SELECT count(*) FROM pg_stat_activity WHERE usename = '{}'", role));
    if (n == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  return n;
}

TEST(Driver, ConnectionRefusedOnADriverThreadFailsTheRunBeforeAnyQuery) {
  // Client 0 connects in connect(); the driver threads open the other three
  // in run(), and the third connection is refused (role limit 2), on
  // whichever thread opens it last.
  test::psql(test::scratch_conninfo(),
             "DROP ROLE IF EXISTS drv_limited; CREATE ROLE drv_limited LOGIN CONNECTION LIMIT 2");
  auto o = options(4, 2, "SELECT 1");
  o.conninfo += " user=drv_limited";
  o.queries_per_client = 3;
  Collected got;
  {
    Driver d(o, got.sink());
    d.connect();
    try {
      d.run();
      ADD_FAILURE() << "run() did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::postgres);
      std::string msg = e.what();
      EXPECT_NE(msg.find("too many connections for role"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  EXPECT_TRUE(got.queries().empty());
  EXPECT_EQ(backends_of("drv_limited", "0"), "0");
}

TEST(Driver, StopRequestEndsALongRunQuickly) {
  auto o = options(2, 2, "SELECT pg_sleep(0.001)");
  o.duration_s = 30.0;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  StopSource stop;
  std::jthread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.request_stop();
  });
  auto t0 = std::chrono::steady_clock::now();
  d.run(stop.token());
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  EXPECT_GT(got.queries().size(), 10u);
  for (const auto& q : got.queries()) EXPECT_FALSE(q.sqlstate.has_value());
}

// Transactions the driver itself cancels at the end are unfinished, not
// failures: each is a query_unfinished row (no query row), counted neither
// as a query nor as an error (as pgbench), its elapsed time running from its
// start to the moment the driver gave up on it. (Before: dropped, leaving no
// trace of a stall that lasted to the end of the run.)
TEST(Driver, StopStoresTheQueriesItCancelsAsUnfinished) {
  auto o = options(2, 1, "SELECT pg_sleep(20)");
  o.duration_s = 30.0;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  StopSource stop;
  std::int64_t stop_wall_ns = 0;
  std::jthread stopper([&stop, &stop_wall_ns] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop_wall_ns = wall_now_ns();
    stop.request_stop();
  });
  const std::int64_t before_wall_ns = wall_now_ns();
  auto t0 = std::chrono::steady_clock::now();
  d.run(stop.token());
  auto took = std::chrono::steady_clock::now() - t0;
  const std::int64_t after_wall_ns = wall_now_ns();
  stopper.join();
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  EXPECT_GE(took, std::chrono::milliseconds(450));  // waited for the grace period
  EXPECT_TRUE(got.queries().empty());               // the one in flight per client: not a query row
  const auto unfinished = got.unfinished();
  ASSERT_EQ(unfinished.size(), 2u);
  for (int client = 0; client < 2; ++client) {
    const auto& u = unfinished[static_cast<std::size_t>(client)];
    EXPECT_EQ(u.client_id, client);
    EXPECT_EQ(u.seq, 0);
    EXPECT_EQ(u.connection, std::optional<std::int64_t>(0));  // the first connection
    EXPECT_FALSE(u.lag_ns.has_value());
    // Sent during run(), before the stop; given up on at least the 200 ms
    // grace after the stop (then cancelled), before run() returned.
    EXPECT_GE(u.start_ns, before_wall_ns);
    EXPECT_LE(u.start_ns, stop_wall_ns);
    EXPECT_GE(u.start_ns + u.elapsed_ns, stop_wall_ns + 200 * common::kNsPerMs)
        << "elapsed " << u.elapsed_ns;
    EXPECT_LE(u.start_ns + u.elapsed_ns, after_wall_ns);
  }
  const auto s = d.summary();
  EXPECT_EQ(s.queries, 0);
  EXPECT_EQ(s.errors, 0);
  EXPECT_EQ(s.unfinished, 2);
}

// --pipeline: every transaction in flight at the end is unfinished — the
// one the cancel cut short and those queued behind it, still without reply
// when the driver stopped waiting — each with its own seq and start.
TEST(Driver, StopStoresEveryPipelinedTransactionInFlightAsUnfinished) {
  auto o = options(1, 1, "SELECT pg_sleep(20)", Protocol::extended);
  o.duration_s = 30.0;
  o.pipeline = 3;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  StopSource stop;
  std::int64_t stop_wall_ns = 0;
  std::jthread stopper([&stop, &stop_wall_ns] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop_wall_ns = wall_now_ns();
    stop.request_stop();
  });
  d.run(stop.token());
  const std::int64_t after_wall_ns = wall_now_ns();
  stopper.join();
  EXPECT_TRUE(got.queries().empty());
  const auto unfinished = got.unfinished();
  ASSERT_EQ(unfinished.size(), 3u);
  for (std::size_t i = 0; i < unfinished.size(); ++i) {
    const auto& u = unfinished[i];
    EXPECT_EQ(u.client_id, 0);
    EXPECT_EQ(u.seq, static_cast<std::int64_t>(i));
    EXPECT_LE(u.start_ns, stop_wall_ns);
    if (i > 0) {
      EXPECT_GE(u.start_ns, unfinished[i - 1].start_ns);  // sent in seq order
    }
    EXPECT_GE(u.start_ns + u.elapsed_ns, stop_wall_ns + 200 * common::kNsPerMs);
    EXPECT_LE(u.start_ns + u.elapsed_ns, after_wall_ns);
  }
  EXPECT_EQ(d.summary().queries, 0);
  EXPECT_EQ(d.summary().unfinished, 3);
}

// -R: an unfinished transaction starts at its scheduled start and keeps its
// schedule lag, as a query row would.
TEST(Driver, UnfinishedTransactionUnderARateKeepsItsScheduleLag) {
  auto o = options(1, 1, "SELECT pg_sleep(20)");
  o.duration_s = 30.0;
  o.rate_tps = 1000;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  StopSource stop;
  std::jthread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.request_stop();
  });
  d.run(stop.token());
  stopper.join();
  EXPECT_TRUE(got.queries().empty());
  const auto unfinished = got.unfinished();
  ASSERT_EQ(unfinished.size(), 1u);
  ASSERT_TRUE(unfinished[0].lag_ns.has_value());
  EXPECT_GE(*unfinished[0].lag_ns, 0);
  // Its elapsed time counts from the scheduled start, so it holds the lag.
  EXPECT_GE(unfinished[0].elapsed_ns, *unfinished[0].lag_ns + 200 * common::kNsPerMs);
}

TEST(Driver, DurationEndsTheRun) {
  auto o = options(2, 2, "SELECT 1");
  o.duration_s = 0.5;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  auto t0 = std::chrono::steady_clock::now();
  d.run();
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(480));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  auto s = d.summary();
  EXPECT_EQ(static_cast<std::size_t>(s.queries), got.queries().size());
  EXPECT_GT(s.queries, 100);
  EXPECT_GE(s.elapsed_ns, 400'000'000);
  EXPECT_LE(s.elapsed_ns, 1'000'000'000);
}

TEST(Driver, BrokenConnectionIsRecordedAndReconnected) {
  auto o = options(2, 1, "SELECT pg_sleep(0.01)");
  o.duration_s = 1.5;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  int victim_pid = *got.clients().at(0).backend_pid;
  std::jthread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    test::psql(o.conninfo, fmt::format("SELECT pg_terminate_backend({})", victim_pid));
  });
  d.run();
  killer.join();

  auto per_client = got.by_client();
  const auto& victim = per_client[0];
  auto broken = std::find_if(victim.begin(), victim.end(),
                             [](const auto& q) { return q.sqlstate.has_value(); });
  ASSERT_NE(broken, victim.end()) << "no failed query recorded for the terminated client";
  EXPECT_TRUE(*broken->sqlstate == "57P01" || *broken->sqlstate == "08006") << *broken->sqlstate;
  // It reconnected and went on.
  auto after = std::count_if(broken + 1, victim.end(),
                             [](const auto& q) { return !q.sqlstate.has_value(); });
  EXPECT_GT(after, 5) << "no successful query after the reconnect";
  for (std::size_t i = 0; i < victim.size(); ++i) EXPECT_EQ(victim[i].seq, std::int64_t(i));
  // The new backend was reported for client 0 as its connection 1; the old
  // row (connection 0, the victim's pid) stays.
  auto clients = got.clients();
  ASSERT_EQ(clients.size(), 3u);
  EXPECT_EQ(clients[0].connection, 0);
  EXPECT_EQ(clients[2].client_id, 0);
  EXPECT_EQ(clients[2].connection, 1);
  ASSERT_TRUE(clients[2].backend_pid.has_value());
  EXPECT_NE(*clients[2].backend_pid, victim_pid);
  // Each query carries the backend that served it: the victim's up to the
  // break, the new one after it.
  for (auto q = victim.begin(); q <= broken; ++q) EXPECT_EQ(got.backend_pid(*q), victim_pid);
  for (auto q = broken + 1; q != victim.end(); ++q) {
    EXPECT_EQ(got.backend_pid(*q), clients[2].backend_pid);
  }
  // The other client never noticed.
  for (const auto& q : per_client[1]) EXPECT_FALSE(q.sqlstate.has_value());
  EXPECT_GT(per_client[1].size(), 50u);
}

}  // namespace
}  // namespace stallscope::driver
