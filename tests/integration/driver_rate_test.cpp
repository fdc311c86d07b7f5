// The driver's fixed rate (-R, -L, --skip-late), connection per transaction
// (-C) and survival of a server restart, against real PostgreSQL 15.
#include <sys/prctl.h>
#include <sys/stat.h>

#include <pwd.h>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "driver/driver.h"
#include "support/test_support.h"

namespace stallscope::driver {
namespace {

using test::Collected;

DriverOptions options(std::string sql) {
  DriverOptions o;
  o.conninfo = test::scratch_conninfo();
  o.sql = std::move(sql);
  return o;
}

// 500 tps asked of one client whose every query takes ≥ 10 ms (≤ 100 tps):
// the schedule falls further behind with every transaction, and the latency
// counts from the scheduled start, so it includes the lag.
TEST(DriverRate, OverloadGrowsTheLagAndLatencyIncludesIt) {
  auto o = options("SELECT pg_sleep(0.01)");
  o.rate_tps = 500;
  o.duration_s = 3;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  auto q = got.queries();
  ASSERT_GT(q.size(), 20u);
  for (const auto& r : q) {
    ASSERT_TRUE(r.lag_ns.has_value()) << "seq " << r.seq;
    EXPECT_FALSE(r.skipped);
    EXPECT_FALSE(r.sqlstate.has_value()) << r.error.value_or("");
    // latency = lag + the query itself (≥ 10 ms of pg_sleep)
    EXPECT_GE(r.latency_ns, *r.lag_ns + 10'000'000) << "seq " << r.seq;
  }
  // The lag grows: each transaction waits for all before it. Over the run the
  // driver fell behind by (3 s of schedule) − (time served): ≥ 1 s at the end.
  std::int64_t increases = 0;
  for (std::size_t i = 1; i < q.size(); ++i) increases += *q[i].lag_ns > *q[i - 1].lag_ns;
  EXPECT_GE(increases, static_cast<std::int64_t>(q.size()) * 9 / 10);
  EXPECT_GT(*q.back().lag_ns, 1'000'000'000);
  EXPECT_LT(*q.front().lag_ns, *q.back().lag_ns / 10);
  auto s = d.summary();
  ASSERT_TRUE(s.mean_lag_ms.has_value());
  EXPECT_GT(*s.max_lag_ms, 1000.0);
  EXPECT_EQ(s.skipped, 0);
}

// --skip-late: the same overload with -L 50 ms; transactions that are already
// 50 ms late when their client is free are recorded as skipped, not sent, so
// the ones sent never start more than ~50 ms behind.
TEST(DriverRate, SkipLateSkipsAndRecordsThem) {
  auto o = options("SELECT pg_sleep(0.01)");
  o.rate_tps = 500;
  o.latency_limit_ms = 50;
  o.skip_late = true;
  o.duration_s = 2;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  auto q = got.queries();
  std::int64_t skipped = 0, sent = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    EXPECT_EQ(q[i].seq, static_cast<std::int64_t>(i));
    ASSERT_TRUE(q[i].lag_ns.has_value());
    if (q[i].skipped) {
      ++skipped;
      EXPECT_GT(*q[i].lag_ns, 50'000'000);
      EXPECT_FALSE(q[i].rows.has_value());
      EXPECT_FALSE(q[i].connection.has_value());
    } else {
      ++sent;
      EXPECT_EQ(q[i].rows, 1);
      EXPECT_LE(*q[i].lag_ns, 50'000'000 + 5'000'000) << "seq " << q[i].seq;
    }
  }
  EXPECT_GT(sent, 20);
  EXPECT_GT(skipped, sent) << "≥ 4 of every 5 scheduled cannot be served";
  auto s = d.summary();
  EXPECT_EQ(s.skipped, skipped);
  EXPECT_EQ(s.queries, sent);
  EXPECT_GT(s.late, 0) << "lag up to 50 ms + a 10 ms query exceeds -L 50 sometimes";
}

TEST(DriverRate, SkipLateWithoutRateAndLimitIsAUsageError) {
  auto o = options("SELECT 1");
  o.queries_per_client = 1;
  o.skip_late = true;
  o.rate_tps = 10;
  Driver d(o, [](schema::Batch) {});
  EXPECT_THROW(d.connect(), Error);
}

// -C: every transaction gets its own backend; each is a client row and the
// query row names it.
// -R: the driver threads wake at their scheduled times with a timer slack
// of 1 µs, not the kernel's default 50 µs (which would add to every
// schedule lag); a closed-loop run leaves the slack as it was. Read from
// /proc/TID/timerslack_ns of the thread named ss-driver/0 while
// the run goes on. (How precisely the rate is kept is measured, not
// asserted: tools/bench rate.)
std::string first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<std::int64_t> driver_thread_timer_slack_ns(const Driver& d) {
  namespace fs = std::filesystem;
  for (int attempt = 0; attempt < 200 && d.summary().queries < 1'000'000; ++attempt) {
    for (const auto& task : fs::directory_iterator("/proc/self/task")) {
      if (first_line(task.path() / "comm") != "ss-driver/0") continue;
      // Only /proc/TID has it, not /proc/self/task/TID.
      return std::stoll(first_line(fs::path("/proc") / task.path().filename() / "timerslack_ns"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

TEST(DriverRate, FixedRateThreadsWakeWithAOneMicrosecondTimerSlack) {
  const auto inherited_slack_ns = static_cast<std::int64_t>(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0));
  ASSERT_NE(inherited_slack_ns, 1'000);
  for (const bool fixed_rate : {true, false}) {
    auto o = options("SELECT 1");
    if (fixed_rate) o.rate_tps = 200;
    o.duration_s = 1;
    Collected got;
    Driver d(o, got.sink());
    d.connect();
    std::jthread runner([&d] { d.run(); });
    const auto slack_ns = driver_thread_timer_slack_ns(d);
    runner.join();
    ASSERT_TRUE(slack_ns.has_value()) << "no thread named ss-driver/0 while the run went on";
    if (fixed_rate) {
      EXPECT_EQ(*slack_ns, 1'000);
    } else {
      EXPECT_EQ(*slack_ns, inherited_slack_ns) << "closed loop: the slack unchanged";
    }
  }
}

TEST(DriverConnect, ConnectPerTransactionUsesANewBackendEachTime) {
  auto o = options("SELECT pg_backend_pid()");
  o.clients = 2;
  o.queries_per_client = 5;
  o.connect_per_transaction = true;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  d.run();
  auto clients = got.clients();
  // Client 0's check connection + 5 per client.
  ASSERT_EQ(clients.size(), 11u);
  std::set<int> pids;
  for (const auto& c : clients) {
    ASSERT_TRUE(c.backend_pid.has_value());
    pids.insert(*c.backend_pid);
    EXPECT_EQ(c.application_name, fmt::format("stallscope/{}", c.client_id));
  }
  EXPECT_EQ(pids.size(), 11u) << "every connection is a new backend";
  for (int client = 0; client < 2; ++client) {
    auto q = got.queries(client);
    ASSERT_EQ(q.size(), 5u);
    std::set<int> used;
    for (const auto& r : q) {
      EXPECT_FALSE(r.sqlstate.has_value()) << r.error.value_or("");
      ASSERT_TRUE(got.backend_pid(r).has_value());
      used.insert(*got.backend_pid(r));
      auto row = std::find_if(clients.begin(), clients.end(), [&](const auto& c) {
        return c.client_id == client && c.connection == r.connection;
      });
      ASSERT_NE(row, clients.end());
      EXPECT_GE(row->connection, 1);
      // The connect time is part of the transaction's latency.
      EXPECT_GE(r.latency_ns, *row->connect_latency_ns);
    }
    EXPECT_EQ(used.size(), 5u);
  }
  EXPECT_EQ(d.summary().connections, 11);
}

// A scratch server of the test's own, restarted (pg_ctl restart -m fast)
// mid-run: the run finishes, the failures carry a SQLSTATE and message, and
// every client succeeds again afterwards on a new backend.
// A scratch server of the test's own (tools/scratch-postgres), which it can
// restart with pg_ctl as the cluster's owner; stopped at the end.
class OwnServer {
 public:
  OwnServer() {
    const std::string tools = std::string(STALLSCOPE_SOURCE_DIR_DEFAULT) + "/tools";
    tool_ = tools + "/scratch-postgres";
    auto started = test::run_command({tool_, "start"});
    if (started.exit_status != 0) {
      ADD_FAILURE() << started.err;
      return;
    }
    conninfo_ = started.out;
    while (!conninfo_.empty() && conninfo_.back() == '\n') conninfo_.pop_back();
    // scratch-postgres names its own dir as the socket directory: host=DIR.
    auto host_at = conninfo_.find("host=");
    pgdir_ = conninfo_.substr(host_at + 5, conninfo_.find(' ', host_at) - host_at - 5);
    struct stat st {};
    if (::stat((pgdir_ + "/data").c_str(), &st) == 0) {
      if (const passwd* owner = getpwuid(st.st_uid)) owner_ = owner->pw_name;
    }
    for (int v : {15, 16, 17}) {
      auto p = fmt::format("/usr/lib/postgresql/{}/bin/pg_ctl", v);
      if (std::filesystem::exists(p)) {
        pg_ctl_ = p;
        break;
      }
    }
  }
  ~OwnServer() {
    if (!conninfo_.empty()) test::run_command({tool_, "stop", conninfo_});
  }
  OwnServer(const OwnServer&) = delete;
  OwnServer& operator=(const OwnServer&) = delete;
  bool ok() const { return !conninfo_.empty() && !owner_.empty() && !pg_ctl_.empty(); }
  const std::string& conninfo() const { return conninfo_; }
  // pg_ctl restart -m fast -w, as the cluster's owner.
  test::CommandResult restart() const {
    // -l: the new postmaster must not inherit this process's stdout pipe.
    std::vector<std::string> argv{
        pg_ctl_, "-D", pgdir_ + "/data", "-l", pgdir_ + "/server.log", "-m",
        "fast",  "-w", "restart"};
    if (::geteuid() == 0) argv.insert(argv.begin(), {"runuser", "-u", owner_, "--"});
    return test::run_command(argv);
  }

 private:
  std::string tool_, conninfo_, pgdir_, owner_, pg_ctl_;
};

TEST(DriverRestart, ServerRestartMidRunIsRecordedAndTheRunGoesOn) {
  OwnServer server;
  ASSERT_TRUE(server.ok());
  const std::string conninfo = server.conninfo();

  DriverOptions o;
  o.conninfo = conninfo;
  o.clients = 2;
  o.sql = "SELECT pg_sleep(0.005)";
  o.duration_s = 5;
  Collected got;
  Driver d(o, got.sink());
  d.connect();
  test::CommandResult restarted;
  std::jthread restarter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    restarted = server.restart();
  });
  d.run();
  restarter.join();
  ASSERT_EQ(restarted.exit_status, 0) << restarted.err << restarted.out;

  for (int client = 0; client < 2; ++client) {
    auto q = got.queries(client);
    auto failed = std::find_if(q.begin(), q.end(), [](auto& r) { return r.sqlstate.has_value(); });
    ASSERT_NE(failed, q.end()) << "client " << client << " saw no failure";
    EXPECT_TRUE(failed->error.has_value() && !failed->error->empty());
    EXPECT_EQ(failed->sqlstate->size(), 5u) << *failed->sqlstate;
    auto last_failed =
        std::find_if(q.rbegin(), q.rend(), [](auto& r) { return r.sqlstate.has_value(); });
    auto ok_after =
        std::count_if(last_failed.base(), q.end(), [](auto& r) { return !r.sqlstate.has_value(); });
    EXPECT_GT(ok_after, 10) << "client " << client << " did not recover";
    ASSERT_TRUE(got.backend_pid(q.back()).has_value());
    EXPECT_NE(got.backend_pid(q.back()), got.backend_pid(q.front()));
  }
  // Both clients reconnected: a second connection row each.
  auto clients = got.clients();
  for (int client = 0; client < 2; ++client) {
    EXPECT_TRUE(std::any_of(clients.begin(), clients.end(),
                            [&](auto& c) { return c.client_id == client && c.connection >= 1; }));
  }
}

// `run` across a server restart: the clock-offset connection is opened
// again, so estimates continue after the restart (periodic every 0.5 s here).
TEST(DriverRestart, ClockOffsetEstimatesResumeAfterAServerRestart) {
  OwnServer server;
  ASSERT_TRUE(server.ok());
  test::TempDir dir;
  test::CommandResult restarted;
  std::int64_t restarted_ns = 0;
  std::jthread restarter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    restarted = server.restart();
    restarted_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  });
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", dir.file("c.db"),
                              server.conninfo(), "-c", "2", "-T", "5", "-P", "0", "--sql",
                              "SELECT pg_sleep(0.005)", "--clock-offset-period", "0.5"});
  restarter.join();
  ASSERT_EQ(restarted.exit_status, 0) << restarted.err << restarted.out;
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.err.find("clock-offset estimates resumed"), std::string::npos) << r.err;
  SQLite::Database db(dir.file("c.db"));
  SQLite::Statement after(db, "SELECT count(*) FROM clock_offset WHERE time_ns > ?1");
  after.bind(1, static_cast<int64_t>(restarted_ns));
  ASSERT_TRUE(after.executeStep());
  EXPECT_GE(after.getColumn(0).getInt64(), 2) << "periodic and end estimates after the restart";
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM clock_offset WHERE phase = 'end'").getInt64(), 1);
}

}  // namespace
}  // namespace stallscope::driver
