// Scripts (\set, :var, several commands, weights, built-ins) against real
// PostgreSQL 15, through the stallscope binary.
#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "support/test_support.h"

namespace stallscope {
namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

class ScriptProtocol : public ::testing::TestWithParam<const char*> {};

// Each protocol sends the script's commands one by one with the values in
// place: every inserted row has a in [1, 1000] and b = a * 3 + 1 - 7 / 2.
TEST_P(ScriptProtocol, SetAndSubstitutionReachTheServer) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  const std::string table = fmt::format("script_{}", GetParam());
  test::psql(conninfo,
             fmt::format("DROP TABLE IF EXISTS {0}; CREATE TABLE {0} (a int, b int)", table));
  test::TempDir dir;
  write_file(dir.file("s.sql"), fmt::format("\\set aid random(1, 1000)\n"
                                            "\\set b :aid * 3 + 1 - 7 / 2\n"
                                            "BEGIN;\n"
                                            "INSERT INTO {0} VALUES (:aid, :b);\n"
                                            "SELECT count(*) FROM {0};\n"
                                            "END;\n",
                                            table));
  auto r =
      test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo, "-c",
                         "2", "-t", "25", "-M", GetParam(), "-P", "0", "-f", dir.file("s.sql")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(test::psql(conninfo, fmt::format("SELECT count(*) FROM {}", table)), "50");
  EXPECT_EQ(test::psql(conninfo, fmt::format("SELECT count(*) FROM {} WHERE a BETWEEN 1 AND 1000 "
                                             "AND b = a * 3 + 1 - 3",
                                             table)),
            "50");
  // Some spread: 50 draws from 1..1000 are not all the same.
  EXPECT_GT(std::stoi(test::psql(conninfo, fmt::format("SELECT count(DISTINCT a) FROM {}", table))),
            10);
  SQLite::Database db(dir.file("run.db"));
  // One row per script run (transaction); rows = 1 inserted + 1 counted + 0.
  EXPECT_EQ(
      db.execAndGet(
            "SELECT count(*) FROM query WHERE rows = 2 AND NOT EXISTS (SELECT 1 FROM query_error e "
            "WHERE (e.start_ns, e.client_id, e.seq) = (query.start_ns, query.client_id, "
            "query.seq))")
          .getInt64(),
      50);
  EXPECT_EQ(db.execAndGet("SELECT sql FROM run").getString().rfind("scripts: ", 0), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllProtocols, ScriptProtocol,
                         ::testing::Values("simple", "extended", "prepared"));

TEST(Scripts, WeightsPickScriptsInProportion) {
  auto conninfo = test::scratch_conninfo();
  test::psql(conninfo, "DROP TABLE IF EXISTS script_mix; CREATE TABLE script_mix (k text)");
  test::TempDir dir;
  write_file(dir.file("a.sql"), "INSERT INTO script_mix VALUES ('a');\n");
  write_file(dir.file("b.sql"), "INSERT INTO script_mix VALUES ('b');\n");
  write_file(dir.file("never.sql"), "INSERT INTO script_mix VALUES ('never');\n");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-t", "400", "-P", "0", "-f", dir.file("a.sql") + "@3", "-f",
                              dir.file("b.sql") + "@1", "-f", dir.file("never.sql") + "@0"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(test::psql(conninfo, "SELECT count(*) FROM script_mix"), "400");
  EXPECT_EQ(test::psql(conninfo, "SELECT count(*) FROM script_mix WHERE k = 'never'"), "0");
  // 3:1 → about 300 'a' (binomial sd ≈ 8.7; ±60 is ~7 sd).
  int a = std::stoi(test::psql(conninfo, "SELECT count(*) FROM script_mix WHERE k = 'a'"));
  EXPECT_GT(a, 240);
  EXPECT_LT(a, 360);
}

TEST(Scripts, UnknownMetaCommandIsAUsageErrorNamingTheLine) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  write_file(dir.file("bad.sql"), "SELECT 1;\n\\gexec\nSELECT 2;\n");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-t", "1", "-f", dir.file("bad.sql")});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_NE(r.err.find(dir.file("bad.sql") + ":2: invalid command \\gexec"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run.db")));
}

// A \set that fails in every transaction, before any SQL: each transaction
// is a failed one (XX000, the script line named) and the next starts from
// the event loop — 100,000 of them in a row once recursed 100,000 deep and
// crashed the driver, leaving the file 'running' with no queries.
TEST(Scripts, ASetThatAlwaysFailsFailsEachTransactionWithoutRecursing) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  write_file(dir.file("bad.sql"), "\\set x random(10, 1)\nSELECT :x;\n");
  const auto db = dir.file("run.db");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", db, conninfo, "-c", "2", "-t",
                              "100000", "-P", "0", "-f", dir.file("bad.sql")});
  ASSERT_EQ(r.exit_status, 1) << r.err;  // every transaction failed
  EXPECT_NE(r.err.find("every transaction failed (200000)"), std::string::npos) << r.err;
  SQLite::Database file(db);
  EXPECT_EQ(file.execAndGet("SELECT status || '/' || end_reason FROM run").getString(),
            "complete/transactions done");
  EXPECT_EQ(file.execAndGet("SELECT count(*) FROM query").getInt64(), 200000);
  EXPECT_EQ(file.execAndGet("SELECT count(*) FROM query_error WHERE sqlstate = 'XX000' AND "
                            "error LIKE '%bad.sql:1:%'")
                .getInt64(),
            200000);
}

// -S and -b tpcb-like against tables made by pgbench -i (in a database of
// this test's own).
// --max-tries: serialization failures (two clients updating one row under
// REPEATABLE READ) are rolled back and the script run again until it
// commits; every transaction's update lands exactly once, and each retried
// transaction's tries are stored. Without it they fail with 40001.
TEST(Scripts, MaxTriesRetriesSerializationFailuresUntilTheyCommit) {
  auto conninfo = test::scratch_conninfo();
  test::psql(conninfo,
             "DROP TABLE IF EXISTS retry_t; CREATE TABLE retry_t (id int PRIMARY KEY, v int); "
             "INSERT INTO retry_t VALUES (1, 0)");
  test::TempDir dir;
  write_file(dir.file("retry.sql"),
             "BEGIN ISOLATION LEVEL REPEATABLE READ;\n"
             "SELECT v FROM retry_t WHERE id = 1;\n"
             "\\sleep 1 ms\n"
             "UPDATE retry_t SET v = v + 1 WHERE id = 1;\n"
             "END;\n");
  const auto db = dir.file("retry.db");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", db, conninfo, "-c", "4", "-t",
                              "20", "-P", "0", "--max-tries", "1000", "--failures-detailed",
                              "--verbose-errors", "-f", dir.file("retry.sql")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find("transactions: 80 (0 failed)"), std::string::npos) << r.out;
  EXPECT_EQ(test::psql(conninfo, "SELECT v FROM retry_t"), "80");
  SQLite::Database file(db, SQLite::OPEN_READONLY);
  const auto retried = file.execAndGet("SELECT count(*) FROM query_retry").getInt64();
  const auto retries =
      file.execAndGet("SELECT coalesce(sum(tries - 1), 0) FROM query_retry").getInt64();
  EXPECT_GT(retried, 0);  // four clients, one row, 1 ms inside each transaction
  EXPECT_EQ(file.execAndGet("SELECT count(*) FROM query_retry r JOIN query q USING (start_ns, "
                            "client_id, seq) WHERE r.tries >= 2 AND r.retried_ns > 0 AND "
                            "r.retried_ns < q.latency_ns")
                .getInt64(),
            retried);
  EXPECT_EQ(file.execAndGet("SELECT count(*) FROM query_error").getInt64(), 0);
  EXPECT_NE(r.out.find(fmt::format("transactions retried: {} (", retried)), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(fmt::format("total retries: {} ", retries)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("failed transactions by kind: serialization 0, deadlock 0, other 0"),
            std::string::npos)
      << r.out;
  std::int64_t repeats = 0;
  for (std::size_t at = 0;
       (at = r.err.find("repeats the transaction after the error", at)) != std::string::npos;
       ++at) {
    ++repeats;
  }
  EXPECT_EQ(repeats, retries);
  const auto explained = test::run_command({test::stallscope_bin(), "explain", db});
  EXPECT_NE(explained.out.find(fmt::format("{} transaction{} retried after a serialization failure",
                                           retried, retried == 1 ? " was" : "s were")),
            std::string::npos)
      << explained.out;

  // Without --max-tries: the conflicts fail; the updates that landed are the
  // transactions that succeeded.
  test::psql(conninfo, "UPDATE retry_t SET v = 0");
  const auto once = dir.file("once.db");
  r = test::run_command({test::stallscope_bin(), "run", "-o", once, conninfo, "-c", "4", "-t", "20",
                         "-P", "0", "-f", dir.file("retry.sql")});
  ASSERT_TRUE(r.exit_status == 0 || r.exit_status == 1) << r.err;
  SQLite::Database single(once, SQLite::OPEN_READONLY);
  const auto failed = single.execAndGet("SELECT count(*) FROM query_error").getInt64();
  EXPECT_EQ(
      single.execAndGet("SELECT count(*) FROM query_error WHERE sqlstate <> '40001'").getInt64(),
      0);
  EXPECT_EQ(test::psql(conninfo, "SELECT v FROM retry_t"), std::to_string(80 - failed));
  EXPECT_EQ(single.execAndGet("SELECT count(*) FROM query_retry").getInt64(), 0);
}

// --exit-on-abort: the first transaction that fails ends the run (pgbench
// aborts the client, and with the option the run): the file says
// interrupted, the exit status is 1. --progress-timestamp prints Unix time.
TEST(Scripts, ExitOnAbortEndsTheRunAtTheFirstFailure) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  write_file(dir.file("fail.sql"), "SELECT 1 / 0;\n");
  const auto db = dir.file("abort.db");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", db, conninfo, "-c", "2", "-t",
                              "100000", "-P", "0", "--exit-on-abort", "-f", dir.file("fail.sql")});
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find("aborted at its first failed transaction (--exit-on-abort)"),
            std::string::npos)
      << r.err;
  SQLite::Database file(db, SQLite::OPEN_READONLY);
  EXPECT_EQ(file.execAndGet("SELECT status || ': ' || end_reason FROM run").getString(),
            "interrupted: --exit-on-abort: a transaction failed");
  // Each client stops at once: at most one failure each and what was in flight.
  EXPECT_LE(file.execAndGet("SELECT count(*) FROM query").getInt64(), 4);
  EXPECT_GE(file.execAndGet("SELECT count(*) FROM query_error WHERE sqlstate = '22012'").getInt64(),
            1);

  const auto before_s = static_cast<double>(std::time(nullptr));
  r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("p.db"), conninfo, "-T",
                         "0.6", "-P", "0.25", "--progress-timestamp", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  const auto at = r.err.find("progress: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const double stamp = std::stod(r.err.substr(at + 10));
  EXPECT_GE(stamp, before_s - 1);
  EXPECT_LE(stamp, before_s + 60);
}

TEST(Scripts, BuiltinsRunAgainstPgbenchTables) {
  auto conninfo = test::scratch_conninfo();
  test::psql(conninfo, "DROP DATABASE IF EXISTS stallscope_pgbench");
  test::psql(conninfo, "CREATE DATABASE stallscope_pgbench");
  std::string db_conninfo = conninfo + " dbname=stallscope_pgbench";
  auto init = test::run_command({"pgbench", "-i", "-s", "1", "-q", db_conninfo});
  ASSERT_EQ(init.exit_status, 0) << init.err;
  test::TempDir dir;
  auto s = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("s.db"), db_conninfo,
                              "-c", "2", "-t", "50", "-S", "-M", "prepared", "-P", "0"});
  ASSERT_EQ(s.exit_status, 0) << s.err;
  SQLite::Database sdb(dir.file("s.db"));
  EXPECT_EQ(sdb.execAndGet("SELECT count(*) FROM query WHERE rows = 1 AND NOT EXISTS (SELECT 1 "
                           "FROM query_error e "
                           "WHERE (e.start_ns, e.client_id, e.seq) = (query.start_ns, "
                           "query.client_id, query.seq))")
                .getInt64(),
            100);
  auto b = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("b.db"), db_conninfo,
                              "-c", "2", "-t", "30", "-b", "tpcb-like", "-P", "0"});
  ASSERT_EQ(b.exit_status, 0) << b.err;
  EXPECT_EQ(test::psql(db_conninfo, "SELECT count(*) FROM pgbench_history"), "60");
  // The deltas moved money consistently: branches, tellers and history agree.
  EXPECT_EQ(test::psql(db_conninfo,
                       "SELECT sum(bbalance) = (SELECT sum(delta) FROM "
                       "pgbench_history) FROM pgbench_branches"),
            "t");
}

// \sleep is in a transaction's latency (as pgbench counts it) and stored
// apart in query_sleep, so that explain's query time leaves it out: the
// clients' think time is their idle share.
TEST(ScriptSleep, SleepTimeIsStoredPerTransactionAndLeftOutOfQueryTime) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  write_file(dir.file("s.sql"), "SELECT 1;\n\\set ms random(20, 30)\n\\sleep :ms ms\n");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-c", "2", "-t", "20", "-P", "0", "-f", dir.file("s.sql")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  {
    SQLite::Database db(dir.file("run.db"));
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query_sleep").getInt64(), 40);
    // Each slept 20–30 ms (plus its wake-up), within its latency, which holds it.
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query_sleep s JOIN query q USING (start_ns, "
                            "client_id, seq) WHERE s.sleep_ns >= 20000000 AND s.sleep_ns < "
                            "60000000 AND q.latency_ns > s.sleep_ns")
                  .getInt64(),
              40);
  }
  auto e = test::run_command({test::stallscope_bin(), "explain", dir.file("run.db"), "--json"});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  SQLite::Database db(dir.file("run.db"), SQLite::OPEN_READONLY);
  const auto latency_ns = db.execAndGet("SELECT sum(latency_ns) FROM query").getInt64();
  const auto sleep_ns = db.execAndGet("SELECT sum(sleep_ns) FROM query_sleep").getInt64();
  EXPECT_EQ(j["accounting"]["query_ns"].get<std::int64_t>(), latency_ns - sleep_ns);
  std::int64_t parts_ns = 0;
  for (const auto& p : j["accounting"]["parts"]) parts_ns += p["time_ns"].get<std::int64_t>();
  EXPECT_EQ(parts_ns, latency_ns - sleep_ns);
  // Think time is most of the clients' time.
  EXPECT_LT(j["accounting"]["client_busy_share"].get<double>(), 0.5);
}

// A transaction cut short at the end while in \sleep: its query_unfinished
// row's elapsed time holds the sleep up to then, and a query_sleep row under
// the same key holds that sleep, so that explain's query time is only the
// query it ran (before: the whole elapsed time, up to the length of the
// sleep, counted as query time at the run's end).
TEST(ScriptSleep, ATransactionCutShortInSleepKeepsItsSleepOutOfQueryTime) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  write_file(dir.file("s.sql"), "SELECT 1;\n\\sleep 10 s\n");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-c", "2", "-T", "1", "-P", "0", "-f", dir.file("s.sql")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  std::int64_t elapsed_ns = 0, sleep_ns = 0;
  {
    SQLite::Database db(dir.file("run.db"), SQLite::OPEN_READONLY);
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query").getInt64(), 0);
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query_unfinished").getInt64(), 2);
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query_unfinished u JOIN query_sleep s "
                            "USING (start_ns, client_id, seq)")
                  .getInt64(),
              2);
    elapsed_ns = db.execAndGet("SELECT sum(elapsed_ns) FROM query_unfinished").getInt64();
    sleep_ns = db.execAndGet("SELECT sum(sleep_ns) FROM query_sleep").getInt64();
  }
  // Each client slept from just after its SELECT 1 to the end (about 1 s).
  EXPECT_GT(sleep_ns, 2 * 800 * common::kNsPerMs);
  EXPECT_LE(sleep_ns, elapsed_ns);
  auto e = test::run_command({test::stallscope_bin(), "explain", dir.file("run.db"), "--json"});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["run"]["unfinished"].get<std::int64_t>(), 2);
  EXPECT_EQ(j["accounting"]["query_ns"].get<std::int64_t>(), elapsed_ns - sleep_ns);
  EXPECT_LT(j["accounting"]["client_busy_share"].get<double>(), 0.2);
}

// A \sleep past 10^8 s (in ns it passed 64 bits, wrapped, and slept 0):
// written as a number it is refused before any file exists, naming the
// line; from a variable it fails each transaction that reaches it, as a
// failing \set does.
TEST(ScriptSleep, SleepOutOfRangeIsRefusedOrFailsTheTransaction) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  write_file(dir.file("fixed.sql"), "SELECT 1;\n\\sleep 9300000000 s\n");
  auto fixed = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("fixed.db"),
                                  conninfo, "-t", "1", "-P", "0", "-f", dir.file("fixed.sql")});
  EXPECT_EQ(fixed.exit_status, 2) << fixed.err;
  EXPECT_NE(fixed.err.find("fixed.sql:2:"), std::string::npos) << fixed.err;
  EXPECT_EQ(std::count(fixed.err.begin(), fixed.err.end(), '\n'), 1) << fixed.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("fixed.db")));

  write_file(dir.file("var.sql"), "SELECT 1;\n\\sleep :x ms\n");
  const auto db = dir.file("var.db");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", db, conninfo, "-c", "1", "-t",
                              "3", "-P", "0", "-D", "x=9300000000000", "-f", dir.file("var.sql")});
  ASSERT_EQ(r.exit_status, 1) << r.err;  // every transaction failed
  EXPECT_NE(r.err.find("every transaction failed (3)"), std::string::npos) << r.err;
  SQLite::Database file(db);
  EXPECT_EQ(file.execAndGet("SELECT count(*) FROM query").getInt64(), 3);
  EXPECT_EQ(file.execAndGet("SELECT count(*) FROM query_error WHERE sqlstate = 'XX000' AND "
                            "error LIKE '%var.sql:2:%9300000000000 ms is out of range%'")
                .getInt64(),
            3);
}

}  // namespace
}  // namespace stallscope
