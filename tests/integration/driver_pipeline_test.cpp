// --pipeline, -r (per-statement latencies), clock_offset and tcp_sample of
// `stallscope run`, against the real scratch PostgreSQL 15.
#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "support/test_support.h"

namespace stallscope {
namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::int64_t count(SQLite::Database& db, const std::string& sql) {
  return db.execAndGet(sql).getInt64();
}

class PipelineProtocol : public ::testing::TestWithParam<const char*> {};

// Every pipelined transaction reaches the server once with its own values:
// the table holds exactly the transactions stored, each b = a * 2; the
// transactions whose a is odd fail (division by zero) without aborting their
// neighbours in the pipeline (one Sync per transaction).
TEST_P(PipelineProtocol, EveryTransactionRunsOnceWithItsValues) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  const std::string table = fmt::format("pipeline_{}", GetParam());
  test::psql(conninfo,
             fmt::format("DROP TABLE IF EXISTS {0}; CREATE TABLE {0} (a int, b int)", table));
  test::TempDir dir;
  write_file(dir.file("s.sql"), fmt::format("\\set aid random(1, 1000)\n"
                                            "INSERT INTO {0} SELECT :aid, :aid * 2 "
                                            "WHERE 1 / (1 - :aid % 2) = 1;\n",
                                            table));
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-c", "2", "-t", "300", "-M", GetParam(), "--pipeline", "16", "-P",
                              "0", "-f", dir.file("s.sql")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir.file("run.db"));
  EXPECT_EQ(count(db, "SELECT count(*) FROM query"), 600);
  const auto ok = count(
      db,
      "SELECT count(*) FROM query WHERE rows = 1 AND NOT EXISTS (SELECT 1 FROM query_error e "
      "WHERE (e.start_ns, e.client_id, e.seq) = (query.start_ns, query.client_id, query.seq))");
  const auto failed =
      count(db,
            "SELECT count(*) FROM query JOIN query_error USING (start_ns, client_id, seq) WHERE "
            "sqlstate = '22012'");
  EXPECT_EQ(ok + failed, 600);
  EXPECT_GT(ok, 200);  // about half of 600 even values
  EXPECT_GT(failed, 200);
  EXPECT_EQ(test::psql(conninfo, fmt::format("SELECT count(*) FROM {}", table)),
            std::to_string(ok));
  EXPECT_EQ(
      test::psql(conninfo, fmt::format("SELECT count(*) FROM {} WHERE b = a * 2 AND a % 2 = 0 "
                                       "AND a BETWEEN 1 AND 1000",
                                       table)),
      std::to_string(ok));
  // Per client, seq 0 .. 299 and no latency below zero.
  EXPECT_EQ(count(db, "SELECT count(*) FROM query WHERE seq BETWEEN 0 AND 299 AND latency_ns > 0"),
            600);
}

// The single-SQL fast path pipelined: a computed value comes back as rows.
TEST_P(PipelineProtocol, SingleSqlReturnsItsRows) {
  auto conninfo = test::scratch_conninfo();
  const std::string table = fmt::format("pipeline_sql_{}", GetParam());
  test::psql(conninfo, fmt::format("DROP TABLE IF EXISTS {0}; CREATE TABLE {0} (v int)", table));
  test::TempDir dir;
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-t", "250", "-M", GetParam(), "--pipeline", "8", "-P", "0", "--sql",
                              fmt::format("INSERT INTO {} SELECT 21 * 2", table)});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir.file("run.db"));
  EXPECT_EQ(
      count(
          db,
          "SELECT count(*) FROM query WHERE rows = 1 AND NOT EXISTS (SELECT 1 FROM query_error e "
          "WHERE (e.start_ns, e.client_id, e.seq) = (query.start_ns, query.client_id, query.seq))"),
      250);
  EXPECT_EQ(test::psql(conninfo, fmt::format("SELECT count(*) FROM {} WHERE v = 42", table)),
            "250");
}

INSTANTIATE_TEST_SUITE_P(AllProtocols, PipelineProtocol,
                         ::testing::Values("simple", "extended", "prepared"));

TEST(Pipeline, UnsupportedScriptIsAOneLineUsageError) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  write_file(dir.file("two.sql"), "SELECT 1;\nSELECT 2;\n");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-t", "5", "-M", "extended", "--pipeline", "4", "-P", "0", "-f",
                              dir.file("two.sql")});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_NE(r.err.find("--pipeline"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("two.sql"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// -r: the sleeping statement's mean is at least its sleep, the other's is
// far below it; one statement_latency row per statement per transaction.
TEST(PerStatement, SleepingStatementCarriesTheSleep) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  write_file(dir.file("r.sql"), "SELECT pg_sleep(0.03);\nSELECT 1;\n");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo,
                              "-c", "2", "-t", "10", "-r", "-P", "0", "-f", dir.file("r.sql")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir.file("run.db"));
  EXPECT_EQ(count(db, "SELECT count(*) FROM statement"), 2);
  EXPECT_EQ(db.execAndGet("SELECT sql FROM statement WHERE statement = 0").getString(),
            "SELECT pg_sleep(0.03)");
  EXPECT_EQ(count(db, "SELECT line FROM statement WHERE statement = 1"), 2);
  EXPECT_EQ(count(db, "SELECT count(*) FROM statement_latency"), 40);
  // Every row joins to its transaction.
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM statement_latency JOIN query USING (start_ns, "
                  "client_id, seq)"),
            40);
  EXPECT_GE(count(db, "SELECT min(latency_ns) FROM statement_latency WHERE statement = 0"),
            30'000'000);
  EXPECT_LT(count(db, "SELECT avg(latency_ns) FROM statement_latency WHERE statement = 1"),
            30'000'000);
  // The printed averages (pgbench -r style): "  <ms>  <executions>  <sql>".
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\s([0-9.]+)\s+20\s+SELECT pg_sleep)")))
      << r.out;
  EXPECT_GE(std::stod(m[1]), 30.0);
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\s([0-9.]+)\s+20\s+SELECT 1)"))) << r.out;
  EXPECT_LT(std::stod(m[1]), 30.0);
}

// Clock offset against the local server (same clock): |offset| within the
// uncertainty (+1 ms), rtt > 0, rows at start, periodic and end.
TEST(ClockOffset, LocalServerAgreesWithinTheUncertainty) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  auto r =
      test::run_command({test::stallscope_bin(), "run", "-o", dir.file("run.db"), conninfo, "-T",
                         "1.5", "--clock-offset-period", "0.4", "-P", "0", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir.file("run.db"));
  EXPECT_EQ(count(db, "SELECT count(*) FROM clock_offset WHERE phase = 'start'"), 1);
  EXPECT_EQ(count(db, "SELECT count(*) FROM clock_offset WHERE phase = 'end'"), 1);
  EXPECT_GE(count(db, "SELECT count(*) FROM clock_offset WHERE phase = 'periodic'"), 2);
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM clock_offset WHERE rtt_ns <= 0 OR probes != 8 OR "
                  "uncertainty_ns * 2 > rtt_ns + 1"),
            0);
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM clock_offset WHERE abs(offset_ns) > uncertainty_ns + "
                  "1000000"),
            0);
  // time_ns is this host's wall clock within the run.
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM clock_offset, run WHERE time_ns < run.start_ns OR "
                  "time_ns > run.end_ns"),
            0);
}

// TCP_INFO: over TCP every connection has a row about every second with a
// measured RTT; over the unix socket none.
TEST(TcpInfo, EveryTcpConnectionIsSampledEverySecond) {
  auto conninfo = test::scratch_conninfo();
  const std::string tcp = std::regex_replace(conninfo, std::regex(R"(host=\S+)"), "host=127.0.0.1");
  ASSERT_NE(tcp, conninfo);
  test::TempDir dir;
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("tcp.db"), tcp, "-c",
                              "3", "-j", "2", "-T", "3", "-P", "0", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir.file("tcp.db"));
  EXPECT_EQ(count(db, "SELECT count(DISTINCT client_id) FROM tcp_sample"), 3);
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM (SELECT client_id FROM tcp_sample GROUP BY client_id "
                  "HAVING count(*) >= 3)"),
            3);
  EXPECT_EQ(count(db, "SELECT count(*) FROM tcp_sample WHERE rtt_ns <= 0"), 0);
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM tcp_sample t LEFT JOIN client c USING (client_id, "
                  "connection) WHERE c.client_id IS NULL"),
            0);
  auto u = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("unix.db"), conninfo,
                              "-T", "1.5", "-P", "0", "--sql", "SELECT 1"});
  ASSERT_EQ(u.exit_status, 0) << u.err;
  SQLite::Database udb(dir.file("unix.db"));
  EXPECT_EQ(count(udb, "SELECT count(*) FROM tcp_sample"), 0);
}

}  // namespace
}  // namespace stallscope
