// `stallscope record`: sampling only, beside a command or for a duration.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace stallscope {
namespace {

TEST(RecordCommand, SamplesForTheLifeOfACommandAndKeepsItsStatus) {
  test::TempDir dir;
  auto db_path = dir.file("sleep.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--", "sleep", "2"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  auto ticks = db.execAndGet("SELECT count(*) FROM sample").getInt();
  EXPECT_GE(ticks, 16);
  EXPECT_LE(ticks, 24);
  EXPECT_EQ(db.execAndGet("SELECT command FROM run").getString(), "sleep 2");
  EXPECT_EQ(db.execAndGet("SELECT command_exit_status FROM run").getInt(), 0);
  EXPECT_EQ(db.execAndGet("SELECT mode || ':' || status FROM run").getString(), "record:complete");
  // The command itself was sampled: a process "sleep" whose parent is stallscope.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM process p, run r WHERE p.comm = 'sleep' "
                          "AND p.ppid = r.stallscope_pid")
                .getInt(),
            1);
  // No database was given: no ASH.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM ash_tick").getInt(), 0);
}

TEST(RecordCommand, WithThreadsSamplesOtherProcessesThreadsButNotItsOwn) {
  test::TempDir dir;
  auto db_path = dir.file("threads.db");
  // The command is multi-threaded for its whole life (stallscope record of
  // its own, with -T 2): its threads are rows, the outer record's are not.
  auto inner = dir.file("inner.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--threads", "--",
                              test::stallscope_bin(), "record", "-o", inner, "-T", "2"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  const int own = db.execAndGet("SELECT stallscope_pid FROM run").getInt();
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM thread_sample t JOIN process p USING (process_id) "
                          "WHERE p.pid = " +
                          std::to_string(own))
                .getInt(),
            0);
  // The inner record's sampler thread ran every tick: it has rows.
  EXPECT_GE(db.execAndGet("SELECT count(*) FROM thread_sample t JOIN process p USING (process_id) "
                          "WHERE p.ppid = " +
                          std::to_string(own) + " AND t.comm = 'ss-sampler'")
                .getInt(),
            10);
}

TEST(RecordCommand, ExitsWithTheCommandsStatus) {
  test::TempDir dir;
  auto r =
      test::run_command({test::stallscope_bin(), "record", "-o", dir.file("f.db"), "--", "false"});
  EXPECT_EQ(r.exit_status, 1) << r.err;
  SQLite::Database db(dir.file("f.db"));
  EXPECT_EQ(db.execAndGet("SELECT command_exit_status FROM run").getInt(), 1);

  auto missing = test::run_command(
      {test::stallscope_bin(), "record", "-o", dir.file("m.db"), "--", "/nonexistent/cmd"});
  EXPECT_EQ(missing.exit_status, 2) << missing.err;
  EXPECT_NE(missing.err.find("/nonexistent/cmd"), std::string::npos) << missing.err;
}

TEST(RecordCommand, WithTAndACommandEndsTheCommandAtT) {
  test::TempDir dir;
  auto db_path = dir.file("limit.db");
  const auto start = std::chrono::steady_clock::now();
  auto r = test::run_command(
      {test::stallscope_bin(), "record", "-o", db_path, "-T", "1", "--", "sleep", "30"});
  const auto took = std::chrono::steady_clock::now() - start;
  // record ended the command (SIGTERM) after -T and exits 0: the limit was its own.
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_LT(took, std::chrono::seconds(10));
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT end_reason FROM run").getString(),
            "duration reached; command ended with status 143");
  EXPECT_EQ(db.execAndGet("SELECT command_exit_status FROM run").getInt(), 143);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
  // The command's identity, for explain.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM record_client r JOIN process p ON p.pid = r.pid "
                          "AND p.start_ticks = r.start_ticks WHERE r.source = 'command' AND "
                          "p.comm = 'sleep'")
                .getInt(),
            1);
}

// A command that ignores SIGTERM: `exec` keeps the ignored disposition, so
// the command is sleep itself, and the SIGKILL ends it (no grandchild keeps
// the test's pipes open). The outer limit bounds a record that waits forever.
std::vector<std::string> ignoring_term(const std::string& signals, int limit_s) {
  return {"sh", "-c", "trap '' " + signals + "; exec sleep " + std::to_string(limit_s)};
}

TEST(RecordCommand, CommandIgnoringSigtermAtTIsKilledAfterKillAfter) {
  test::TempDir dir;
  auto db_path = dir.file("stubborn.db");
  std::vector<std::string> argv{"timeout",      "-s", "KILL",  "30", test::stallscope_bin(),
                                "record",       "-o", db_path, "-T", "1",
                                "--kill-after", "1s", "--"};
  for (auto& a : ignoring_term("TERM", 30)) argv.push_back(a);
  const auto start = std::chrono::steady_clock::now();
  auto r = test::run_command(argv);
  const auto took = std::chrono::steady_clock::now() - start;
  // -T ended it (record's own exit 0), and not the outer 30 s timeout.
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_LT(took, std::chrono::seconds(15));
  EXPECT_NE(r.err.find("stallscope record: the command (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") was still running 1 s after SIGTERM: sent it SIGKILL\n"),
            std::string::npos)
      << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
  EXPECT_EQ(db.execAndGet("SELECT end_reason FROM run").getString(),
            "duration reached; command ended with status 137 (killed: still running 1 s after "
            "SIGTERM)");
  EXPECT_EQ(db.execAndGet("SELECT command_exit_status FROM run").getInt(), 128 + SIGKILL);
}

// The exit status of `pid` once it ends, waiting at most `limit`; -1 (and
// the process killed) when it did not end by then.
int wait_at_most(int pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

TEST(RecordCommand, SignalPassedOnToACommandThatIgnoresItIsFollowedBySigkill) {
  test::TempDir dir;
  auto db_path = dir.file("stubborn.db");
  // The default --kill-after, 5 s.
  std::vector<std::string> argv{test::stallscope_bin(), "record", "-o", db_path, "--"};
  for (auto& a : ignoring_term("INT TERM", 30)) argv.push_back(a);
  const int pid = test::spawn(argv);
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  kill(pid, SIGINT);
  // record exits with the command's status: 128 + SIGKILL.
  EXPECT_EQ(wait_at_most(pid, std::chrono::seconds(25)), 128 + SIGKILL);
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "interrupted");
  EXPECT_EQ(db.execAndGet("SELECT end_reason FROM run").getString(),
            "command exited with status 137 (killed: still running 5 s after SIGINT)");
  EXPECT_EQ(db.execAndGet("SELECT command_exit_status FROM run").getInt(), 128 + SIGKILL);
}

TEST(RecordCommand, KillAfterIsADurationForACommand) {
  test::TempDir dir;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--kill-after", "5s", "-T", "1"},
        std::vector<std::string>{"--kill-after", "0", "--", "true"},
        std::vector<std::string>{"--kill-after", "soon", "--", "true"},
        std::vector<std::string>{"--kill-after", "100000001", "--", "true"}}) {
    std::vector<std::string> argv{test::stallscope_bin(), "record", "-o", dir.file("k.db")};
    argv.insert(argv.end(), bad.begin(), bad.end());
    auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << bad[1] << ": " << r.err;
    EXPECT_NE(r.err.find("kill-after"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("k.db"))) << bad[1];
  }
}

// Issue 15, from a hostile test: the command record started and the
// command lines of the processes it sampled showed these secrets in clear.
TEST(RecordCommand, StoresCommandAndProcessCommandLinesMasked) {
  test::TempDir dir;
  const auto db_path = dir.file("secrets.db");
  // Each child shows S3cret in /proc/PID/cmdline: an argv[0] with spaces
  // (exec -a), a MariaDB client's -p (bash named mariadb-dump, its $0
  // -pS3cret), a URI password holding '@', an Authorization header, MYSQL_PWD.
  const std::string script =
      "(exec -a 'app --password S3cret' sleep 2) & "
      "(exec -a mariadb-dump bash -c 'sleep 2; true' -pS3cret) & "
      "(exec -a 'psql postgresql://u:p@S3cret@db/x' sleep 2) & "
      "(exec -a 'env MYSQL_PWD=S3cret' sleep 2) & "
      "(exec -a 'curl -H Authorization: Bearer S3cret' sleep 2) & wait";
  const auto r = test::run_command(
      {test::stallscope_bin(), "record", "-o", db_path, "--", "bash", "-c", script});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  const auto command = db.execAndGet("SELECT command FROM run").getString();
  EXPECT_EQ(command.find("S3cret"), std::string::npos) << command;
  EXPECT_NE(command.find("bash -c '(exec -a '\\''app --password ***"), std::string::npos)
      << command;
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM process WHERE cmdline LIKE '%S3cret%'").getInt(),
            0);
  for (const std::string expected : {"app --password *** 2", "mariadb-dump -c sleep 2; true -p***",
                                     "psql postgresql://u:***@db/x 2", "env MYSQL_PWD=*** 2",
                                     "curl -H Authorization: Bearer *** 2"}) {
    SQLite::Statement q(db, "SELECT count(*) FROM process WHERE cmdline = ?");
    q.bind(1, expected);
    ASSERT_TRUE(q.executeStep());
    EXPECT_GE(q.getColumn(0).getInt(), 1) << expected;
  }
}

TEST(RecordCommand, SamplesPgStatActivityWithPg) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  auto db_path = dir.file("pg.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "-T", "1.5", "--hz", "20"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  EXPECT_GE(db.execAndGet("SELECT count(*) FROM ash_tick").getInt(), 20);
  EXPECT_GE(db.execAndGet("SELECT count(*) FROM sample").getInt(), 24);
  EXPECT_EQ(db.execAndGet("SELECT end_reason FROM run").getString(), "duration reached");
  // Background processes (checkpointer, walwriter…) are not idle clients: ASH sees them.
  EXPECT_GT(db.execAndGet(
                  "SELECT count(*) FROM pg_activity_sample WHERE backend_type <> 'client backend'")
                .getInt(),
            0);
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

// Issue 27: a server that accepts the login and fails every query (a
// pooler whose server is gone; here a role in a database where
// pg_stat_activity may not be read) gave 0 ASH samples, no warning and
// end_reason "duration reached". It is said on stderr and in the end reason.
TEST(RecordCommand, SaysSoWhenEveryAshPollFails) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::psql(conninfo, "DROP DATABASE IF EXISTS ash_denied");
  test::psql(conninfo, "CREATE DATABASE ash_denied");
  test::psql(conninfo, "DROP ROLE IF EXISTS ash_denied; CREATE ROLE ash_denied LOGIN");
  test::psql(conninfo + " dbname=ash_denied", "REVOKE SELECT ON pg_stat_activity FROM PUBLIC");
  test::TempDir dir;
  auto db_path = dir.file("denied.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg",
                              conninfo + " dbname=ash_denied user=ash_denied", "-T", "1.5"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: no ASH samples: all "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("permission denied for view pg_stat_activity"), std::string::npos) << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM ash_tick").getInt(), 0);
  const auto reason = db.execAndGet("SELECT end_reason FROM run").getString();
  EXPECT_EQ(reason.rfind("duration reached; no ASH samples: all ", 0), 0u) << reason;
  EXPECT_NE(reason.find("ASH polls failed (last: cannot poll pg_stat_activity: ERROR:  permission "
                        "denied for view pg_stat_activity"),
            std::string::npos)
      << reason;
  // explain prints the end reason.
  auto e = test::run_command({test::stallscope_bin(), "explain", db_path});
  EXPECT_NE(e.out.find("no ASH samples: all "), std::string::npos) << e.out << e.err;
}

// Issue 27: another session's ALTER ROLE … PASSWORD '…' was stored in
// pg_query_text (and shown in the report). SQL text carrying a password is
// masked before it is stored.
TEST(RecordCommand, MasksPasswordsInSampledSqlText) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::psql(conninfo, "DROP ROLE IF EXISTS masked_role; CREATE ROLE masked_role");
  test::TempDir dir;
  auto db_path = dir.file("masked.db");
  // Active for 3 s each: ASH sees them whatever the moment record starts.
  std::thread other([&] {
    test::psql(conninfo,
               "ALTER ROLE masked_role PASSWORD 'S3cretPw1'; SELECT 'host=db password=S3cretPw2' "
               "AS c, pg_sleep(3)");
  });
  auto r = test::run_command(
      {test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo, "-T", "2"});
  other.join();
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(
      db.execAndGet("SELECT count(*) FROM pg_query_text WHERE query LIKE '%S3cretPw%'").getInt(),
      0);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_query_text WHERE query = 'ALTER ROLE "
                          "masked_role PASSWORD ''***''; SELECT ''host=db password=***'' AS c, "
                          "pg_sleep(3)'")
                .getInt(),
            1);
}

}  // namespace
// At -T, record ends its command and what the command started: a shell's
// background job (here a sleep that would outlive it) is signalled too, and
// one that ignores SIGTERM is sent SIGKILL --kill-after later, with a line.
TEST(RecordCommand, TheCommandsDescendantsAreEndedWithIt) {
  for (const bool ignores_term : {false, true}) {
    test::TempDir dir;
    const auto pid_file = dir.file("job.pid");
    const std::string job = ignores_term ? "sh -c 'trap \"\" TERM; exec sleep 60'" : "sleep 60";
    auto r = test::run_command({test::stallscope_bin(), "record", "-o", dir.file("tree.db"), "-T",
                                "1", "--kill-after", "0.5s", "-P", "0", "--", "sh", "-c",
                                job + " & echo $! > '" + pid_file + "'; wait"});
    ASSERT_EQ(r.exit_status, 0) << r.err;
    std::ifstream in(pid_file);
    int pid = 0;
    ASSERT_TRUE(in >> pid) << pid_file;
    // Gone, or a zombie about to be reaped by init: not sleeping on.
    bool running = false;
    for (int i = 0; i < 50; ++i) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string text;
      running = std::getline(stat, text) && text.find(") Z ") == std::string::npos &&
                text.find("(sleep)") != std::string::npos;
      if (!running) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_FALSE(running) << "sleep (pid " << pid << ") outlived record; ignores SIGTERM "
                          << ignores_term;
    EXPECT_EQ(
        r.err.find("was still running 0.5 s after SIGTERM: sent it SIGKILL") != std::string::npos,
        ignores_term)
        << r.err;
  }
}

}  // namespace stallscope
