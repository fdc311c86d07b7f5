// `record --pg`: idle sessions stored compactly (pg_session, pg_session_idle),
// the client processes found by each route (the command and its
// descendants, the owner of a TCP client socket, --client-process NAME), and
// explain's session accounting adding up — against the scratch server.
#include <libpq-fe.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/pg.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope {
namespace {

// The scratch server over TCP on 127.0.0.1 (scratch-postgres listens there
// too), same port and user.
std::string tcp_conninfo(const std::string& conninfo) {
  std::smatch m;
  const std::regex port(R"(port=(\d+))");
  if (!std::regex_search(conninfo, m, port)) return "";
  return "host=127.0.0.1 port=" + m[1].str() + " user=postgres dbname=postgres";
}

nlohmann::json explain_json(const std::string& db_path) {
  auto e = test::run_command({test::stallscope_bin(), "explain", db_path, "--json"});
  EXPECT_EQ(e.exit_status, 0) << e.err;
  return nlohmann::json::parse(e.out);
}

// The client process of the JSON with this pid, or null.
nlohmann::json client_with_pid(const nlohmann::json& j, int pid) {
  for (const auto& c : j["sessions"]["client_processes"])
    if (c["pid"] == pid) return c;
  return nullptr;
}

// The session group of this application_name, or null.
nlohmann::json group_of(const nlohmann::json& j, const std::string& application_name) {
  for (const auto& g : j["sessions"]["groups"])
    if (g["application_name"] == application_name) return g;
  return nullptr;
}

std::int64_t sum_parts(const nlohmann::json& parts, const char* key = "time_ns") {
  std::int64_t sum = 0;
  for (const auto& p : parts) sum += p[key].get<std::int64_t>();
  return sum;
}

std::int64_t part_ns(const nlohmann::json& parts, const std::string& name) {
  for (const auto& p : parts)
    if (p["name"] == name) return p["time_ns"].get<std::int64_t>();
  return 0;
}

TEST(RecordSessions, IdleSessionsAreOneRowEachWithTheirPollsRunLengthEncoded) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  // Three sessions, idle for the whole record.
  std::vector<pg::Conn> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(pg::connect(conninfo, "idle-compact"));
  test::TempDir dir;
  auto db_path = dir.file("idle.db");
  auto r = test::run_command(
      {test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo, "-T", "2", "--hz", "20"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  const auto polls = db.execAndGet("SELECT count(*) FROM ash_tick").getInt64();
  EXPECT_GE(polls, 30);
  // One pg_session row each, with its identity.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_session WHERE application_name = "
                          "'idle-compact' AND backend_type = 'client backend' AND usename = "
                          "'postgres' AND datname = 'postgres' AND backend_start_ns > 0")
                .getInt(),
            3);
  for (auto& c : idle) {
    const std::string pid = std::to_string(pg::backend_pid(c.get()));
    // Idle in every poll: one stretch (shorter than 60 s) covering them all,
    // and no wide pg_activity_sample row.
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_session_idle i JOIN pg_session s USING "
                            "(session_id) WHERE s.pid = " +
                            pid)
                  .getInt(),
              1);
    EXPECT_EQ(db.execAndGet("SELECT sum(polls) FROM pg_session_idle i JOIN pg_session s USING "
                            "(session_id) WHERE s.pid = " +
                            pid)
                  .getInt64(),
              polls);
    EXPECT_EQ(db.execAndGet("SELECT i.first_ash_tick FROM pg_session_idle i JOIN pg_session s "
                            "USING (session_id) WHERE s.pid = " +
                            pid)
                  .getInt64(),
              1);
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pg_activity_sample WHERE pid = " + pid).getInt(),
              0);
  }
  EXPECT_EQ(db.execAndGet("PRAGMA user_version").getInt(), schema::kSchemaVersion);
}

TEST(RecordSessions, FindsTheCommandAndItsDescendantsAsClients) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  auto db_path = dir.file("command.db");
  // sh (the command) starts psql (its descendant), whose session is active
  // in pg_sleep and then idle until psql exits.
  const std::string script = "psql -X -q '" + conninfo +
                             " application_name=via-command' -c 'SELECT pg_sleep(1)' -c "
                             "'SELECT 1' >/dev/null; sleep 0.5";
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "--hz", "20", "--", "sh", "-c", script});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  const int sh_pid =
      db.execAndGet("SELECT pid FROM record_client WHERE source = 'command'").getInt();
  EXPECT_EQ(
      db.execAndGet("SELECT count(*) FROM process WHERE pid = " + std::to_string(sh_pid) +
                    " AND start_ticks = (SELECT start_ticks FROM record_client WHERE source = "
                    "'command')")
          .getInt(),
      1);
  auto j = explain_json(db_path);
  ASSERT_TRUE(j.contains("sessions")) << j.dump(1);
  auto sh = client_with_pid(j, sh_pid);
  ASSERT_FALSE(sh.is_null()) << j["sessions"].dump(1);
  EXPECT_EQ(sh["found_by"], "command");
  // psql: sh's child.
  const int psql_pid = db.execAndGet("SELECT pid FROM process WHERE comm = 'psql' AND ppid = " +
                                     std::to_string(sh_pid))
                           .getInt();
  auto psql = client_with_pid(j, psql_pid);
  ASSERT_FALSE(psql.is_null()) << j["sessions"].dump(1);
  EXPECT_EQ(psql["found_by"], "descendant");
  // Its session (a Unix socket, found through its peer) is psql's.
  auto g = group_of(j, "via-command");
  ASSERT_FALSE(g.is_null()) << j["sessions"].dump(1);
  EXPECT_EQ(g["client_addr"], "local");
  EXPECT_EQ(g["sessions"], 1);
  const auto pids = g["client_pids"].get<std::vector<int>>();
  EXPECT_NE(std::find(pids.begin(), pids.end(), psql_pid), pids.end()) << g.dump();
  // pg_sleep(1) is a Timeout wait of about a second.
  const auto sleep_ns = part_ns(g["parts"], "wait:Timeout");
  EXPECT_GE(sleep_ns, 700'000'000) << g.dump(1);
  EXPECT_LE(sleep_ns, 1'300'000'000) << g.dump(1);
}

TEST(RecordSessions, FindsTheOwnerOfATcpClientSocket) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  const auto tcp = tcp_conninfo(conninfo);
  ASSERT_FALSE(tcp.empty()) << conninfo;
  // This test process is the client: a TCP session, idle, not started by record.
  auto conn = pg::connect(tcp, "via-socket");
  test::TempDir dir;
  auto db_path = dir.file("socket.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "-T", "1.5", "--hz", "20"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT client_pid FROM pg_session WHERE application_name = "
                          "'via-socket'")
                .getInt(),
            static_cast<int>(::getpid()));
  EXPECT_EQ(
      db.execAndGet("SELECT client_addr FROM pg_session WHERE application_name = 'via-socket'")
          .getString(),
      "127.0.0.1");
  auto j = explain_json(db_path);
  auto me = client_with_pid(j, static_cast<int>(::getpid()));
  ASSERT_FALSE(me.is_null()) << j["sessions"].dump(1);
  EXPECT_EQ(me["found_by"], "socket");
  EXPECT_EQ(me["sessions"], 1);
  EXPECT_EQ(me["sessions_idle_share"], 1.0);
  auto g = group_of(j, "via-socket");
  ASSERT_FALSE(g.is_null());
  EXPECT_EQ(g["client_pids"], nlohmann::json::array({static_cast<int>(::getpid())}));
}

// A Unix-socket session of this process, which record did not start: its
// client is found through the peer of the backend's socket (sock_diag), as a
// TCP client is through its port.
TEST(RecordSessions, FindsTheOwnerOfAUnixSocketClient) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  auto conn = pg::connect(conninfo, "via-unix-socket");
  test::TempDir dir;
  auto db_path = dir.file("unix.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "-T", "1.5", "--hz", "20"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT client_pid FROM pg_session WHERE application_name = "
                          "'via-unix-socket'")
                .getInt(),
            static_cast<int>(::getpid()));
  auto j = explain_json(db_path);
  auto me = client_with_pid(j, static_cast<int>(::getpid()));
  ASSERT_FALSE(me.is_null()) << j["sessions"].dump(1);
  EXPECT_EQ(me["found_by"], "socket");
  auto g = group_of(j, "via-unix-socket");
  ASSERT_FALSE(g.is_null());
  EXPECT_EQ(g["client_addr"], "local");
  EXPECT_EQ(g["client_pids"], nlohmann::json::array({static_cast<int>(::getpid())}));
}

// With the application named (the command after --), a session whose
// socket another process on this host holds — another client running beside
// it — is the server's other load: listed apart, never in the application's
// groups or accounting.
TEST(RecordSessions, AnotherClientsSessionsAreOtherLoadNotTheApplications) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  ASSERT_EQ(std::system(("psql -X -q '" + conninfo +
                         " application_name=other-load' -c 'SELECT pg_sleep(3)' >/dev/null 2>&1 &")
                            .c_str()),
            0);
  test::TempDir dir;
  auto db_path = dir.file("other.db");
  const std::string script =
      "psql -X -q '" + conninfo + " application_name=the-app' -c 'SELECT pg_sleep(1.5)' >/dev/null";
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "--hz", "20", "--", "sh", "-c", script});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  auto j = explain_json(db_path);
  ASSERT_TRUE(j.contains("sessions")) << j.dump(1);
  EXPECT_FALSE(group_of(j, "the-app").is_null()) << j["sessions"].dump(1);
  EXPECT_TRUE(group_of(j, "other-load").is_null()) << j["sessions"].dump(1);
  const auto& other = j["sessions"]["other_load"];
  ASSERT_EQ(other["groups"].size(), 1u) << other.dump(1);
  EXPECT_EQ(other["groups"][0]["application_name"], "other-load");
  EXPECT_EQ(other["sessions"], 1);
  EXPECT_EQ(j["accounting"]["clients"], 1);  // the application's one session
  for (const auto& c : j["sessions"]["client_processes"]) EXPECT_NE(c["found_by"], "socket");
}

// A session left from before the command: its client (a psql over the Unix
// socket) was killed while its backend waited on a lock another session
// holds, so its backend waits on with no process holding its socket. It is
// the server's other load, not the command's: the command's think-time loop
// is no lock_wait.
TEST(RecordSessions, ASessionWhoseClientIsGoneFromBeforeTheCommandIsOtherLoad) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  auto holder = pg::connect(conninfo, "lock-holder");
  pg::Result(PQexec(holder.get(), "CREATE TABLE IF NOT EXISTS orphan_lock (v int)"));
  pg::Result(PQexec(holder.get(), "BEGIN"));
  pg::Result(PQexec(holder.get(), "LOCK TABLE orphan_lock IN ACCESS EXCLUSIVE MODE"));
  // The waiter's client is killed once its backend waits on the lock.
  ASSERT_EQ(std::system(("psql -X -q '" + conninfo +
                         " application_name=orphan' -c 'SELECT * FROM orphan_lock' "
                         ">/dev/null 2>&1 & p=$!; sleep 0.5; kill -9 $p")
                            .c_str()),
            0);
  test::TempDir dir;
  auto db_path = dir.file("orphan.db");
  // The command: one psql session (its session is seen at every poll) that
  // runs a query, then waits 50 ms, 40 times.
  const auto script = dir.file("loop.sql");
  {
    std::ofstream out(script);
    for (int i = 0; i < 40; ++i) out << "SELECT 1;\n\\! sleep 0.05\n";
  }
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "-T", "2", "--hz", "20", "--", "psql", "-X", "-q",
                              conninfo + " application_name=the-app", "-f", script});
  pg::Result(PQexec(holder.get(), "ROLLBACK"));
  ASSERT_EQ(r.exit_status, 0) << r.err;
  auto j = explain_json(db_path);
  ASSERT_TRUE(j.contains("sessions")) << j.dump(1);
  EXPECT_FALSE(group_of(j, "the-app").is_null()) << j["sessions"].dump(1);
  EXPECT_TRUE(group_of(j, "orphan").is_null()) << j["sessions"].dump(1);
  bool other = false;
  for (const auto& g : j["sessions"]["other_load"]["groups"]) {
    if (g["application_name"] == "orphan") other = true;
  }
  EXPECT_TRUE(other) << j["sessions"].dump(1);
  EXPECT_NE(j["verdict"]["kind"], "lock_wait") << j["verdict"].dump(1);
}

TEST(RecordSessions, FindsAClientProcessByName) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  // A psql that record did not start, named with --client-process: found by
  // its name (before its socket), and its session is the application's.
  ASSERT_EQ(std::system(("psql -X -q '" + conninfo +
                         " application_name=via-name' -c 'SELECT pg_sleep(3)' >/dev/null 2>&1 &")
                            .c_str()),
            0);
  test::TempDir dir;
  auto db_path = dir.file("name.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                              "-T", "1.5", "--hz", "20", "--client-process", "psql"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT comm FROM record_client WHERE source = 'comm'").getString(),
            "psql");
  auto j = explain_json(db_path);
  bool named = false;
  for (const auto& c : j["sessions"]["client_processes"]) {
    if (c["comm"] == "psql" && c["found_by"] == "name") named = true;
  }
  EXPECT_TRUE(named) << j["sessions"].dump(1);
  EXPECT_FALSE(group_of(j, "via-name").is_null()) << j["sessions"].dump(1);
}

TEST(RecordSessions, SessionAccountingAddsUpToTheSessionTime) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  auto conn = pg::connect(conninfo, "acct");
  test::TempDir dir;
  auto db_path = dir.file("acct.db");
  test::CommandResult r;
  std::thread record([&] {
    r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo, "-T",
                           "3", "--hz", "20"});
  });
  // Idle 0.5 s, in pg_sleep 1 s, idle in a transaction 0.7 s, idle to the end.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  pg::exec(conn.get(), "SELECT pg_sleep(1)", "sleep");
  pg::exec(conn.get(), "BEGIN", "begin");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  pg::exec(conn.get(), "COMMIT", "commit");
  record.join();
  ASSERT_EQ(r.exit_status, 0) << r.err;
  auto j = explain_json(db_path);
  ASSERT_TRUE(j.contains("sessions")) << j.dump(1);
  const auto& v = j["sessions"];
  // The parts of every group and of the view add up to their session time.
  EXPECT_EQ(sum_parts(v["parts"]), v["session_ns"].get<std::int64_t>());
  std::int64_t groups_ns = 0;
  for (const auto& g : v["groups"]) {
    EXPECT_EQ(sum_parts(g["parts"]), g["session_ns"].get<std::int64_t>()) << g.dump(1);
    groups_ns += g["session_ns"].get<std::int64_t>();
  }
  EXPECT_EQ(groups_ns, v["session_ns"].get<std::int64_t>());
  // The accounting: clients = sessions, total = session time, parts add up.
  const auto& a = j["accounting"];
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a["client_ns"], v["session_ns"]);
  EXPECT_EQ(a["clients"], v["sessions"]);
  EXPECT_EQ(sum_parts(a["parts"]), a["client_ns"].get<std::int64_t>()) << a.dump(1);
  // This session: about 1 s in pg_sleep, 0.7 s idle in transaction, the rest
  // of its ~3 s idle.
  auto g = group_of(j, "acct");
  ASSERT_FALSE(g.is_null()) << v.dump(1);
  const auto session_ns = g["session_ns"].get<std::int64_t>();
  EXPECT_GE(session_ns, 2'500'000'000);
  EXPECT_LE(session_ns, 3'500'000'000);
  const auto sleep_ns = part_ns(g["parts"], "wait:Timeout");
  EXPECT_GE(sleep_ns, 800'000'000) << g.dump(1);
  EXPECT_LE(sleep_ns, 1'200'000'000) << g.dump(1);
  const auto in_tx_ns = part_ns(g["parts"], "idle_in_transaction");
  EXPECT_GE(in_tx_ns, 500'000'000) << g.dump(1);
  EXPECT_LE(in_tx_ns, 900'000'000) << g.dump(1);
  EXPECT_EQ(part_ns(g["parts"], "idle"), session_ns - sleep_ns - in_tx_ns -
                                             part_ns(g["parts"], "on_cpu") -
                                             part_ns(g["parts"], "other"));
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

// An asyncio application (psycopg2 in asynchronous mode, its socket watched
// by the loop only while a query is out, as aiopg does). `between` runs
// after each answer; `background` is a task running beside the loop.
std::string asyncio_app(const std::string& query, const std::string& between,
                        const std::string& background) {
  return "import asyncio, sys, psycopg2, psycopg2.extensions as ext\n"
         "async def ready(loop, conn):\n"
         "    while True:\n"
         "        state = conn.poll()\n"
         "        if state == ext.POLL_OK:\n"
         "            return\n"
         "        fut = loop.create_future()\n"
         "        add, remove = ((loop.add_reader, loop.remove_reader) if state == ext.POLL_READ\n"
         "                       else (loop.add_writer, loop.remove_writer))\n"
         "        add(conn.fileno(), fut.set_result, None)\n"
         "        try:\n"
         "            await fut\n"
         "        finally:\n"
         "            remove(conn.fileno())\n"
         "async def main():\n"
         "    loop = asyncio.get_running_loop()\n"
         "    keep = asyncio.create_task(" +
         background +
         ")\n"
         "    conn = psycopg2.connect(sys.argv[1], async_=1)\n"
         "    await ready(loop, conn)\n"
         "    cur = conn.cursor()\n"
         "    while True:\n"
         "        cur.execute('" +
         query +
         "')\n"
         "        await ready(loop, conn)\n"
         "        cur.fetchall()\n"
         "        " +
         between +
         "\n"
         "asyncio.run(main())\n";
}

// The waits of the application's process: process_poll rows of its
// python3 process, (timed, peer_sockets) → rows.
std::map<std::pair<int, int>, int> python_poll_rows(const std::string& db_path) {
  SQLite::Database db(db_path);
  SQLite::Statement q(
      db,
      "SELECT pp.timed, coalesce(pp.peer_sockets, -1), count(*) FROM process_poll "
      "pp JOIN process p USING (process_id) WHERE p.comm = 'python3' GROUP BY 1, 2");
  std::map<std::pair<int, int>, int> out;
  while (q.executeStep()) {
    out[{q.getColumn(0).getInt(), q.getColumn(1).getInt()}] = q.getColumn(2).getInt();
  }
  return out;
}

// Think time inside an event loop: between queries the loop sleeps in
// epoll_wait until its 10 ms timer, with only its own socketpair in the set
// (process_poll timed, no peer socket), and explain calls that time the
// client's think time, not round trips. The same loop awaiting a 20 ms query
// while a long timer of another task is pending waits with a timeout too,
// but on the database socket (a peer): that is not think time.
TEST(RecordSessions, AnEventLoopAsleepOnItsOwnTimerIsThinkTimeNotRoundTrips) {
  if (std::system("/usr/bin/python3 -c 'import psycopg2' 2>/dev/null") != 0) {
    GTEST_SKIP() << "no python3 with psycopg2 (tools/install-deps installs python3-psycopg2)";
  }
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  struct Shape {
    const char* name;
    std::string app;
  };
  const Shape shapes[] = {
      {"think", asyncio_app("SELECT 1", "await asyncio.sleep(0.010)", "asyncio.sleep(0)")},
      {"busy", asyncio_app("SELECT count(*) FROM generate_series(1, 300000)", "pass",
                           "asyncio.sleep(3600)")}};
  for (const auto& shape : shapes) {
    SCOPED_TRACE(shape.name);
    const auto app = dir.file(std::string(shape.name) + ".py");
    std::ofstream(app) << shape.app;
    const auto db_path = dir.file(std::string(shape.name) + ".db");
    auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo,
                                "-T", "3", "-P", "0", "--", "/usr/bin/python3", app,
                                conninfo + " application_name=" + shape.name});
    ASSERT_EQ(r.exit_status, 0) << r.err;
    const auto rows = python_poll_rows(db_path);
    const int own_timer = rows.contains({1, 0}) ? rows.at({1, 0}) : 0;
    int with_peer = 0;
    for (const auto& [key, n] : rows) {
      if (key.first == 1 && key.second > 0) with_peer += n;
    }
    auto j = explain_json(db_path);
    const auto& parts = j["accounting"]["parts"];
    const double session = double(sum_parts(parts));
    ASSERT_GT(session, 0);
    const auto part_share = [&](const char* name) {
      for (const auto& p : parts)
        if (p["part"] == name) return double(p["time_ns"].get<std::int64_t>()) / session;
      return 0.0;
    };
    const double think = part_share("client_sleep");
    if (std::string(shape.name) == "think") {
      EXPECT_GE(own_timer, 10) << j["accounting"].dump(1);
      EXPECT_GE(think, 0.5) << parts.dump(1);
      EXPECT_LT(part_share("remainder"), 0.2) << parts.dump(1);
      EXPECT_TRUE(j["verdict"]["kind"].is_null()) << j["verdict"].dump(1);
    } else {
      EXPECT_GE(with_peer, 1) << "no timed wait on the database socket";
      EXPECT_LT(think, 0.2) << parts.dump(1);
    }
  }
}

}  // namespace
}  // namespace stallscope
