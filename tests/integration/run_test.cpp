// End-to-end: the real stallscope binary against the scratch PostgreSQL 15.
#include <libpq-fe.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>

#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <utility>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/pg.h"
#include "common/units.h"
#include "support/test_support.h"

extern char** environ;

namespace stallscope {
namespace {

using test::run_command;

std::int64_t count(SQLite::Database& db, const std::string& sql) {
  return db.execAndGet(sql).getInt64();
}

std::int64_t reported_transactions(const std::string& out) {
  std::smatch m;
  static const std::regex re(R"(transactions: (\d+))");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stoll(m[1].str());
}

TEST(RunCommand, RecordsBothStreamsAndExplains) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  auto db_path = dir.file("run.db");
  auto r = run_command({test::stallscope_bin(), "run", "-o", db_path, conninfo, "-c", "2", "-j",
                        "2", "-T", "3", "--sql", "SELECT count(*) FROM pg_class", "-P", "1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.err.find("progress: "), std::string::npos) << r.err;
  auto reported = reported_transactions(r.out);
  ASSERT_GT(reported, 0) << r.out;

  SQLite::Database db(db_path);
  // Exactly the queries the driver reported, all successful, from 2 clients.
  EXPECT_EQ(count(db, "SELECT count(*) FROM query"), reported);
  EXPECT_EQ(count(db, "SELECT count(*) FROM query_error"), 0);
  EXPECT_EQ(count(db, "SELECT count(DISTINCT client_id) FROM query"), 2);
  EXPECT_EQ(count(db, "SELECT count(*) FROM query WHERE rows = 1"), reported);
  // Closed loop, a query of a millisecond: the one in flight per client at
  // -T finishes within the 200 ms grace; nothing is cut short.
  EXPECT_EQ(count(db, "SELECT count(*) FROM query_unfinished"), 0);
  EXPECT_EQ(r.out.find("cut short"), std::string::npos) << r.out;
  // About hz × seconds ticks (10 Hz × 3 s ± 20 %).
  auto ticks = count(db, "SELECT count(*) FROM sample");
  EXPECT_GE(ticks, 24);
  EXPECT_LE(ticks, 36);
  EXPECT_EQ(count(db, "SELECT count(*) FROM host_sample"), ticks);
  // The run row is complete and has no password.
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
  EXPECT_EQ(count(db, "SELECT count(*) FROM run WHERE end_ns > start_ns"), 1);
  // Process rows for the two backends serving the clients, with states.
  EXPECT_EQ(
      count(db,
            "SELECT count(DISTINCT p.pid) FROM process p JOIN client c ON c.backend_pid = p.pid "
            "WHERE p.comm LIKE 'postgres%'"),
      2);
  EXPECT_GT(count(db,
                  "SELECT count(*) FROM process_sample s JOIN process p USING (process_id) "
                  "JOIN client c ON c.backend_pid = p.pid WHERE s.state IN ('R','S','D')"),
            5);
  // The backends used CPU (on-CPU ns from schedstat).
  EXPECT_GT(count(db,
                  "SELECT coalesce(sum(s.cpu_ns),0) FROM process_sample s JOIN process p "
                  "USING (process_id) JOIN client c ON c.backend_pid = p.pid"),
            10'000'000);
  // ASH saw the driver's backends.
  EXPECT_GT(
      count(db, "SELECT count(*) FROM pg_activity_sample a JOIN client c ON c.backend_pid = a.pid"),
      0);
  EXPECT_GE(count(db, "SELECT count(*) FROM ash_tick"), 20);

  auto e = run_command({test::stallscope_bin(), "explain", db_path, "--json"});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  auto j = nlohmann::json::parse(e.out);
  for (const char* key : {"run", "accounting", "windows", "findings"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GE(j["windows"].size(), 3u);
  double last = 2.0;
  for (const auto& f : j["findings"]) {
    for (const char* key :
         {"kind", "score", "start_ns", "end_ns", "summary", "evidence", "suggestion"}) {
      EXPECT_TRUE(f.contains(key)) << key;
    }
    EXPECT_LE(f["score"].get<double>(), last);
    last = f["score"].get<double>();
  }

  auto t = run_command({test::stallscope_bin(), "explain", db_path});
  ASSERT_EQ(t.exit_status, 0) << t.err;
  EXPECT_FALSE(t.out.empty());
}

TEST(RunCommand, LockContentionRanksLockWaitFirst) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::psql(conninfo,
             "DROP TABLE IF EXISTS hot; CREATE TABLE hot (id int PRIMARY KEY, n bigint);"
             "INSERT INTO hot VALUES (1, 0)");
  test::TempDir dir;
  auto db_path = dir.file("lock.db");
  auto r = run_command({test::stallscope_bin(), "run", "-o", db_path, conninfo, "-c", "4", "-j",
                        "2", "-T", "4", "-P", "0", "--sql",
                        "BEGIN; UPDATE hot SET n = n + 1 WHERE id = 1; SELECT pg_sleep(0.005); "
                        "COMMIT;"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  auto e = run_command({test::stallscope_bin(), "explain", db_path, "--json"});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  auto j = nlohmann::json::parse(e.out);
  ASSERT_FALSE(j["findings"].empty()) << e.out;
  EXPECT_EQ(j["findings"][0]["kind"], "lock_wait") << j["findings"].dump(2);
  // Every committed transaction incremented the row exactly once.
  SQLite::Database db(db_path);
  auto ok = count(db, "SELECT (SELECT count(*) FROM query) - (SELECT count(*) FROM query_error)");
  EXPECT_EQ(std::stoll(test::psql(conninfo, "SELECT n FROM hot WHERE id = 1")), ok);
}

// A lock held past -T: each client's transaction waits on it to the end, is
// cancelled there and stored in query_unfinished — one row per client, its
// elapsed time from its start to the driver giving up on it — and not in
// query. (Before: dropped, so a stall lasting to the end of a run left no
// trace in the file.)
TEST(RunCommand, LockHeldPastTheDurationLeavesOneUnfinishedTransactionPerClient) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::psql(conninfo,
             "DROP TABLE IF EXISTS unfinished_lock; CREATE TABLE unfinished_lock (id int)");
  pg::Conn holder = pg::connect(conninfo, "unfinished-lock-holder");
  test::TempDir dir;
  auto db_path = dir.file("unfinished.db");
  std::int64_t locked_wall_ns = 0;
  std::jthread locker([&holder, &locked_wall_ns] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    pg::Result res(
        PQexec(holder.get(), "BEGIN; LOCK TABLE unfinished_lock IN ACCESS EXCLUSIVE MODE"));
    locked_wall_ns = wall_now_ns();
    if (PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
      ADD_FAILURE() << "cannot lock: " << PQerrorMessage(holder.get());
    }
  });
  const std::int64_t duration_s = 4;
  auto r = run_command({test::stallscope_bin(), "run", "-o", db_path, conninfo, "-c", "2", "-T",
                        std::to_string(duration_s), "-P", "0", "--sql",
                        "SELECT count(*) FROM unfinished_lock"});
  locker.join();
  pg::Result rollback(PQexec(holder.get(), "ROLLBACK"));  // held until after the run
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status || ':' || end_reason FROM run").getString(),
            "complete:duration reached");
  // The cancel that cut them short is not a failure.
  EXPECT_EQ(count(db, "SELECT count(*) FROM query_error"), 0);
  EXPECT_EQ(count(db, "SELECT count(*) FROM query"), reported_transactions(r.out));
  EXPECT_GT(count(db, "SELECT count(*) FROM query"), 10);
  // Nothing finished once the lock was held. The run's times are its
  // monotonic clock mapped to the wall clock at its start, this thread's the
  // wall clock itself: they agree to some µs, so 1 ms of margin (a query a
  // lock-free one takes ~0.1 ms).
  const std::int64_t margin_ns = common::kNsPerMs;
  EXPECT_EQ(count(db, fmt::format("SELECT count(*) FROM query WHERE start_ns + latency_ns > {}",
                                  locked_wall_ns + margin_ns)),
            0);
  ASSERT_EQ(count(db, "SELECT count(*) FROM query_unfinished"), 2);
  EXPECT_EQ(count(db, "SELECT count(DISTINCT client_id) FROM query_unfinished"), 2);
  EXPECT_NE(r.out.find("transactions cut short at the end: 2 "), std::string::npos) << r.out;
  const std::int64_t run_start_ns = count(db, "SELECT start_ns FROM run");
  const std::int64_t run_end_ns = count(db, "SELECT end_ns FROM run");
  SQLite::Statement rows(db,
                         "SELECT u.client_id, u.seq, u.start_ns, u.elapsed_ns, u.connection, "
                         "(SELECT max(seq) FROM query q WHERE q.client_id = u.client_id), "
                         "(SELECT max(start_ns + latency_ns) FROM query q WHERE q.client_id = "
                         "u.client_id) FROM query_unfinished u");
  while (rows.executeStep()) {
    const int client = rows.getColumn(0).getInt();
    const std::int64_t start_ns = rows.getColumn(2).getInt64();
    const std::int64_t elapsed_ns = rows.getColumn(3).getInt64();
    // The client's next transaction after its last answered one, on its
    // first connection, sent after that one ended and no later than the
    // lock was held (none could end after that).
    EXPECT_EQ(rows.getColumn(1).getInt64(), rows.getColumn(5).getInt64() + 1) << client;
    EXPECT_EQ(rows.getColumn(4).getInt64(), 0) << client;
    EXPECT_GE(start_ns, rows.getColumn(6).getInt64()) << client;
    EXPECT_LE(start_ns, locked_wall_ns + margin_ns) << client;
    // Given up on after -T (which starts after the run row's start) and its
    // 200 ms grace, before the run ended: it was in flight from the lock to
    // the end.
    EXPECT_GE(start_ns + elapsed_ns,
              run_start_ns + duration_s * common::kNsPerS + 200 * common::kNsPerMs)
        << client << ": elapsed " << elapsed_ns;
    EXPECT_LE(start_ns + elapsed_ns, run_end_ns) << client;
  }
}

// -C: a connect the run's end interrupts is not a failure (at most the
// transaction cut short, in query_unfinished, without a connection).
// (Before: a clean -C run stored a failed transaction, 08006 "interrupted",
// at its deadline.)
TEST(RunCommand, ConnectPerTransactionRunStoresNoFailureAtItsEnd) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  auto db_path = dir.file("connect.db");
  auto r = run_command({test::stallscope_bin(), "run", "-o", db_path, conninfo, "-C", "-c", "4",
                        "-j", "2", "-T", "2", "-P", "0", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  EXPECT_GT(count(db, "SELECT count(*) FROM query"), 10);
  EXPECT_EQ(count(db, "SELECT count(*) FROM query_error"), 0);
  EXPECT_NE(r.out.find("(0 failed)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("connects failed"), std::string::npos) << r.out;
  EXPECT_LE(count(db, "SELECT count(*) FROM query_unfinished"), 4);
}

TEST(RunCommand, SigintKeepsEverythingRecordedAndMarksTheRun) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  auto db_path = dir.file("int.db");
  std::vector<std::string> argv{test::stallscope_bin(),
                                "run",
                                "-o",
                                db_path,
                                conninfo,
                                "-T",
                                "60",
                                "-P",
                                "0",
                                "--sql",
                                "SELECT 1"};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status || ':' || end_reason FROM run").getString(),
            "interrupted:SIGINT");
  EXPECT_GT(count(db, "SELECT count(*) FROM query"), 10);
  EXPECT_GT(count(db, "SELECT count(*) FROM sample"), 5);
}

// A pgbench command line's connection part works as is: -h, -p, -U, a bare
// database name, and -n (accepted; stallscope never vacuums).
TEST(RunCommand, TakesPgbenchConnectionFlags) {
  const auto conninfo = test::scratch_conninfo();
  const auto host = conninfo_value(conninfo, "host");
  const auto port = conninfo_value(conninfo, "port");
  const auto user = conninfo_value(conninfo, "user");
  ASSERT_TRUE(host && port && user) << conninfo;
  test::TempDir dir;
  const auto bin = test::stallscope_bin();
  auto r = run_command({bin, "run", "-o", dir.file("p.db"), "-n", "-h", *host, "-p", *port, "-U",
                        *user, "-t", "3", "-P", "0", "--sql",
                        "SELECT current_database() = 'postgres'", "postgres"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir.file("p.db"));
  EXPECT_EQ(count(db, "SELECT count(*) FROM query WHERE rows = 1"), 3);
  // Each flag reaches libpq: a wrong port, user or database is refused by name.
  auto wrong_port = run_command({bin, "run", "-o", dir.file("w.db"), "-h", *host, "-p", "1", "-t",
                                 "1", "--sql", "SELECT 1", "postgres"});
  EXPECT_EQ(wrong_port.exit_status, 1);
  EXPECT_NE(wrong_port.err.find(".s.PGSQL.1\""), std::string::npos) << wrong_port.err;
  auto wrong_db = run_command({bin, "run", "-o", dir.file("w.db"), "-h", *host, "-p", *port, "-U",
                               *user, "-t", "1", "--sql", "SELECT 1", "no_such_db"});
  EXPECT_EQ(wrong_db.exit_status, 1);
  EXPECT_NE(wrong_db.err.find("\"no_such_db\" does not exist"), std::string::npos) << wrong_db.err;
  auto wrong_user = run_command({bin, "run", "-o", dir.file("w.db"), "-h", *host, "-p", *port, "-U",
                                 "no_such_role", "-t", "1", "--sql", "SELECT 1", "postgres"});
  EXPECT_EQ(wrong_user.exit_status, 1);
  EXPECT_NE(wrong_user.err.find("no_such_role"), std::string::npos) << wrong_user.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.db")));
}

// -D NAME=VALUE sets a script variable as pgbench's does; a malformed one is
// a usage error naming it.
TEST(RunCommand, DefineSetsAScriptVariable) {
  const auto conninfo = test::scratch_conninfo();
  test::psql(conninfo, "DROP TABLE IF EXISTS run_define; CREATE TABLE run_define (v bigint)");
  test::TempDir dir;
  std::ofstream(dir.file("d.sql")) << "INSERT INTO run_define VALUES (:x + :y);\n";
  const auto bin = test::stallscope_bin();
  auto r = run_command({bin, "run", "-o", dir.file("d.db"), conninfo, "-f", dir.file("d.sql"), "-D",
                        "x=41", "-D", "y=-1", "-c", "2", "-t", "3", "-P", "0"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(
      test::psql(conninfo, "SELECT count(*) || ':' || min(v) || ':' || max(v) FROM run_define"),
      "6:40:40");
  // Any value, as pgbench's: a decimal is a double in an expression.
  std::ofstream(dir.file("h.sql")) << "\\set z :x * 2\nINSERT INTO run_define VALUES (:z);\n";
  test::psql(conninfo, "TRUNCATE run_define; ALTER TABLE run_define ALTER v TYPE float8");
  r = run_command({bin, "run", "-o", dir.file("h.db"), conninfo, "-f", dir.file("h.sql"), "-D",
                   "x=2.25", "-t", "1", "-P", "0"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(test::psql(conninfo, "SELECT v FROM run_define"), "4.5");
  for (const std::string define : {"x", "1x=3", "=3"}) {
    auto bad = run_command({bin, "run", "-o", dir.file("e.db"), conninfo, "-f", dir.file("d.sql"),
                            "-D", define, "-t", "1"});
    EXPECT_EQ(bad.exit_status, 2);
    EXPECT_NE(bad.err.find("-D '" + define + "'"), std::string::npos) << bad.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("e.db")));
  }
}

// Numbers no run can use — NaN and infinity pass a plain range check (every
// comparison with NaN is false), a progress period of a nanosecond prints
// millions of lines — are refused before any file exists.
TEST(RunCommand, NumericFlagsOutOfRangeOrNotFiniteAreRefusedBeforeAFileExists) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  const auto db = dir.file("n.db");
  for (const auto& [command, flag, value] :
       std::vector<std::array<std::string, 3>>{{"run", "--hz", "nan"},
                                               {"run", "--hz", "inf"},
                                               {"run", "-P", "1e-9"},
                                               {"run", "-T", "inf"},
                                               {"run", "-R", "nan"},
                                               {"run", "-T", "1e10"},
                                               {"run", "-R", "1e-12"},
                                               {"record", "-T", "1e10"},
                                               {"run", "--pooler-period", "nan"},
                                               {"record", "--hz", "nan"},
                                               {"record", "--ash-hz", "-inf"},
                                               {"record", "-P", "0.01"}}) {
    std::vector<std::string> argv{test::stallscope_bin(), command, "-o", db};
    if (command == "run") argv.insert(argv.end(), {conninfo, "--sql", "SELECT 1"});
    argv.insert(argv.end(), {flag, value});
    if (flag != "-T") argv.insert(argv.end(), {"-T", "1"});
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << command << " " << flag << " " << value << ": " << r.err;
    EXPECT_NE(r.err.find("'" + value + "'"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(db)) << command << " " << flag << " " << value;
  }
}

// Integer flags past 64 bits were read saturated (CLI11's strtoll: -t
// 99999999999999999999 ran 2^63 − 1 transactions) and "010" as octal 8:
// each is refused, one line naming the flag, before any file exists; a
// leading zero is decimal, as pgbench reads it.
TEST(RunCommand, IntegerFlagsPastInt64AreRefusedBeforeAFileExists) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  const auto db = dir.file("i.db");
  for (const auto& [flag, value] :
       std::vector<std::array<std::string, 2>>{{"-t", "9223372036854775808"},
                                               {"-t", "99999999999999999999"},
                                               {"--transactions", "-9223372036854775809"},
                                               {"-s", "9223372036854775808"},
                                               {"-s", "1e3"},
                                               {"-c", "4294967297"},
                                               {"-j", "18446744073709551617"},
                                               {"--pipeline", "9223372036854775808"},
                                               {"-t", "0x10"}}) {
    std::vector<std::string> argv{
        test::stallscope_bin(), "run", "-o", db, conninfo, "--sql", "SELECT 1", flag, value};
    if (flag != "-t" && flag != "--transactions") argv.insert(argv.end(), {"-T", "1"});
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << flag << " " << value << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'" + value + "'"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(db)) << flag << " " << value;
  }
  for (const auto& [command, flag] :
       std::vector<std::array<std::string, 2>>{{"explain", "--every"}, {"report", "--bins"}}) {
    std::vector<std::string> argv{test::stallscope_bin(), command, dir.file("none.db"), flag,
                                  "9223372036854775808"};
    if (command == "report") argv.insert(argv.end(), {"-o", dir.file("r.html")});
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << command << " " << flag << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // -t 010 is ten transactions, not octal 8.
  const auto r = test::run_command({test::stallscope_bin(), "run", "-o", db, conninfo, "--sql",
                                    "SELECT 1", "-c", "1", "-t", "010", "-P", "0"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database file(db);
  EXPECT_EQ(file.execAndGet("SELECT count(*) FROM query").getInt64(), 10);
}

TEST(RunCommand, BadInputGivesOneLineErrorAndStatus) {
  auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  auto bin = test::stallscope_bin();
  auto one_line = [](const test::CommandResult& r) {
    return std::count(r.err.begin(), r.err.end(), '\n') == 1;
  };

  auto bad_flag = run_command({bin, "run", "-o", dir.file("a.db"), "--bogus"});
  EXPECT_EQ(bad_flag.exit_status, 2);
  EXPECT_TRUE(one_line(bad_flag)) << bad_flag.err;
  EXPECT_NE(bad_flag.err.find("--bogus"), std::string::npos) << bad_flag.err;

  auto missing = run_command({bin, "explain", dir.file("absent.db")});
  EXPECT_EQ(missing.exit_status, 2);
  EXPECT_TRUE(one_line(missing)) << missing.err;
  EXPECT_NE(missing.err.find("absent.db"), std::string::npos) << missing.err;

  auto unreachable = run_command({bin, "run", "-o", dir.file("u.db"),
                                  "host=127.0.0.1 port=1 connect_timeout=2 password=hunter2", "-T",
                                  "1", "--sql", "SELECT 1"});
  EXPECT_EQ(unreachable.exit_status, 1);
  EXPECT_TRUE(one_line(unreachable)) << unreachable.err;
  EXPECT_NE(unreachable.err.find("cannot connect"), std::string::npos) << unreachable.err;
  EXPECT_EQ(unreachable.err.find("hunter2"), std::string::npos) << unreachable.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("u.db")));

  // A conninfo split over two arguments (unquoted): CLI11's error quotes the
  // extra one, and record would take it for the command to run. Masked both.
  auto split = run_command(
      {bin, "run", "-o", dir.file("s.db"), "--sql", "SELECT 1", "host=/x", "password=hunter2"});
  EXPECT_EQ(split.exit_status, 2);
  EXPECT_NE(split.err.find("password=***"), std::string::npos) << split.err;
  EXPECT_EQ(split.err.find("hunter2"), std::string::npos) << split.err;
  auto as_command = run_command(
      {bin, "record", "-o", dir.file("c.db"), "-T", "1", "--pg", conninfo, "password=hunter2"});
  EXPECT_EQ(as_command.exit_status, 2);
  EXPECT_NE(as_command.err.find("cannot run command 'password=***'"), std::string::npos)
      << as_command.err;
  EXPECT_EQ(as_command.err.find("hunter2"), std::string::npos) << as_command.err;

  // Client 0 connects, a later client (opened by its driver thread in the
  // run) is refused: the same kind of error, and no file either.
  test::psql(conninfo,
             "DROP ROLE IF EXISTS run_limited; CREATE ROLE run_limited LOGIN CONNECTION LIMIT 2");
  auto refused = run_command({bin, "run", "-o", dir.file("r.db"), conninfo + " user=run_limited",
                              "-c", "4", "-j", "2", "-T", "1", "-P", "0", "--sql", "SELECT 1"});
  EXPECT_EQ(refused.exit_status, 1);
  EXPECT_TRUE(one_line(refused)) << refused.err;
  EXPECT_NE(refused.err.find("too many connections for role"), std::string::npos) << refused.err;
  // Issue 27: it says the run needs -c + 2 connections and which one failed
  // (client 1 and the clock probe took the two: the ASH sampler's is refused).
  EXPECT_NE(refused.err.find("(the ASH sampler's connection); a run opens 6 connections: 4 "
                             "clients, the ASH sampler's and the clock-offset probe's"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.db")));
  // With three, a later client is refused, and named.
  test::psql(conninfo, "ALTER ROLE run_limited CONNECTION LIMIT 3");
  auto refused_client =
      run_command({bin, "run", "-o", dir.file("r.db"), conninfo + " user=run_limited", "-c", "4",
                   "-j", "2", "-T", "1", "-P", "0", "--sql", "SELECT 1"});
  EXPECT_EQ(refused_client.exit_status, 1);
  EXPECT_TRUE(one_line(refused_client)) << refused_client.err;
  EXPECT_TRUE(std::regex_search(
      refused_client.err,
      std::regex(
          R"(too many connections for role "run_limited" \(client [234] of 4\); a run opens 6 connections)")))
      << refused_client.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.db")));

  // Issue 27: an unparsable port or sslmode exited 1 (the connect failed):
  // bad input, exit 2, no file.
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {conninfo, "-p", "abc"}, {conninfo + " sslmode=bogus"}, {conninfo + " port=70000"}}) {
    std::vector<std::string> argv{bin,     "run",      "-o", dir.file("p.db"),
                                  "--sql", "SELECT 1", "-T", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << r.err;
    EXPECT_TRUE(one_line(r)) << r.err;
    EXPECT_NE(r.err.find("invalid conninfo"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("p.db")));
  }

  auto bad_conninfo =
      run_command({bin, "run", "-o", dir.file("b.db"), "nonsense_key=1", "--sql", "SELECT 1"});
  EXPECT_EQ(bad_conninfo.exit_status, 2);
  EXPECT_TRUE(one_line(bad_conninfo)) << bad_conninfo.err;
  EXPECT_NE(bad_conninfo.err.find("nonsense_key"), std::string::npos) << bad_conninfo.err;

  auto no_sql = run_command({bin, "run", "-o", dir.file("c.db"), conninfo});
  EXPECT_EQ(no_sql.exit_status, 2);
  EXPECT_TRUE(one_line(no_sql)) << no_sql.err;

  auto missing_file =
      run_command({bin, "run", "-o", dir.file("d.db"), conninfo, "-f", dir.file("nope.sql")});
  EXPECT_EQ(missing_file.exit_status, 2);
  EXPECT_NE(missing_file.err.find("nope.sql"), std::string::npos) << missing_file.err;

  // A script that cannot run (unsupported meta-command, bad \set, weight 0)
  // and an unknown built-in: one line naming it, exit 2, and no file, so the
  // same -o works once the input is fixed.
  std::ofstream(dir.file("meta.sql")) << "SELECT 1;\n\\gexec\n";
  std::ofstream(dir.file("badset.sql")) << "\\set x 1 +\nSELECT :x;\n";
  std::ofstream(dir.file("one.sql")) << "SELECT 1;\n";
  // Issue 27: /dev/zero was read without bound (3.4 GB, then bad_alloc), a
  // file of NUL bytes ran empty queries, "select 1;\0select 2;" only the first.
  std::ofstream(dir.file("nul.sql"), std::ios::binary) << std::string("select 1;\0select 2;", 20);
  std::ofstream(dir.file("zeros.sql"), std::ios::binary) << std::string(4096, '\0');
  std::ofstream(dir.file("latin1.sql"), std::ios::binary) << "SELECT 1;\nSELECT 'caf\xe9';\n";
  for (const auto& [args, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-f", "/dev/zero"}, "/dev/zero: larger than 16 MiB, the most -f reads"},
           {{"-f", dir.file("nul.sql")}, "nul.sql:1: a NUL byte at byte 10"},
           {{"-f", dir.file("zeros.sql")}, "zeros.sql:1: a NUL byte"},
           {{"-f", dir.file("latin1.sql")}, "latin1.sql:2: invalid UTF-8 (byte \\xe9)"},
           {{"-f", dir.file("meta.sql")}, "meta.sql:2"},
           {{"-f", dir.file("badset.sql")}, "badset.sql:1"},
           {{"-f", dir.file("one.sql") + "@0"}, "weights"},
           {{"-b", "nosuch"}, "nosuch"}}) {
    std::vector<std::string> argv{bin, "run", "-o", dir.file("s.db"), conninfo, "-T", "1"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << args.back();
    EXPECT_TRUE(one_line(r)) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("s.db"))) << args.back();
  }

  // An existing run file is never overwritten.
  { std::ofstream(dir.file("exists.db")) << "precious"; }
  auto exists = run_command(
      {bin, "run", "-o", dir.file("exists.db"), conninfo, "--sql", "SELECT 1", "-T", "1"});
  EXPECT_EQ(exists.exit_status, 2);
  EXPECT_NE(exists.err.find("exists.db"), std::string::npos) << exists.err;
  std::ifstream in(dir.file("exists.db"));
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");

  auto not_db = run_command({bin, "explain", dir.file("exists.db")});
  EXPECT_EQ(not_db.exit_status, 2);
  EXPECT_TRUE(one_line(not_db)) << not_db.err;
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

// SIGHUP (a closed terminal or ssh session) ends a run as SIGINT does: the
// file is complete up to the signal and says so (it was killed, left
// 'running'). And a file-size limit fails the write instead of killing the
// process with SIGXFSZ (it exited 153, leaving the file 'running').
TEST(RunCommand, SighupEndsTheRunCleanlyAndAFileSizeLimitIsAWriteError) {
  const auto conninfo = test::scratch_conninfo();
  test::TempDir dir;
  const auto db = dir.file("hup.db");
  const int pid = test::spawn({test::stallscope_bin(), "run", "-o", db, conninfo, "--sql",
                               "SELECT 1", "-T", "10", "-P", "0"});
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(::kill(pid, SIGHUP), 0);
  EXPECT_TRUE(test::exited_ok(pid));
  SQLite::Database file(db);
  EXPECT_EQ(file.execAndGet("SELECT status || ':' || end_reason FROM run").getString(),
            "interrupted:SIGHUP");

  const auto limited = dir.file("limited.db");
  const auto r = test::run_command({"bash", "-c", "ulimit -f 2048; exec \"$@\"", "bash",
                                    test::stallscope_bin(), "run", "-o", limited, conninfo, "-c",
                                    "2", "--sql", "SELECT 1", "-T", "20", "-P", "0"});
  EXPECT_EQ(r.exit_status, 1) << r.err;
  SQLite::Database lf(limited);
  EXPECT_EQ(lf.execAndGet("SELECT status FROM run").getString(), "failed");
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

// Issue 27: "latency average = 0.000 ms" when every transaction failed; the
// summary says no transaction succeeded.
TEST(RunCommand, SummaryOfARunWhoseTransactionsAllFailedHasNoLatencyAverage) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("fail.db"), conninfo,
                              "-c", "1", "-t", "20", "-P", "0", "--sql", "SELECT 1/0"});
  // The run failed: exit 1, one stderr line pointing at explain.
  ASSERT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find("stallscope run: every transaction failed (20): `stallscope explain " +
                       dir.file("fail.db") + "` names the errors\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("transactions: 20 (20 failed)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("latency: no transaction succeeded"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("latency average"), std::string::npos) << r.out;
}

// A password in the run's own SQL (--sql, a script) is stored and shown
// masked: run.sql, run.command_line, statement rows (-r) and -r's table.
TEST(RunCommand, ThePasswordsInItsOwnSqlAreMaskedEverywhere) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto db_path = dir.file("secret.db");
  // A statement that fails (no such role) and carries a password.
  auto r =
      test::run_command({test::stallscope_bin(), "run", "-o", db_path, conninfo, "-t", "3", "-P",
                         "0", "-r", "--sql", "ALTER ROLE no_such_role_x PASSWORD 'hunter2-sql'"});
  ASSERT_NE(r.exit_status, 2) << r.err;
  EXPECT_EQ(r.out.find("hunter2-sql"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASSWORD '***'"), std::string::npos) << r.out;
  SQLite::Database db(db_path);
  // Every text of the file: the run row, the statements, and stallscope's
  // own process row (the sampler samples it, command line and all).
  EXPECT_EQ(
      db.execAndGet("SELECT count(*) FROM process WHERE cmdline LIKE '%hunter2-sql%'").getInt(), 0);
  for (const char* sql :
       {"SELECT command_line FROM run", "SELECT group_concat(sql) FROM statement"}) {
    const std::string text = db.execAndGet(sql).getString();
    EXPECT_EQ(text.find("hunter2-sql"), std::string::npos) << sql << ": " << text;
    EXPECT_NE(text.find("'***'"), std::string::npos) << sql << ": " << text;
  }
  // Without -r the SQL is run.sql itself.
  const auto plain = dir.file("plain.db");
  r = test::run_command({test::stallscope_bin(), "run", "-o", plain, conninfo, "-t", "3", "-P", "0",
                         "--sql", "ALTER ROLE no_such_role_x PASSWORD 'hunter2-sql'"});
  ASSERT_NE(r.exit_status, 2) << r.err;
  SQLite::Database plain_db(plain);
  EXPECT_EQ(plain_db.execAndGet("SELECT sql FROM run").getString(),
            "ALTER ROLE no_such_role_x PASSWORD '***'");
}

// Issue 27: a run file deleted mid-run still ended with "run file: …" and
// exit 0. The deletion is detected: said, no "next:" line, exit 1.
TEST(RunCommand, RunFileDeletedMidRunIsSaidAndExits1) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto db = dir.file("gone.db");
  auto r = test::run_command(
      {"bash", "-c",
       "\"$1\" run -o \"$2\" \"$3\" -c 1 -T 3 -P 0 --sql 'SELECT 1' & pid=$!; "
       "for i in $(seq 100); do [ -e \"$2\" ] && break; sleep 0.05; done; sleep 1; "
       "rm -f \"$2\" \"$2-wal\" \"$2-shm\"; wait $pid",
       "sh", test::stallscope_bin(), db, conninfo});
  EXPECT_EQ(r.exit_status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("(deleted during the run: nothing kept)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("next:"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the run file was deleted while the run wrote it"), std::string::npos)
      << r.err;
}

// Issue 27: a baseline that is the run's own file, or a killed run, got no
// note in explain (or report) --baseline.
TEST(RunCommand, ExplainNotesABaselineThatIsTheSameFileOrDidNotEnd) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto a = dir.file("a.db");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", a, conninfo, "-c", "1", "-t",
                              "200", "-P", "0", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  std::filesystem::create_symlink(a, dir.file("link.db"));
  auto same = test::run_command({test::stallscope_bin(), "explain", a, dir.file("link.db")});
  ASSERT_EQ(same.exit_status, 0) << same.err;
  EXPECT_NE(same.out.find("is the same file as the run"), std::string::npos) << same.out;
  // A run killed mid-way: its file has no end.
  const auto killed = dir.file("killed.db");
  auto k = test::run_command(
      {"bash", "-c",
       "\"$1\" run -o \"$2\" \"$3\" -c 1 -T 30 -P 0 --sql 'SELECT 1' >/dev/null & pid=$!; "
       "sleep 2; kill -KILL $pid; wait $pid; exit 0",
       "sh", test::stallscope_bin(), killed, conninfo});
  ASSERT_EQ(k.exit_status, 0) << k.err;
  auto notes = test::run_command({test::stallscope_bin(), "explain", a, killed});
  ASSERT_EQ(notes.exit_status, 0) << notes.err;
  EXPECT_NE(notes.out.find("did not end"), std::string::npos) << notes.out;
  EXPECT_EQ(notes.out.find("is the same file"), std::string::npos) << notes.out;
  auto html = test::run_command(
      {test::stallscope_bin(), "report", a, "--baseline", a, "-o", dir.file("r.html")});
  ASSERT_EQ(html.exit_status, 0) << html.err;
  std::ifstream page(dir.file("r.html"));
  const std::string text((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("is the same file as the run"), std::string::npos);
}

}  // namespace
}  // namespace stallscope
