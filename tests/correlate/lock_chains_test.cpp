// The lock chain walk (correlate/lock_chains.cpp) on hand-built polls, with
// exact roots, chains and culprits; and the reader of a hand-made file.
#include "correlate/lock_chains.h"

#include <gtest/gtest.h>

#include "common/units.h"
#include "schema/lock_readers.h"
#include "schema/records.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate::detail {
namespace {

using schema::LockPoll;
using schema::LockPollSession;
using schema::LockPollWait;

constexpr std::int64_t kT0 = 1'800'000'000 * common::kNsPerS;

LockPollSession waiter(int pid, std::vector<int> blockers, std::string event, std::string query) {
  return {.pid = pid,
          .backend_type = "client backend",
          .state = "active",
          .wait_event_type = "Lock",
          .wait_event = std::move(event),
          .application_name = "bench",
          .query = std::move(query),
          .xact_start_ns = kT0 - 10 * common::kNsPerMs,
          .query_start_ns = kT0 - 10 * common::kNsPerMs,
          .state_change_ns = kT0 - 10 * common::kNsPerMs,
          .blocking_pids = std::move(blockers)};
}

LockPollSession holder(int pid, std::string state, std::string app, std::string query,
                       std::int64_t xact_age_ns) {
  return {.pid = pid,
          .backend_type = "client backend",
          .state = std::move(state),
          .wait_event_type = "Client",
          .wait_event = "ClientRead",
          .application_name = std::move(app),
          .query = std::move(query),
          .xact_start_ns = kT0 - xact_age_ns,
          .query_start_ns = kT0 - xact_age_ns,
          .state_change_ns = kT0 - xact_age_ns,
          .blocking_pids = {}};
}

LockPollWait lock(int pid, std::string locktype, std::string mode) {
  LockPollWait w;
  w.pid = pid;
  w.locktype = std::move(locktype);
  w.mode = std::move(mode);
  return w;
}

TEST(LockChains, IdleInTransactionRootIsNamedThroughATupleQueue) {
  // 202 waits for the tuple lock 201 holds; 201 waits for the transaction
  // of 100, idle in transaction for 3.1 s.
  LockPoll p{.ash_tick = 7, .time_ns = kT0, .sessions = {}, .waits = {}};
  p.sessions = {holder(100, "idle in transaction", "batch", "UPDATE acct SET n = 0 WHERE id = 1",
                       3100 * common::kNsPerMs),
                waiter(201, {100}, "transactionid", "UPDATE acct SET n = n + 1 WHERE id = 1"),
                waiter(202, {201}, "tuple", "UPDATE acct SET n = n + 1 WHERE id = 1")};
  auto t = lock(202, "tuple", "ExclusiveLock");
  t.relation_name = "acct";
  t.page = 0;
  t.tuple = 1;
  p.waits = {lock(201, "transactionid", "ShareLock"), t};
  const auto x = summarize_lock_chains({p}, nullptr);
  EXPECT_EQ(x.polls, 1);
  EXPECT_EQ(x.waiter_rows, 2);
  EXPECT_EQ(x.cycle_rows, 0);
  EXPECT_EQ(x.distinct_roots, 1);
  ASSERT_TRUE(x.root);
  EXPECT_EQ(x.root->pid, 100);
  EXPECT_EQ(x.root->state, "idle in transaction");
  EXPECT_EQ(x.root_waiter_rows, 2);
  EXPECT_EQ(x.root_max_waiters, 2);
  EXPECT_FALSE(x.turnstile);
  ASSERT_EQ(x.chain.size(), 2u);  // the longest chain: 202 → 201 → 100
  EXPECT_EQ(x.chain[0].waiter.pid, 202);
  EXPECT_EQ(x.chain[0].locktype, "tuple");
  EXPECT_EQ(x.chain[0].target, "row (0,1) of relation acct");
  EXPECT_EQ(x.chain[1].waiter.pid, 201);
  EXPECT_EQ(x.chain[1].locktype, "transactionid");
  EXPECT_EQ(x.link_locktypes.at("transactionid"), 2);  // 201's link, on both chains
  EXPECT_EQ(x.link_locktypes.at("tuple"), 1);
  EXPECT_EQ(x.culprit,
            "pid 100 idle in transaction for 3.1 s (client backend, app 'batch'): UPDATE acct SET "
            "n = 0 WHERE id = 1 — holds the transactionid lock 2 backends wait for (chain: tuple "
            "→ transactionid); the application holds it (cycle through the application likely)");
}

TEST(LockChains, PlainIdleRootWithoutLockRowsUsesTheWaitEvent) {
  // An older file: no pg_lock_wait rows; the wait event names the lock type.
  LockPoll p{.ash_tick = 1, .time_ns = kT0, .sessions = {}, .waits = {}};
  p.sessions = {holder(50, "idle", "", "SELECT pg_advisory_lock(42)", 0),
                waiter(60, {50}, "advisory", "SELECT pg_advisory_lock(42)")};
  p.sessions[0].xact_start_ns.reset();
  const auto x = summarize_lock_chains({p}, nullptr);
  ASSERT_TRUE(x.root);
  EXPECT_EQ(x.root->pid, 50);
  EXPECT_FALSE(x.root->xact_age_ns);
  EXPECT_EQ(x.culprit,
            "pid 50 idle (client backend): SELECT pg_advisory_lock(42) — holds the advisory lock "
            "1 backend waits for; the application holds it (cycle through the application likely)");
}

TEST(LockChains, ACycleEndsTheWalkAndIsNamed) {
  LockPoll p{.ash_tick = 3, .time_ns = kT0, .sessions = {}, .waits = {}};
  p.sessions = {waiter(301, {302}, "transactionid", "UPDATE a"),
                waiter(302, {303}, "transactionid", "UPDATE b"),
                waiter(303, {301}, "transactionid", "UPDATE c")};
  const auto x = summarize_lock_chains({p}, nullptr);
  EXPECT_EQ(x.waiter_rows, 3);
  EXPECT_EQ(x.cycle_rows, 3);
  EXPECT_FALSE(x.root);
  EXPECT_EQ(x.culprit,
            "a lock cycle: 3 waiter samples reached no root (a deadlock until deadlock_timeout)");
}

TEST(LockChains, ASoftBlockerDdlIsNamedWithTheTransactionItWaitsFor) {
  // Two SELECTs queue behind an ALTER TABLE (pg_blocking_pids names it, a
  // soft blocker: its request is queued ahead and conflicts); the ALTER
  // waits for 600, idle in transaction after reading the table.
  LockPoll p{.ash_tick = 9, .time_ns = kT0, .sessions = {}, .waits = {}};
  auto ddl = waiter(500, {600}, "relation", "ALTER TABLE t ADD COLUMN c int");
  ddl.application_name = "migrate";
  p.sessions = {
      waiter(401, {500}, "relation", "SELECT * FROM t"),
      waiter(402, {500}, "relation", "SELECT * FROM t"), ddl,
      holder(600, "idle in transaction", "report", "SELECT count(*) FROM t", 12 * common::kNsPerS)};
  auto rel = [](int pid, const char* mode) {
    auto w = lock(pid, "relation", mode);
    w.relation_name = "t";
    w.relation_oid = 16384;
    return w;
  };
  p.waits = {rel(401, "AccessShareLock"), rel(402, "AccessShareLock"),
             rel(500, "AccessExclusiveLock")};
  // Only the clients' waiters are counted; the ALTER is on their chains.
  const auto x = summarize_lock_chains({p}, [](int pid) { return pid == 401 || pid == 402; });
  EXPECT_EQ(x.waiter_rows, 2);
  ASSERT_TRUE(x.root);
  EXPECT_EQ(x.root->pid, 600);
  ASSERT_EQ(x.chain.size(), 2u);
  EXPECT_EQ(x.chain[1].waiter.pid, 500);
  EXPECT_EQ(x.culprit,
            "pid 600 idle in transaction for 12 s (client backend, app 'report'): SELECT "
            "count(*) FROM t — holds the relation lock 2 backends wait for (chain: relation → "
            "relation); they queue behind pid 500's ALTER TABLE t ADD COLUMN c int "
            "(AccessExclusiveLock on relation t), which waits for it; the application holds it "
            "(cycle through the application likely)");
}

TEST(LockChains, RootsThatChangeEveryPollAreATurnstileOnTheLockItself) {
  std::vector<LockPoll> polls;
  for (int i = 0; i < 6; ++i) {
    const int root = 10 + i;  // a new holder each poll
    LockPoll p{.ash_tick = i + 1,
               .time_ns = kT0 + i * 100 * common::kNsPerMs,
               .sessions = {},
               .waits = {}};
    p.sessions.push_back(holder(root, "active", "bench", "SELECT pg_advisory_xact_lock(0, 21)",
                                2 * common::kNsPerMs));
    for (int w = 20; w < 23; ++w) {
      p.sessions.push_back(
          waiter(w + 10 * i, {root}, "advisory", "SELECT pg_advisory_xact_lock(0, 21)"));
      auto l = lock(w + 10 * i, "advisory", "ExclusiveLock");
      l.database_oid = 5;
      l.classid = 0;
      l.objid = 21;
      l.objsubid = 2;
      p.waits.push_back(l);
    }
    polls.push_back(std::move(p));
  }
  const auto x = summarize_lock_chains(polls, nullptr);
  EXPECT_EQ(x.polls, 6);
  EXPECT_EQ(x.waiter_rows, 18);
  EXPECT_EQ(x.distinct_roots, 6);
  EXPECT_TRUE(x.turnstile);
  EXPECT_EQ(x.hot_lock, "advisory lock (0, 21)");
  EXPECT_EQ(x.hot_lock_rows, 18);
  EXPECT_EQ(x.culprit,
            "advisory lock (0, 21) — a turnstile: 6 sessions took turns holding it over 6 polls, "
            "up to 3 waiting at once, so throughput ≈ 1 / hold time; waiting: SELECT "
            "pg_advisory_xact_lock(0, 21)");
}

TEST(LockChains, AHotRowSeenOnlyThroughTransactionidWaitsIsNamedByTheTableTheWaitersWrite) {
  // Each poll a new holder; the waiters wait on its transactionid (no tuple
  // lock sampled), each writing table hot.
  std::vector<LockPoll> polls;
  for (int i = 0; i < 4; ++i) {
    const int root = 10 + i;
    LockPoll p{.ash_tick = i + 1, .time_ns = kT0, .sessions = {}, .waits = {}};
    p.sessions.push_back(
        holder(root, "active", "bench", "UPDATE hot SET n = n + 1", common::kNsPerMs));
    for (int w : {20, 21}) {
      p.sessions.push_back(waiter(w + 10 * i, {root}, "transactionid", "UPDATE hot SET n = n + 1"));
      auto l = lock(w + 10 * i, "transactionid", "ShareLock");
      l.transactionid = 1000 + i;
      l.write_relation_name = "hot";
      p.waits.push_back(l);
    }
    polls.push_back(std::move(p));
  }
  const auto x = summarize_lock_chains(polls, nullptr);
  EXPECT_TRUE(x.turnstile);
  EXPECT_EQ(x.hot_lock, "the hot row of relation hot");
  EXPECT_EQ(x.hot_lock_rows, 8);
  EXPECT_EQ(x.culprit.rfind("the hot row of relation hot — a turnstile: 4 sessions", 0), 0u)
      << x.culprit;
}

TEST(LockChains, LockTargetsAreNamed) {
  auto notify = lock(1, "object", "AccessExclusiveLock");
  notify.database_oid = 0;
  notify.classid = 1262;
  notify.objid = 0;
  notify.objsubid = 0;
  EXPECT_EQ(lock_target_text(notify), "the NOTIFY queue lock (object 0 of pg_database)");
  auto key = lock(1, "advisory", "ExclusiveLock");
  key.classid = 1;
  key.objid = 2;
  key.objsubid = 1;  // one bigint key: (1 << 32) | 2
  EXPECT_EQ(lock_target_text(key), "advisory lock key 4294967298");
  auto vx = lock(1, "virtualxid", "ShareLock");
  vx.virtualxid = "3/17";
  EXPECT_EQ(lock_target_text(vx), "virtual transaction 3/17");
}

TEST(LockChains, ReaderGivesEachLockPollItsRowsAndLockRows) {
  auto store = schema::Store::create(":memory:");
  schema::Batch b;
  b.ash_ticks = {{.ash_tick = 1, .time_ns = kT0, .duration_ns = 1000},
                 {.ash_tick = 2, .time_ns = kT0 + 100, .duration_ns = 1000}};
  b.pg_query_texts = {
      {.query_text_id = 1, .query_id = std::nullopt, .query = "UPDATE x", .first_time_ns = kT0}};
  b.pg_activity = {
      {.time_ns = kT0, .ash_tick = 1, .pid = 7, .state = "active"},  // no Lock waiter in poll 1
      {.time_ns = kT0 + 100, .ash_tick = 2, .pid = 7, .state = "idle", .query_text_id = 1},
      {.time_ns = kT0 + 100,
       .ash_tick = 2,
       .pid = 8,
       .state = "active",
       .wait_event_type = "Lock",
       .wait_event = "transactionid",
       .blocking_pids = "7,9"}};
  b.pg_lock_waits = {{.ash_tick = 2,
                      .pid = 8,
                      .locktype = "transactionid",
                      .mode = "ShareLock",
                      .transactionid = 745,
                      .write_relation_name = "x"}};
  store.begin_run(test::run_info(kT0));
  store.write(b);
  const auto polls = schema::read_lock_polls(store, kT0, kT0 + 1000);
  ASSERT_EQ(polls.size(), 1u);
  EXPECT_EQ(polls[0].ash_tick, 2);
  ASSERT_EQ(polls[0].sessions.size(), 2u);
  EXPECT_EQ(polls[0].sessions[0].pid, 7);
  EXPECT_EQ(polls[0].sessions[0].state, "idle");
  EXPECT_EQ(polls[0].sessions[0].query, "UPDATE x");
  EXPECT_EQ(polls[0].sessions[1].blocking_pids, (std::vector<int>{7, 9}));
  ASSERT_EQ(polls[0].waits.size(), 1u);
  EXPECT_EQ(polls[0].waits[0].transactionid, 745);
  EXPECT_EQ(polls[0].waits[0].mode, "ShareLock");
  EXPECT_EQ(polls[0].waits[0].write_relation_name, "x");
  EXPECT_EQ(schema::parse_blocking_pids("12,x,3"), (std::vector<int>{12, 3}));
}

}  // namespace
}  // namespace stallscope::correlate::detail
