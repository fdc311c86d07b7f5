// --pooler-admin: the pooler sampler against a real pgbouncer
// (tools/scratch-pgbouncer in front of the fixture's server), the
// pooler_sample rows it stores, and explain's path_wait part and pool_wait
// finding.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "sampler/pooler.h"
#include "support/test_support.h"

namespace stallscope {
namespace {

std::string script(const std::string& name) {
  const char* dir = std::getenv("STALLSCOPE_SOURCE_DIR");
  return std::string(dir ? dir : STALLSCOPE_SOURCE_DIR_DEFAULT) + "/tools/" + name;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// A scratch pgbouncer (transaction pooling, `pool_size` server connections)
// in front of the fixture's server; stopped on destruction.
class ScratchPgbouncer {
 public:
  explicit ScratchPgbouncer(int pool_size) {
    auto server = test::scratch_conninfo();
    auto r = test::run_command({script("scratch-pgbouncer"), "start", "--pool-mode", "transaction",
                                "--pool-size", std::to_string(pool_size), server});
    EXPECT_EQ(r.exit_status, 0) << r.err;
    conninfo_ = first_line(r.out);
    auto a = test::run_command({script("scratch-pgbouncer"), "admin", conninfo_});
    EXPECT_EQ(a.exit_status, 0) << a.err;
    admin_ = first_line(a.out);
    // stderr names the same admin conninfo.
    EXPECT_NE(r.err.find("pgbouncer_admin=" + admin_), std::string::npos) << r.err;
  }
  ~ScratchPgbouncer() { stop(); }
  ScratchPgbouncer(const ScratchPgbouncer&) = delete;
  ScratchPgbouncer& operator=(const ScratchPgbouncer&) = delete;
  void stop() {
    if (conninfo_.empty()) return;
    test::run_command({script("scratch-pgbouncer"), "stop", conninfo_});
    conninfo_.clear();
  }
  const std::string& conninfo() const { return conninfo_; }  // clients: dbname=postgres
  const std::string& admin() const { return admin_; }        // dbname=pgbouncer

 private:
  std::string conninfo_, admin_;
};

std::int64_t count(SQLite::Database& db, const std::string& sql) {
  return db.execAndGet(sql).getInt64();
}

const nlohmann::json* part(const nlohmann::json& accounting, const std::string& name) {
  for (const auto& p : accounting["parts"]) {
    if (p["part"] == name) return &p;
  }
  return nullptr;
}

const nlohmann::json* finding(const nlohmann::json& report, const std::string& kind) {
  for (const auto& f : report["findings"]) {
    if (f["kind"] == kind) return &f;
  }
  return nullptr;
}

TEST(PoolerSampler, StoresShowStatsDeltasAndShowPoolsGaugesPerDatabase) {
  ScratchPgbouncer pb(2);
  ASSERT_FALSE(pb.admin().empty());
  // A first client creates the "postgres" pool, so the first poll lists it.
  test::psql(pb.conninfo(), "SELECT 1");
  std::mutex mu;
  std::vector<schema::PoolerSampleRow> rows;
  sampler::PoolerSampler s({.conninfo = pb.admin(), .period_s = 0.2}, [&](schema::Batch b) {
    std::lock_guard lock(mu);
    rows.insert(rows.end(), b.pooler_samples.begin(), b.pooler_samples.end());
  });
  s.start();
  for (int i = 0; i < 5; ++i) test::psql(pb.conninfo(), "SELECT 1");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  s.stop();  // polls once more
  std::lock_guard lock(mu);
  ASSERT_GE(rows.size(), 3u);
  // The admin pseudo-database is left out; the first poll has no deltas.
  for (const auto& r : rows) EXPECT_EQ(r.database, "postgres");
  EXPECT_FALSE(rows.front().interval_ns);
  EXPECT_FALSE(rows.front().xacts);
  EXPECT_FALSE(rows.front().wait_ns);
  EXPECT_TRUE(rows.front().cl_active);
  std::int64_t xacts = 0, queries = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    ASSERT_TRUE(rows[i].interval_ns && rows[i].xacts && rows[i].wait_ns && rows[i].xact_ns);
    EXPECT_GT(*rows[i].interval_ns, 0);
    xacts += *rows[i].xacts;
    queries += *rows[i].queries;
    // The pool has 2 server connections: never more in use.
    EXPECT_LE(rows[i].sv_active.value_or(0), 2);
  }
  // Exactly the five SELECTs sent after the first poll.
  EXPECT_EQ(xacts, 5);
  EXPECT_EQ(queries, 5);
  EXPECT_EQ(s.latest().poll_errors, 0);
}

TEST(PoolerSampler, NotAnAdminConsoleIsAnErrorNamingTheConninfo) {
  // A PostgreSQL server has no SHOW STATS.
  sampler::PoolerSampler s({.conninfo = test::scratch_conninfo() + " password=s3cret"}, {});
  try {
    s.start();
    FAIL() << "start() accepted a PostgreSQL server as pgbouncer's admin console";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("SHOW STATS"), std::string::npos) << what;
    EXPECT_NE(what.find("password=***"), std::string::npos) << what;
    EXPECT_EQ(what.find("s3cret"), std::string::npos) << what;
  }
}

// 8 clients through a pool of `pool_size`, each query 5 ms of server sleep
// (the host stays idle, so only the pool limits concurrency).
nlohmann::json run_through_pool(const test::TempDir& dir, int pool_size, std::string* text) {
  ScratchPgbouncer pb(pool_size);
  auto db_path = dir.file("pool.db");
  auto r = test::run_command({test::stallscope_bin(), "run", "-o", db_path, pb.conninfo(),
                              "--pooler-admin", pb.admin(), "-c", "8", "-j", "2", "-T", "3",
                              "--sql", "SELECT pg_sleep(0.005)", "-P", "0"});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  // A poll a second over 3 s, plus the first and the last.
  EXPECT_GE(count(db, "SELECT count(*) FROM pooler_sample WHERE database = 'postgres'"), 4);
  EXPECT_EQ(count(db, "SELECT count(*) FROM pooler_sample WHERE database = 'pgbouncer'"), 0);
  EXPECT_LE(count(db, "SELECT max(sv_active) FROM pooler_sample"), pool_size);
  // pgbouncer counted the driver's transactions, less at most one in flight
  // per client at the edges, plus the driver's own few (connection set-up,
  // the clock-offset probes: a few dozen at most).
  const auto queries = count(db, "SELECT count(*) FROM query");
  const auto pooled = count(db, "SELECT sum(xacts) FROM pooler_sample");
  EXPECT_GE(pooled, queries - 8);
  EXPECT_LE(pooled, queries + 100);
  auto e = test::run_command({test::stallscope_bin(), "explain", db_path, "--json"});
  EXPECT_EQ(e.exit_status, 0) << e.err;
  auto t = test::run_command({test::stallscope_bin(), "explain", db_path});
  if (text) *text = t.out;
  return nlohmann::json::parse(e.out);
}

TEST(PoolerRun, ThroughAPoolSmallerThanTheClientsQueriesWaitInPgbouncer) {
  test::TempDir dir;
  std::string text;
  auto j = run_through_pool(dir, 2, &text);
  ASSERT_TRUE(j["accounting"].is_object()) << j.dump();
  const auto* p = part(j["accounting"], "path_wait:pgbouncer");
  ASSERT_NE(p, nullptr) << j["accounting"].dump();
  // 6 of 8 clients queue for the 2 server connections while the backends
  // sleep: most of the client time is the wait.
  EXPECT_GT((*p)["time_ns"].get<std::int64_t>(), 0);
  EXPECT_GT((*p)["query_time_share"].get<double>(), 0.5) << j["accounting"].dump();
  EXPECT_LE((*p)["query_time_share"].get<double>(), 1.0);
  EXPECT_EQ(j["accounting"]["path_wait_ns"], (*p)["time_ns"]);
  // Per window too.
  std::int64_t windows_with_wait = 0;
  for (const auto& w : j["windows"]) {
    if (!w["accounting"].is_object()) continue;
    if (const auto* wp = part(w["accounting"], "path_wait:pgbouncer");
        wp && (*wp)["time_ns"].get<std::int64_t>() > 0) {
      ++windows_with_wait;
    }
  }
  EXPECT_GE(windows_with_wait, 2);
  // The finding names the pooler, the queue and the pool size advice, and
  // ranks first: nothing else holds the clients.
  const auto* f = finding(j, "pool_wait");
  ASSERT_NE(f, nullptr) << j["findings"].dump();
  EXPECT_EQ(j["findings"][0]["kind"], "pool_wait") << j["findings"].dump();
  EXPECT_NE((*f)["summary"].get<std::string>().find("in pgbouncer"), std::string::npos);
  EXPECT_NE((*f)["suggestion"].get<std::string>().find("default_pool_size"), std::string::npos);
  EXPECT_GE((*f)["evidence"]["cl_waiting_max"].get<std::int64_t>(), 1);
  EXPECT_LE((*f)["evidence"]["sv_active_max"].get<std::int64_t>(), 2);
  EXPECT_EQ((*f)["evidence"]["databases"], "postgres");
  // The text report has the line.
  EXPECT_NE(text.find("path wait pgbouncer"), std::string::npos) << text;
  EXPECT_NE(text.find("pool_wait"), std::string::npos) << text;
}

TEST(PoolerRun, WithAPoolAsLargeAsTheClientsThereIsNoPoolWait) {
  test::TempDir dir;
  auto j = run_through_pool(dir, 8, nullptr);
  ASSERT_TRUE(j["accounting"].is_object()) << j.dump();
  const auto* p = part(j["accounting"], "path_wait:pgbouncer");
  ASSERT_NE(p, nullptr) << j["accounting"].dump();
  EXPECT_LT((*p)["query_time_share"].get<double>(), 0.05) << j["accounting"].dump();
  EXPECT_EQ(finding(j, "pool_wait"), nullptr) << j["findings"].dump();
}

TEST(PoolerRun, AnUnreachableAdminConsoleIsAOneLineErrorAndNoFile) {
  const std::string bad = "host=127.0.0.1 port=1 user=postgres dbname=pgbouncer password=s3cret";
  test::TempDir dir;
  auto run_path = dir.file("run.db");
  auto r =
      test::run_command({test::stallscope_bin(), "run", "-o", run_path, test::scratch_conninfo(),
                         "--pooler-admin", bad, "-T", "1", "--sql", "SELECT 1", "-P", "0"});
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("port=1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("password=***"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("s3cret"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(run_path));

  auto rec_path = dir.file("rec.db");
  auto c = test::run_command(
      {test::stallscope_bin(), "record", "-o", rec_path, "--pooler-admin", bad, "-T", "1"});
  EXPECT_EQ(c.exit_status, 1) << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
  EXPECT_NE(c.err.find("password=***"), std::string::npos) << c.err;
  EXPECT_FALSE(std::filesystem::exists(rec_path));
}

TEST(PoolerRecord, ALostAdminConnectionIsAWarningAndTheRecordGoesOn) {
  ScratchPgbouncer pb(2);
  test::psql(pb.conninfo(), "SELECT 1");
  test::TempDir dir;
  auto db_path = dir.file("rec.db");
  test::CommandResult r;
  std::thread rec([&] {
    r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pooler-admin",
                           pb.admin(), "--pooler-period", "0.2", "-T", "3"});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  pb.stop();
  rec.join();
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: pooler sampler lost its connection"), std::string::npos) << r.err;
  SQLite::Database db(db_path);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
  // Polls before pgbouncer went away were kept.
  EXPECT_GE(count(db, "SELECT count(*) FROM pooler_sample"), 3);
}

}  // namespace
}  // namespace stallscope
