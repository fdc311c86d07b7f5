// Lock chains against the scratch server: `record --pg` stores the root of a
// chain even when it is plain idle (a pg_activity_sample row, state 'idle')
// and the waiter's ungranted pg_locks row (pg_lock_wait); explain's chain
// walk reads them back from the file and names the idle root.
#include <libpq-fe.h>

#include <chrono>
#include <limits>
#include <string>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>

#include "common/pg.h"
#include "correlate/lock_chains.h"
#include "schema/lock_readers.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope {
namespace {

using namespace std::chrono_literals;

void exec_ok(pg::Conn& c, const char* sql) {
  pg::Result r(PQexec(c.get(), sql));
  ASSERT_TRUE(r && (PQresultStatus(r.get()) == PGRES_TUPLES_OK ||
                    PQresultStatus(r.get()) == PGRES_COMMAND_OK))
      << PQerrorMessage(c.get());
}

TEST(LockChain, RecordStoresTheIdleRootAndTheWaitersLockRow) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  // The holder takes a session-level advisory lock and goes plain idle; the
  // waiter asks for the same key and waits on Lock:advisory.
  pg::Conn holder = pg::connect(conninfo, "lock-test-holder");
  pg::Conn waiter = pg::connect(conninfo, "lock-test-waiter");
  const int holder_pid = pg::backend_pid(holder.get());
  const int waiter_pid = pg::backend_pid(waiter.get());
  exec_ok(holder, "SELECT pg_advisory_lock(4242)");
  ASSERT_EQ(PQsendQuery(waiter.get(), "SELECT pg_advisory_lock(4242)"), 1);
  std::this_thread::sleep_for(200ms);

  test::TempDir dir;
  const auto db_path = dir.file("locks.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "-T", "1.5", "--hz", "20"});
  exec_ok(holder, "SELECT pg_advisory_unlock(4242)");
  while (pg::Result done{PQgetResult(waiter.get())}) {
    EXPECT_EQ(PQresultStatus(done.get()), PGRES_TUPLES_OK);
  }
  exec_ok(waiter, "SELECT pg_advisory_unlock(4242)");
  ASSERT_EQ(r.exit_status, 0) << r.err;

  SQLite::Database db(db_path);
  const auto polls = db.execAndGet("SELECT count(*) FROM ash_tick").getInt64();
  ASSERT_GE(polls, 20);
  const std::string hp = std::to_string(holder_pid), wp = std::to_string(waiter_pid);
  // The waiter in every poll, naming the holder.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_activity_sample WHERE pid = " + wp +
                          " AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND "
                          "blocking_pids = '" +
                          hp + "'")
                .getInt64(),
            polls);
  // The idle holder: a row in every poll, state 'idle', with its last query.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_activity_sample a JOIN pg_query_text t USING "
                          "(query_text_id) WHERE a.pid = " +
                          hp +
                          " AND a.state = 'idle' AND a.application_name = 'lock-test-holder' AND "
                          "t.query = 'SELECT pg_advisory_lock(4242)'")
                .getInt64(),
            polls);
  // ... and those polls are not also counted in an idle stretch.
  EXPECT_EQ(db.execAndGet("SELECT coalesce(sum(polls), 0) FROM pg_session_idle i JOIN pg_session "
                          "s USING (session_id) WHERE s.pid = " +
                          hp)
                .getInt64(),
            0);
  // The waiter's ungranted lock, once per poll: key 4242 as one bigint.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_lock_wait WHERE pid = " + wp +
                          " AND locktype = 'advisory' AND mode = 'ExclusiveLock' AND classid = 0 "
                          "AND objid = 4242 AND objsubid = 1 AND database_oid > 0 AND "
                          "write_relation_name IS NULL")
                .getInt64(),
            polls);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_lock_wait WHERE pid <> " + wp).getInt64(), 0);

  // The chain walk over the file names the idle holder as the root.
  auto store = schema::Store::open_readonly(db_path);
  const auto lock_polls =
      schema::read_lock_polls(store, 0, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(static_cast<std::int64_t>(lock_polls.size()), polls);
  const auto x = correlate::detail::summarize_lock_chains(
      lock_polls, [&](int pid) { return pid == waiter_pid; });
  ASSERT_TRUE(x.root);
  EXPECT_EQ(x.root->pid, holder_pid);
  EXPECT_EQ(x.root->state, "idle");
  EXPECT_EQ(x.root_waiter_rows, polls);
  EXPECT_FALSE(x.turnstile);
  EXPECT_EQ(x.culprit, "pid " + hp +
                           " idle (client backend, app 'lock-test-holder'): SELECT "
                           "pg_advisory_lock(4242) — holds the advisory lock 1 backend waits "
                           "for; the application holds it (cycle through the application likely)");
}

TEST(LockChain, ATransactionidWaiterIsStoredWithTheTableItWrites) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  pg::Conn holder = pg::connect(conninfo, "lock-test-row-holder");
  pg::Conn waiter = pg::connect(conninfo, "lock-test-row-waiter");
  const int waiter_pid = pg::backend_pid(waiter.get());
  exec_ok(holder,
          "DROP TABLE IF EXISTS lock_test_hot; CREATE TABLE lock_test_hot (id int PRIMARY KEY, n "
          "int); INSERT INTO lock_test_hot VALUES (1, 0)");
  // The holder updates the row and stays idle in transaction; the waiter's
  // UPDATE of the same row waits on the holder's transactionid.
  exec_ok(holder, "BEGIN");
  exec_ok(holder, "UPDATE lock_test_hot SET n = n + 1 WHERE id = 1");
  ASSERT_EQ(PQsendQuery(waiter.get(), "UPDATE lock_test_hot SET n = n + 1 WHERE id = 1"), 1);
  std::this_thread::sleep_for(200ms);
  test::TempDir dir;
  const auto db_path = dir.file("rows.db");
  auto r = test::run_command(
      {test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo, "-T", "1", "--hz", "20"});
  exec_ok(holder, "COMMIT");
  while (pg::Result done{PQgetResult(waiter.get())}) {
    EXPECT_EQ(PQresultStatus(done.get()), PGRES_COMMAND_OK);
  }
  exec_ok(holder, "DROP TABLE lock_test_hot");
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  const auto polls = db.execAndGet("SELECT count(*) FROM ash_tick").getInt64();
  ASSERT_GE(polls, 10);
  EXPECT_EQ(
      db.execAndGet("SELECT count(*) FROM pg_lock_wait WHERE pid = " + std::to_string(waiter_pid) +
                    " AND locktype = 'transactionid' AND mode = 'ShareLock' AND "
                    "transactionid > 0 AND write_relation_name = 'lock_test_hot'")
          .getInt64(),
      polls);
}

}  // namespace
}  // namespace stallscope
