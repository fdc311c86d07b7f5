// Outages: a server stopped for seconds and started again
// mid-run, and a server that accepts connections and never answers. Each
// test has a PostgreSQL of its own (tools/scratch-postgres start/down/up/stop)
// or a TCP listener of its own, so stopping it disturbs no other test.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/units.h"
#include "driver/driver.h"
#include "support/test_support.h"

extern char** environ;

namespace stallscope {
namespace {

using namespace std::chrono_literals;

std::string scratch_postgres() {
  const char* dir = std::getenv("STALLSCOPE_SOURCE_DIR");
  return std::string(dir ? dir : STALLSCOPE_SOURCE_DIR_DEFAULT) + "/tools/scratch-postgres";
}

// A PostgreSQL of the test's own, which it can stop (fast shutdown) and start
// again on the same port; removed at the end.
class PrivateServer {
 public:
  PrivateServer() {
    auto r = test::run_command({scratch_postgres(), "start"});
    if (r.exit_status != 0) {
      ADD_FAILURE() << "cannot start a private server: " << r.err;
      return;
    }
    conninfo_ = r.out.substr(0, r.out.find('\n'));
  }
  ~PrivateServer() {
    if (frozen_) freeze(false);
    if (!conninfo_.empty()) test::run_command({scratch_postgres(), "stop", conninfo_});
  }
  PrivateServer(const PrivateServer&) = delete;
  PrivateServer& operator=(const PrivateServer&) = delete;
  const std::string& conninfo() const { return conninfo_; }
  // pg_ctl stop -m fast / pg_ctl start, as the cluster's owner.
  test::CommandResult down() const {
    return test::run_command({scratch_postgres(), "down", conninfo_});
  }
  test::CommandResult up() const {
    return test::run_command({scratch_postgres(), "up", conninfo_});
  }
  // SIGSTOP (true) or SIGCONT (false) to the postmaster and its children: a
  // server that accepts connections and answers nothing.
  void freeze(bool stop) {
    const auto host_at = conninfo_.find("host=");
    const std::string dir =
        conninfo_.substr(host_at + 5, conninfo_.find(' ', host_at) - host_at - 5);
    std::ifstream pidfile(dir + "/data/postmaster.pid");
    int postmaster = 0;
    pidfile >> postmaster;
    if (postmaster <= 0) {
      ADD_FAILURE() << "no postmaster.pid in " << dir;
      return;
    }
    std::vector<int> pids{postmaster};
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      // pid (comm) state ppid …: the comm may hold spaces, so read after ')'.
      std::istringstream rest(line.substr(line.rfind(')') + 1));
      char state = 0;
      int ppid = 0;
      rest >> state >> ppid;
      if (ppid == postmaster) pids.push_back(std::stoi(entry.path().filename().string()));
    }
    for (int pid : pids) ::kill(pid, stop ? SIGSTOP : SIGCONT);
    frozen_ = stop;
  }

 private:
  std::string conninfo_;
  bool frozen_ = false;
};

// A server that accepts connections (the kernel completes the handshake for
// the listen backlog) and never answers: a TCP socket listening on a free
// port of 127.0.0.1, never accept()ed.
class HungServer {
 public:
  HungServer() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~HungServer() {
    if (fd_ >= 0) ::close(fd_);
  }
  HungServer(const HungServer&) = delete;
  HungServer& operator=(const HungServer&) = delete;
  // With a password, to check that errors mask it.
  std::string conninfo() const {
    return fmt::format("host=127.0.0.1 port={} user=postgres dbname=postgres password=S3cret",
                       port_);
  }

 private:
  int fd_;
  int port_ = 0;
};

// A stallscope process started without waiting, its stdout and stderr in
// files of `dir`.
class Spawned {
 public:
  Spawned(std::vector<std::string> argv, const test::TempDir& dir)
      : out_path_(dir.file("stdout")), err_path_(dir.file("stderr")) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    started_ = std::chrono::steady_clock::now();
  }
  ~Spawned() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;
  bool started() const { return pid_ > 0; }
  void signal(int sig) const { ::kill(pid_, sig); }
  // Waits at most `limit`; the wait status, or nullopt when it still runs
  // (then it is killed).
  std::optional<int> wait(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        elapsed_ = std::chrono::steady_clock::now() - started_;
        return status_;
      }
      std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
  }
  double elapsed_s() const { return std::chrono::duration<double>(elapsed_).count(); }
  std::string out() const { return slurp(out_path_); }
  std::string err() const { return slurp(err_path_); }

 private:
  static std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::duration elapsed_{};
};

std::int64_t count(SQLite::Database& db, const std::string& sql) {
  return db.execAndGet(sql).getInt64();
}

bool exited_with(const std::optional<int>& status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

// `run -T 12 -c 4` with the server stopped (fast shutdown) at ~3 s and
// started again ~3 s later: every client reconnects, the run goes on to -T
// and says so, the lost transactions and failed reconnect attempts are
// stored with their SQLSTATE, and explain names the outage a
// connection_lost stall. (Before: the clients gave up after six attempts
// within ~3 s and the run ended at ~7 s saying "duration reached".)
TEST(Outage, RunReconnectsEveryClientAndGoesOnToTheDuration) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  test::TempDir dir;
  const auto db_path = dir.file("outage.db");
  Spawned run({test::stallscope_bin(), "run", "-o", db_path, server.conninfo(), "-T", "12", "-c",
               "4", "-P", "1", "--sql", "SELECT pg_sleep(0.002)"},
              dir);
  ASSERT_TRUE(run.started());
  std::this_thread::sleep_for(3s);
  const std::int64_t down_ns = wall_now_ns();
  auto down = server.down();
  ASSERT_EQ(down.exit_status, 0) << down.err;
  std::this_thread::sleep_for(3s);
  auto up = server.up();
  const std::int64_t up_ns = wall_now_ns();
  ASSERT_EQ(up.exit_status, 0) << up.err;
  const auto status = run.wait(60s);
  ASSERT_TRUE(exited_with(status, 0)) << run.err();
  std::printf("run -T 12 with a 3 s outage took %.1f s\n", run.elapsed_s());

  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status || ':' || end_reason FROM run").getString(),
            "complete:duration reached");
  // Driven to -T: the run row spans the 12 s, not the 7 s to the clients' end.
  EXPECT_GE(count(db, "SELECT end_ns - start_ns FROM run"), 11 * common::kNsPerS);
  // Every client answered queries after the restart, on a new backend.
  EXPECT_EQ(
      count(db, fmt::format("SELECT count(DISTINCT q.client_id) FROM query q WHERE q.start_ns "
                            "> {} AND NOT EXISTS (SELECT 1 FROM query_error e WHERE "
                            "(e.start_ns, e.client_id, e.seq) = (q.start_ns, q.client_id, "
                            "q.seq))",
                            up_ns)),
      4);
  EXPECT_EQ(count(db, "SELECT count(DISTINCT client_id) FROM client WHERE connection >= 1"), 4);
  // The broken transactions (57P01 admin shutdown, or 08006) and the failed
  // reconnect attempts (08001), all with a message.
  EXPECT_GE(count(db,
                  "SELECT count(*) FROM query_error WHERE sqlstate IN ('57P01', '08006') AND "
                  "error <> ''"),
            1);
  EXPECT_GE(count(db,
                  "SELECT count(*) FROM query_error WHERE sqlstate = '08001' AND error LIKE "
                  "'cannot reconnect: %'"),
            4);
  // The failed rows cover the outage: each client's rows reach into its
  // middle.
  const std::int64_t mid_ns = (down_ns + up_ns) / 2;
  EXPECT_EQ(count(db, fmt::format("SELECT count(DISTINCT q.client_id) FROM query q JOIN "
                                  "query_error e USING (start_ns, client_id, seq) WHERE "
                                  "q.start_ns <= {0} AND q.start_ns + q.latency_ns >= {0} - {1}",
                                  mid_ns, common::kNsPerS)),
            4);
  // The progress lines said the clients were reconnecting.
  EXPECT_NE(run.err().find(" reconnecting"), std::string::npos) << run.err();

  auto e = test::run_command({test::stallscope_bin(), "explain", db_path, "--json"});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  bool covered = false;
  for (const auto& s : j["stalls"]) {
    if (s["cause"] != "connection_lost") continue;
    if (s["start_ns"].get<std::int64_t>() <= mid_ns && s["end_ns"].get<std::int64_t>() > mid_ns) {
      covered = true;
      EXPECT_NE(s["explanation"].get<std::string>().find("reconnecting for"), std::string::npos)
          << s["explanation"];
      EXPECT_NE(s["culprit"].get<std::string>().find("08001"), std::string::npos) << s["culprit"];
    }
  }
  EXPECT_TRUE(covered) << "no connection_lost stall covers the outage: " << j["stalls"].dump(1);
  // The accounting still adds up with the outage in it.
  std::int64_t parts_ns = 0;
  for (const auto& p : j["accounting"]["parts"]) parts_ns += p["time_ns"].get<std::int64_t>();
  EXPECT_EQ(parts_ns, j["accounting"]["query_ns"].get<std::int64_t>());
}

// -t: a client whose server stays away gives up after give_up_after_ns of
// failing in a row, and once every client has, run() returns and says the
// server was lost. (Before: each client stopped after six attempts, ~3 s,
// and nothing said the server was lost.)
TEST(Outage, DriverGivesUpOnAServerThatStaysAwayWithTransactionCounts) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  driver::DriverOptions o;
  o.conninfo = server.conninfo();
  o.clients = 2;
  o.queries_per_client = 1'000'000'000;
  o.sql = "SELECT pg_sleep(0.002)";
  o.give_up_after_ns = 5 * common::kNsPerS;
  test::Collected got;
  driver::Driver d(o, got.sink());
  d.connect();
  std::jthread stopper([&] {
    std::this_thread::sleep_for(1s);
    auto down = server.down();
    EXPECT_EQ(down.exit_status, 0) << down.err;
  });
  const std::int64_t start_ns = mono_now_ns();
  d.run();
  const double took_s = double(mono_now_ns() - start_ns) / common::kNsPerSDouble;
  std::printf("gave up after %.1f s (server down at 1 s, give-up 5 s)\n", took_s);
  ASSERT_TRUE(d.server_lost().has_value());
  EXPECT_NE(d.server_lost()->find("cannot reconnect: "), std::string::npos) << *d.server_lost();
  EXPECT_EQ(d.summary().clients_lost, 2);
  // Reconnect attempts went on for the 5 s: at 1 s apart at most, each
  // client made more than the six attempts it used to stop after.
  for (int client = 0; client < 2; ++client) {
    auto q = got.queries(client);
    const auto attempts = std::count_if(q.begin(), q.end(), [](const auto& t) {
      return t.sqlstate == std::optional<std::string>("08001");
    });
    EXPECT_GT(attempts, 6) << "client " << client;
  }
}

// `run -t` against a server that stops for good: after 60 s of failing in a
// row every client gives up, and the run ends failed, "server lost: …",
// exit 1, with what it measured kept. (Before: the clients stopped after six
// attempts, ~3 s, and the run said "complete", "transactions done".)
TEST(Outage, RunWithTransactionCountsEndsServerLostWhenEveryClientGaveUp) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  test::TempDir dir;
  const auto db_path = dir.file("lost.db");
  Spawned run({test::stallscope_bin(), "run", "-o", db_path, server.conninfo(), "-t", "1000000000",
               "-c", "2", "--sql", "SELECT pg_sleep(0.002)"},
              dir);
  ASSERT_TRUE(run.started());
  std::this_thread::sleep_for(2s);
  auto down = server.down();
  ASSERT_EQ(down.exit_status, 0) << down.err;
  const auto status = run.wait(120s);
  ASSERT_TRUE(exited_with(status, 1)) << run.err();
  std::printf("run -t with the server gone at 2 s ended after %.1f s\n", run.elapsed_s());
  EXPECT_NE(run.err().find("stallscope run: server lost: cannot reconnect: "), std::string::npos)
      << run.err();
  SQLite::Database db(db_path);
  const std::string end = db.execAndGet("SELECT status || ':' || end_reason FROM run").getString();
  EXPECT_TRUE(end.starts_with("failed:server lost: cannot reconnect: ")) << end;
  EXPECT_GT(count(db,
                  "SELECT count(*) FROM query q WHERE NOT EXISTS (SELECT 1 FROM query_error "
                  "e WHERE (e.start_ns, e.client_id, e.seq) = (q.start_ns, q.client_id, "
                  "q.seq))"),
            10);
  // Each client kept trying for the 60 s: ~60 attempts, far more than six.
  EXPECT_GE(count(db, "SELECT count(*) FROM query_error WHERE sqlstate = '08001'"), 2 * 30);
}

// Per client: its transactions (query rows other than failed connection
// attempts, SQLSTATE 08001) and its failed connection attempts.
std::vector<std::pair<std::int64_t, std::int64_t>> per_client_counts(SQLite::Database& db,
                                                                     int clients) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (int client = 0; client < clients; ++client) {
    const std::int64_t attempts = count(
        db, fmt::format("SELECT count(*) FROM query_error WHERE client_id = {} AND sqlstate = "
                        "'08001'",
                        client));
    const std::int64_t rows =
        count(db, fmt::format("SELECT count(*) FROM query WHERE client_id = {}", client));
    out.emplace_back(rows - attempts, attempts);
  }
  return out;
}

// The number after `label` in `text`, or -1.
std::int64_t number_after(const std::string& text, const std::string& label) {
  const auto at = text.find(label);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + label.size()));
}

// `run -t N` through a 2 s outage: the failed reconnect attempts (08001
// rows) are not transactions: each client ran exactly N, and the summary
// says N × clients transactions and counts the attempts apart, as many as
// the file holds. (Before: the summary's transaction count included the
// attempts, more than -t asked for.)
TEST(Outage, RunWithTransactionCountsCountsFailedReconnectsApart) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  test::TempDir dir;
  const auto db_path = dir.file("counts.db");
  // At least 5 ms a transaction: 1000 last beyond the outage however fast
  // the machine.
  Spawned run({test::stallscope_bin(), "run", "-o", db_path, server.conninfo(), "-t", "1000", "-c",
               "2", "-P", "1", "--sql", "SELECT pg_sleep(0.005)"},
              dir);
  ASSERT_TRUE(run.started());
  std::this_thread::sleep_for(1s);
  auto down = server.down();
  ASSERT_EQ(down.exit_status, 0) << down.err;
  std::this_thread::sleep_for(2s);
  auto up = server.up();
  ASSERT_EQ(up.exit_status, 0) << up.err;
  const auto status = run.wait(60s);
  ASSERT_TRUE(exited_with(status, 0)) << run.err();
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status || ':' || end_reason FROM run").getString(),
            "complete:transactions done");
  std::int64_t attempts = 0;
  for (const auto& [transactions, client_attempts] : per_client_counts(db, 2)) {
    EXPECT_EQ(transactions, 1000);
    attempts += client_attempts;
  }
  ASSERT_GE(attempts, 2) << "the outage did not reach the clients";
  const std::string out = run.out();
  EXPECT_EQ(number_after(out, "transactions: "), 2000) << out;
  EXPECT_EQ(number_after(out, "reconnect attempts failed: "), attempts) << out;
  EXPECT_NE(run.err().find(" reconnect attempts failed"), std::string::npos) << run.err();
}

// -C through a 2 s outage: each failed connect is stored with SQLSTATE 08001
// (as a failed reconnect attempt), without a connection, and like one is
// not a transaction: each client ran exactly -t. (Before: 08006, and
// counted towards -t, so each client ran fewer than -t.)
TEST(Outage, ConnectPerTransactionStoresFailedConnectsAs08001CountedApart) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  test::TempDir dir;
  const auto db_path = dir.file("connects.db");
  Spawned run({test::stallscope_bin(), "run", "-o", db_path, server.conninfo(), "-C", "-t", "300",
               "-c", "2", "-P", "0", "--sql", "SELECT pg_sleep(0.01)"},
              dir);
  ASSERT_TRUE(run.started());
  std::this_thread::sleep_for(1s);
  auto down = server.down();
  ASSERT_EQ(down.exit_status, 0) << down.err;
  std::this_thread::sleep_for(2s);
  auto up = server.up();
  ASSERT_EQ(up.exit_status, 0) << up.err;
  const auto status = run.wait(60s);
  ASSERT_TRUE(exited_with(status, 0)) << run.err();
  SQLite::Database db(db_path);
  // The rows without a connection are the failed connects: all 08001, each
  // with its message.
  const std::int64_t unconnected = count(db, "SELECT count(*) FROM query WHERE connection IS NULL");
  ASSERT_GE(unconnected, 2) << "the outage did not reach the clients";
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM query q JOIN query_error e USING (start_ns, client_id, "
                  "seq) WHERE q.connection IS NULL AND e.sqlstate = '08001' AND e.error LIKE "
                  "'cannot connect to %'"),
            unconnected);
  EXPECT_EQ(count(db, "SELECT count(*) FROM query_error WHERE sqlstate = '08001'"), unconnected);
  for (const auto& [transactions, attempts] : per_client_counts(db, 2)) {
    EXPECT_EQ(transactions, 300);
  }
  EXPECT_EQ(number_after(run.out(), "transactions: "), 600) << run.out();
  EXPECT_EQ(number_after(run.out(), "connects failed: "), unconnected) << run.out();
  // A failed connect's row runs through the backoff after it, to the next
  // try: each client's rows cover most of its 2 s without a server (before:
  // only the refused connects, a few ms in all), and no two overlap.
  for (int client = 0; client < 2; ++client) {
    EXPECT_GT(count(db, fmt::format("SELECT sum(latency_ns) FROM query WHERE connection IS NULL "
                                    "AND client_id = {}",
                                    client)),
              1'500'000'000)
        << "client " << client;
  }
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM query a JOIN query b ON b.client_id = a.client_id "
                  "AND b.start_ns > a.start_ns AND b.start_ns < a.start_ns + a.latency_ns - "
                  "1000000"),
            0);
}

// -C against a server that stops answering mid-run (SIGSTOP): at -T each
// client has one transaction in progress — a connect that hangs, or a query
// without reply — and each is stored as unfinished, none as a failure: a
// connect cut short by the run's end is not a failed connect. (Before: the
// interrupted connect was a failed transaction, 08006 "interrupted", and a
// query without reply was dropped.)
TEST(Outage, ConnectPerTransactionCutShortByTheEndIsUnfinishedNotAFailure) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  test::TempDir dir;
  const auto db_path = dir.file("frozen-connects.db");
  const int duration_s = 3;
  Spawned run(
      {test::stallscope_bin(), "run", "-o", db_path, server.conninfo(), "-C", "-c", "2", "-j", "2",
       "-T", std::to_string(duration_s), "-P", "0", "--sql", "SELECT pg_sleep(0.002)"},
      dir);
  ASSERT_TRUE(run.started());
  std::this_thread::sleep_for(1500ms);
  server.freeze(true);
  const auto status = run.wait(30s);
  server.freeze(false);
  ASSERT_TRUE(exited_with(status, 0)) << run.err();
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status || ':' || end_reason FROM run").getString(),
            "complete:duration reached");
  EXPECT_GT(count(db, "SELECT count(*) FROM query"), 10);
  EXPECT_EQ(count(db, "SELECT count(*) FROM query_error"), 0);
  ASSERT_EQ(count(db, "SELECT count(*) FROM query_unfinished"), 2);
  EXPECT_EQ(count(db, "SELECT count(DISTINCT client_id) FROM query_unfinished"), 2);
  EXPECT_NE(run.out().find("transactions cut short at the end: 2 "), std::string::npos)
      << run.out();
  const std::int64_t run_start_ns = count(db, "SELECT start_ns FROM run");
  const std::int64_t run_end_ns = count(db, "SELECT end_ns FROM run");
  SQLite::Statement rows(db,
                         "SELECT u.start_ns, u.elapsed_ns, (SELECT max(start_ns + latency_ns) "
                         "FROM query q WHERE q.client_id = u.client_id) FROM query_unfinished u");
  while (rows.executeStep()) {
    const std::int64_t start_ns = rows.getColumn(0).getInt64();
    const std::int64_t given_up_ns = start_ns + rows.getColumn(1).getInt64();
    EXPECT_GE(start_ns, rows.getColumn(2).getInt64());  // after its client's last answer
    // Given up on at -T or later (which starts after the run row's start).
    EXPECT_GE(given_up_ns, run_start_ns + duration_s * common::kNsPerS);
    EXPECT_LE(given_up_ns, run_end_ns);
  }
}

// The ASH sampler of `record` polls again soon after the server came back —
// it retries at least once a second — and the gap is blind time to explain,
// not a time without waits. (Before: its retries doubled up to 5 s apart, so
// after a 7 s outage the next attempt came ~11 s after the loss and few
// polls followed the restart.)
TEST(Outage, RecordAshSamplerPollsAgainAfterARestart) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  test::TempDir dir;
  const auto db_path = dir.file("record.db");
  Spawned record(
      {test::stallscope_bin(), "record", "--pg", server.conninfo(), "-T", "14", "-o", db_path},
      dir);
  ASSERT_TRUE(record.started());
  std::this_thread::sleep_for(2s);
  auto down = server.down();
  ASSERT_EQ(down.exit_status, 0) << down.err;
  std::this_thread::sleep_for(7s);
  auto up = server.up();
  const std::int64_t up_ns = wall_now_ns();
  ASSERT_EQ(up.exit_status, 0) << up.err;
  const auto status = record.wait(60s);
  ASSERT_TRUE(exited_with(status, 0)) << record.err();

  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
  const std::int64_t end_ns = count(db, "SELECT end_ns FROM run");
  const auto first_after = count(
      db, fmt::format("SELECT coalesce(min(time_ns), 0) FROM ash_tick WHERE time_ns > {}", up_ns));
  // From 1.5 s after the restart to the end (about 3 s at 10 Hz): every
  // poll is there when the sampler retried at most 1 s apart.
  const auto late_polls = count(db, fmt::format("SELECT count(*) FROM ash_tick WHERE time_ns > {}",
                                                up_ns + 3 * common::kNsPerS / 2));
  std::printf("first ASH poll %.2f s after the restart; %lld polls in the last %.1f s\n",
              first_after > 0 ? double(first_after - up_ns) / common::kNsPerSDouble : -1.0,
              static_cast<long long>(late_polls),
              double(end_ns - up_ns - 3 * common::kNsPerS / 2) / common::kNsPerSDouble);
  EXPECT_GT(first_after, 0);
  EXPECT_GE(late_polls, 20);
  auto e = test::run_command({test::stallscope_bin(), "explain", db_path, "--json"});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  bool blind_note = false;
  for (const auto& n : j["notes"]) {
    if (n.get<std::string>().find("ASH was blind for") != std::string::npos) blind_note = true;
  }
  EXPECT_TRUE(blind_note) << j["notes"].dump(1);
}

// The server stops answering mid-run (its processes stopped with SIGSTOP):
// SIGINT still ends `run` — the cancel requests are sent from a thread of
// their own, and the samplers' and clock probe's blocked queries are failed
// after a 2 s grace — and `record`. (Before: both waited for the server to
// answer again, however long.)
TEST(Outage, SigintEndsRunAndRecordWhoseServerStoppedAnswering) {
  PrivateServer server;
  ASSERT_FALSE(server.conninfo().empty());
  test::TempDir run_dir, record_dir;
  const auto run_path = run_dir.file("frozen-run.db");
  const auto record_path = record_dir.file("frozen-record.db");
  Spawned run({test::stallscope_bin(), "run", "-o", run_path, server.conninfo(), "-T", "60", "-c",
               "2", "--clock-offset-period", "1", "--sql", "SELECT pg_sleep(0.002)"},
              run_dir);
  Spawned record({test::stallscope_bin(), "record", "--pg", server.conninfo(), "-o", record_path},
                 record_dir);
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(record.started());
  std::this_thread::sleep_for(2s);
  server.freeze(true);
  std::this_thread::sleep_for(2s);
  run.signal(SIGINT);
  record.signal(SIGINT);
  const auto run_status = run.wait(20s);
  const auto record_status = record.wait(20s);
  server.freeze(false);
  ASSERT_TRUE(exited_with(run_status, 0)) << "run still waiting on the server: " << run.err();
  ASSERT_TRUE(exited_with(record_status, 0)) << "record still waiting: " << record.err();
  std::printf("after SIGINT against a stopped server: run ended in %.1f s (record by then)\n",
              run.elapsed_s() - 4);
  SQLite::Database run_db(run_path);
  EXPECT_EQ(run_db.execAndGet("SELECT status || ':' || end_reason FROM run").getString(),
            "interrupted:SIGINT");
  EXPECT_GT(count(run_db, "SELECT count(*) FROM query"), 10);
  SQLite::Database record_db(record_path);
  EXPECT_EQ(record_db.execAndGet("SELECT end_reason FROM run").getString(), "SIGINT");
}

// A server that accepts and never answers: `run` fails after the default
// connect_timeout (10 s) with one line naming the masked conninfo, and
// leaves no file. (Before: it hung in connect for about a minute.)
TEST(Outage, RunAgainstAHungServerFailsAfterTheConnectTimeout) {
  HungServer hung;
  test::TempDir dir;
  const auto db_path = dir.file("hung.db");
  ::unsetenv("PGCONNECT_TIMEOUT");
  Spawned run({test::stallscope_bin(), "run", "-o", db_path, hung.conninfo(), "-T", "2", "--sql",
               "SELECT 1"},
              dir);
  ASSERT_TRUE(run.started());
  const auto status = run.wait(40s);
  ASSERT_TRUE(exited_with(status, 1)) << run.err();
  std::printf("run against a hung server failed after %.1f s\n", run.elapsed_s());
  const std::string err = run.err();
  EXPECT_NE(err.find("cannot connect to '"), std::string::npos) << err;
  EXPECT_NE(err.find("host=127.0.0.1"), std::string::npos) << err;
  EXPECT_NE(err.find("password=***"), std::string::npos) << err;
  EXPECT_NE(err.find("timeout expired after 10 s (connect_timeout)"), std::string::npos) << err;
  EXPECT_EQ(err.find("S3cret"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(std::filesystem::exists(db_path));
}

// SIGINT while `run` connects to that server ends it at once: exit 1, one
// line saying the connect was interrupted, no file (nothing was measured).
// (Before: SIGINT was not handled until the run had connected.)
TEST(Outage, SigintEndsARunThatIsConnecting) {
  HungServer hung;
  test::TempDir dir;
  const auto db_path = dir.file("hung.db");
  Spawned run({test::stallscope_bin(), "run", "-o", db_path, hung.conninfo(), "-T", "2", "--sql",
               "SELECT 1"},
              dir);
  ASSERT_TRUE(run.started());
  std::this_thread::sleep_for(1s);
  run.signal(SIGINT);
  // Well before the 10 s connect timeout.
  const auto status = run.wait(6s);
  ASSERT_TRUE(exited_with(status, 1)) << "still running or killed by the signal: " << run.err();
  std::printf("run ended %.2f s after its start (SIGINT at 1 s)\n", run.elapsed_s());
  EXPECT_NE(run.err().find("interrupted"), std::string::npos) << run.err();
  EXPECT_FALSE(std::filesystem::exists(db_path));
}

// `record --pg HUNG -T 2` ends at its duration: the host samples are stored,
// and the run says the ASH sampler never connected. (Before: it ignored -T
// and SIGINT while connecting.)
TEST(Outage, RecordEndsAtItsDurationAgainstAHungServer) {
  HungServer hung;
  test::TempDir dir;
  const auto db_path = dir.file("hung-record.db");
  Spawned record(
      {test::stallscope_bin(), "record", "--pg", hung.conninfo(), "-T", "2", "-o", db_path}, dir);
  ASSERT_TRUE(record.started());
  const auto status = record.wait(8s);
  ASSERT_TRUE(exited_with(status, 0)) << "still running, or failed: " << record.err();
  std::printf("record -T 2 against a hung server took %.2f s\n", record.elapsed_s());
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
  const std::string reason = db.execAndGet("SELECT end_reason FROM run").getString();
  EXPECT_NE(reason.find("duration reached"), std::string::npos) << reason;
  EXPECT_NE(reason.find("the ASH sampler never connected"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("S3cret"), std::string::npos) << reason;
  EXPECT_GT(count(db, "SELECT count(*) FROM host_sample"), 10);
  EXPECT_EQ(count(db, "SELECT count(*) FROM ash_tick"), 0);
}

}  // namespace
}  // namespace stallscope
