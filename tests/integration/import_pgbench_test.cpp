// `stallscope import-pgbench` on logs written by the real pgbench.
#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "support/test_support.h"

namespace stallscope {
namespace {

// The log files pgbench wrote with --log-prefix=prefix (prefix.PID[.N]).
std::vector<std::string> logs_with_prefix(const std::filesystem::path& dir,
                                          const std::string& stem) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(stem + ".", 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<std::string>> read_fields(const std::vector<std::string>& files) {
  std::vector<std::vector<std::string>> lines;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ss(line);
      std::vector<std::string> fields;
      std::string w;
      while (ss >> w) fields.push_back(w);
      if (!fields.empty()) lines.push_back(fields);
    }
  }
  return lines;
}

class ImportPgbench : public ::testing::Test {
 protected:
  void SetUp() override {
    conninfo_ = test::scratch_conninfo();
    ASSERT_FALSE(conninfo_.empty());
    std::ofstream(dir_.file("one.sql")) << "SELECT 1;\n";
  }
  void pgbench(std::vector<std::string> extra, const std::string& stem) {
    std::vector<std::string> argv{"pgbench", "-n",
                                  "-f",      dir_.file("one.sql"),
                                  "-c",      "2",
                                  "-j",      "2",
                                  "-l",      "--log-prefix=" + dir_.file(stem)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(conninfo_);
    auto r = test::run_command(argv);
    ASSERT_EQ(r.exit_status, 0) << r.err;
  }
  std::string conninfo_;
  test::TempDir dir_;
};

TEST_F(ImportPgbench, PerTransactionLogGivesTheSameCountAndLatencySum) {
  pgbench({"-T", "1", "-R", "300"}, "tx");
  auto files = logs_with_prefix(dir_.path(), "tx");
  ASSERT_EQ(files.size(), 2u) << "one log per pgbench thread";
  auto lines = read_fields(files);
  ASSERT_GT(lines.size(), 50u);
  std::int64_t latency_us = 0, lag_us = 0;
  for (const auto& l : lines) {
    ASSERT_EQ(l.size(), 7u) << "with -R a schedule_lag column";
    latency_us += std::stoll(l[2]);
    lag_us += std::stoll(l[6]);
  }
  std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o", dir_.file("tx.db")};
  argv.insert(argv.end(), files.begin(), files.end());
  auto r = test::run_command(argv);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir_.file("tx.db"));
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query").getInt64(),
            static_cast<std::int64_t>(lines.size()));
  EXPECT_EQ(db.execAndGet("SELECT sum(latency_ns) FROM query").getInt64(), latency_us * 1000);
  EXPECT_EQ(db.execAndGet("SELECT sum(lag_ns) FROM query").getInt64(), lag_us * 1000);
  EXPECT_EQ(db.execAndGet("SELECT count(DISTINCT client_id) FROM query").getInt64(), 2);
  EXPECT_EQ(db.execAndGet("SELECT mode FROM run").getString(), "import-pgbench");
  EXPECT_EQ(r.out.find("sampled"), std::string::npos) << r.out;
  // explain works on it.
  auto ex = test::run_command({test::stallscope_bin(), "explain", dir_.file("tx.db")});
  EXPECT_EQ(ex.exit_status, 0) << ex.err;
}

// pgbench's own "skipped" (-R -L) and "failed" lines, appended to a real -R
// log in its format: the skipped one goes to query_skipped (not sent, so not
// in query) with its lag, the failed one to query with its query_error row.
TEST_F(ImportPgbench, SkippedAndFailedLinesLandInTheirTables) {
  pgbench({"-t", "10", "-R", "500"}, "sf");
  auto files = logs_with_prefix(dir_.path(), "sf");
  ASSERT_FALSE(files.empty());
  const auto sent = static_cast<std::int64_t>(read_fields(files).size());
  std::ofstream(files[0], std::ios::app) << "0 10 skipped 0 1700000000 500000 12000\n"
                                         << "1 10 failed 0 1700000001 250000 300\n";
  std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o", dir_.file("sf.db")};
  argv.insert(argv.end(), files.begin(), files.end());
  auto r = test::run_command(argv);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("imported: {} transactions (1 failed, 1 skipped)", sent + 2)),
            std::string::npos)
      << r.out;
  SQLite::Database db(dir_.file("sf.db"));
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query").getInt64(), sent + 1);
  EXPECT_EQ(db.execAndGet("SELECT group_concat(start_ns || ':' || client_id || ':' || seq || ':' "
                          "|| lag_ns) FROM query_skipped")
                .getString(),
            "1700000000488000000:0:10:12000000");
  EXPECT_EQ(db.execAndGet("SELECT group_concat(q.start_ns || ':' || q.latency_ns || ':' || "
                          "q.lag_ns || ':' || e.sqlstate) FROM query q JOIN query_error e USING "
                          "(start_ns, client_id, seq)")
                .getString(),
            "1700000001250000000:0:300000:XX000");
}

// --sampling-rate logs about that share of the transactions; the gaps in
// each client's transaction numbers give it away, and the import says so
// (and keeps it in run.end_reason, which explain prints).
TEST_F(ImportPgbench, SampledLogIsNamedAsSuch) {
  pgbench({"-t", "400", "--sampling-rate=0.25"}, "samp");
  auto files = logs_with_prefix(dir_.path(), "samp");
  ASSERT_FALSE(files.empty());
  const auto logged = read_fields(files).size();
  ASSERT_GT(logged, 50u);
  ASSERT_LT(logged, 400u);
  std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o",
                                dir_.file("samp.db")};
  argv.insert(argv.end(), files.begin(), files.end());
  auto r = test::run_command(argv);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("note: sampled log: {} of ", logged)), std::string::npos)
      << r.out;
  SQLite::Database db(dir_.file("samp.db"));
  EXPECT_NE(db.execAndGet("SELECT end_reason FROM run").getString().find("sampled log"),
            std::string::npos);
}

TEST_F(ImportPgbench, AggregateLogGivesTheSameCountAndLatencySum) {
  pgbench({"-T", "2", "--aggregate-interval=1"}, "agg");
  auto files = logs_with_prefix(dir_.path(), "agg");
  ASSERT_FALSE(files.empty());
  auto lines = read_fields(files);
  ASSERT_FALSE(lines.empty());
  std::int64_t n = 0, sum_us = 0;
  for (const auto& l : lines) {
    ASSERT_EQ(l.size(), 15u) << "PostgreSQL 15–17 aggregate line";
    n += std::stoll(l[1]);
    sum_us += std::stoll(l[2]);
  }
  std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o",
                                dir_.file("agg.db")};
  argv.insert(argv.end(), files.begin(), files.end());
  auto r = test::run_command(argv);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(dir_.file("agg.db"));
  EXPECT_EQ(db.execAndGet("SELECT sum(transactions) FROM pgbench_aggregate").getInt64(), n);
  EXPECT_EQ(db.execAndGet("SELECT sum(latency_sum_ns) FROM pgbench_aggregate").getInt64(),
            sum_us * 1000);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM pgbench_aggregate").getInt64(),
            static_cast<std::int64_t>(lines.size()));
  // explain reads the intervals: the same transaction count, and a run that
  // spans them (not 0 s).
  auto ex = test::run_command({test::stallscope_bin(), "explain", "--json", dir_.file("agg.db")});
  ASSERT_EQ(ex.exit_status, 0) << ex.err;
  const auto j = nlohmann::json::parse(ex.out);
  EXPECT_EQ(j["run"]["pgbench_aggregate"]["transactions"].get<std::int64_t>(), n);
  EXPECT_EQ(j["run"]["pgbench_aggregate"]["interval_ns"].get<std::int64_t>(), 1'000'000'000);
  EXPECT_GE(j["run"]["duration_ns"].get<std::int64_t>(), 2'000'000'000);
  EXPECT_NEAR(j["run"]["pgbench_aggregate"]["latency_mean_ms"].get<double>(),
              double(sum_us) / double(n) / 1000.0, 1e-9);
}

TEST_F(ImportPgbench, MalformedLineIsAOneLineErrorAndNoFileIsLeft) {
  pgbench({"-t", "20"}, "bad");
  auto files = logs_with_prefix(dir_.path(), "bad");
  ASSERT_FALSE(files.empty());
  auto lines = read_fields({files[0]});
  std::ofstream(files[0], std::ios::app) << "0 21 oops 0 1700000000 5\n";
  auto r = test::run_command(
      {test::stallscope_bin(), "import-pgbench", "-o", dir_.file("bad.db"), files[0]});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_NE(
      r.err.find(fmt::format("{}:{}: time 'oops' is not an integer", files[0], lines.size() + 1)),
      std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("bad.db")));
  // Numbers pgbench never writes: a negative latency, time_us past a second.
  for (const auto& [line, message] : std::vector<std::pair<std::string, std::string>>{
           {"0 21 -5 0 1700000000 5", "time '-5' is out of range"},
           {"0 21 5 0 1700000000 9999999", "time_us '9999999' is out of range 0..999999"}}) {
    std::ofstream(dir_.file("range.log")) << "0 20 5 0 1700000000 5\n" << line << "\n";
    auto bad = test::run_command({test::stallscope_bin(), "import-pgbench", "-o",
                                  dir_.file("range.db"), dir_.file("range.log")});
    EXPECT_EQ(bad.exit_status, 2) << line;
    EXPECT_NE(bad.err.find(fmt::format("{}:2: {}", dir_.file("range.log"), message)),
              std::string::npos)
        << bad.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.file("range.db")));
  }
}

}  // namespace
}  // namespace stallscope
