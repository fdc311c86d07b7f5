// Client + server explain on a real pair of files: `stallscope run` against
// the scratch server while `stallscope record --pg` samples the same host
// (here the one machine plays both the client and the database host), then
// `explain run.db rec.db --json` — and the per-query attribution of a plain
// `run` file.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

extern char** environ;

namespace stallscope {
namespace {

using test::run_command;

// The accounting part named `name` (null when absent).
nlohmann::json part(const nlohmann::json& accounting, const std::string& name) {
  for (const auto& p : accounting["parts"])
    if (p["part"] == name) return p;
  return nullptr;
}

TEST(ExplainPair, RunWithAConcurrentRecordSplitsTheAccountingByHost) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto run_db = dir.file("run.db"), rec_db = dir.file("rec.db");
  // The server host's recorder: sampling before, during and after the run.
  std::vector<std::string> argv{
      test::stallscope_bin(), "record", "-o", rec_db, "--pg", conninfo, "-T", "9"};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t rec = 0;
  ASSERT_EQ(posix_spawn(&rec, args[0], nullptr, nullptr, args.data(), environ), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // Over TCP (a later host= overrides the conninfo's socket directory), as
  // from another host.
  const auto r = run_command({test::stallscope_bin(), "run", "-o", run_db,
                              conninfo + " host=127.0.0.1", "-c", "2", "-j", "1", "-T", "4", "-P",
                              "0", "--sql", "SELECT count(*) FROM pg_class a, pg_class b"});
  int status = 0;
  waitpid(rec, &status, 0);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  // Each connection's client end is the server's client_addr and
  // client_port of its backend: the key that ties a server's sessions to a
  // client file's connections.
  {
    SQLite::Database db(run_db);
    db.exec("ATTACH '" + rec_db + "' AS srv");
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM client WHERE local_addr = '127.0.0.1' AND "
                            "local_port > 0")
                  .getInt(),
              2);
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM client c WHERE EXISTS (SELECT 1 FROM "
                            "srv.pg_session s WHERE s.pid = c.backend_pid AND s.client_addr = "
                            "c.local_addr AND s.client_port = c.local_port)")
                  .getInt(),
              2);
  }
  const auto e = run_command({test::stallscope_bin(), "explain", run_db, rec_db, "--json"});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  // The server file's times were moved by the run's clock-offset estimates.
  ASSERT_TRUE(j.contains("clock"));
  EXPECT_GE(j["clock"]["estimates"].get<int>(), 2);
  EXPECT_TRUE(j["clock"]["applied"].get<bool>());
  ASSERT_EQ(j["hosts"].size(), 2u);
  EXPECT_EQ(j["hosts"][0]["role"], "client");
  EXPECT_EQ(j["hosts"][1]["role"], "server");

  const auto& a = j["accounting"];
  ASSERT_TRUE(a.is_object());
  // Client host: the driver's CPU and run queue, from run.db.
  for (const char* name : {"driver_cpu", "client_run_queue"}) {
    const auto p = part(a, name);
    ASSERT_FALSE(p.is_null()) << name;
    EXPECT_EQ(p["host"], "client") << name;
  }
  EXPECT_GT(part(a, "driver_cpu")["time_ns"].get<std::int64_t>(), 0);
  // Server host: the backends' CPU from rec.db's processes (the cross join
  // keeps them busy), their waits and run queue.
  const auto server_cpu = part(a, "server_cpu");
  ASSERT_FALSE(server_cpu.is_null());
  EXPECT_EQ(server_cpu["host"], "server");
  EXPECT_GT(server_cpu["time_ns"].get<std::int64_t>(), 100'000'000);
  EXPECT_EQ(part(a, "run_queue")["host"], "server");
  for (const auto& p : a["parts"]) {
    const auto name = p["part"].get<std::string>();
    if (name.starts_with("server_wait:") || name.starts_with("server_d_state:")) {
      EXPECT_EQ(p["host"], "server") << name;
    }
  }
  EXPECT_TRUE(part(a, "remainder")["host"].is_null());
  // Each query was joined to its backend, found among rec.db's processes.
  EXPECT_EQ(j["attribution"]["method"], "per_query");
  EXPECT_EQ(j["attribution"]["joined_queries"], j["run"]["queries"]);
  EXPECT_GT(j["run"]["queries"].get<std::int64_t>(), 0);

  // Files are told apart by what they hold: the server's file first gives
  // the same report.
  const auto swapped = run_command({test::stallscope_bin(), "explain", rec_db, run_db, "--json"});
  ASSERT_EQ(swapped.exit_status, 0) << swapped.err;
  EXPECT_EQ(nlohmann::json::parse(swapped.out), j);
  const auto page = dir.file("pair.html");
  const auto rep = run_command({test::stallscope_bin(), "report", rec_db, run_db, "-o", page});
  EXPECT_EQ(rep.exit_status, 0) << rep.err;

  // The text groups the parts under each host.
  const auto t = run_command({test::stallscope_bin(), "explain", run_db, rec_db});
  ASSERT_EQ(t.exit_status, 0) << t.err;
  EXPECT_NE(t.out.find("  client host "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("  server host "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("per query: "), std::string::npos) << t.out;

  // A record file taken after the run (its samples start after the last
  // query) does not overlap it: a one-line usage error.
  const auto late_db = dir.file("late.db");
  ASSERT_EQ(run_command({test::stallscope_bin(), "record", "-o", late_db, "-T", "1"}).exit_status,
            0);
  const auto n = run_command({test::stallscope_bin(), "explain", run_db, late_db});
  EXPECT_EQ(n.exit_status, 2);
  EXPECT_NE(n.err.find("do not overlap"), std::string::npos) << n.err;
  EXPECT_EQ(std::count(n.err.begin(), n.err.end(), '\n'), 1) << n.err;
}

}  // namespace
}  // namespace stallscope
