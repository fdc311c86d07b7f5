// `stallscope import-pgbench` on logs written by the real pgbench, and such
// a log explained with a record file taken beside pgbench.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

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
  EXPECT_EQ(db.execAndGet("SELECT threads FROM run").getInt(), 2) << "one log per thread";
  // Where pgbench ran is not known: no host ids (the host is the importer's).
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM run WHERE machine_id IS NULL AND boot_id IS NULL")
                .getInt(),
            1);
  EXPECT_EQ(r.out.find("sampled"), std::string::npos) << r.out;
  // explain works on it; with no samples of any kind one note says what
  // to record beside pgbench instead of notes on sampling it never did.
  auto ex = test::run_command({test::stallscope_bin(), "explain", dir_.file("tx.db")});
  EXPECT_EQ(ex.exit_status, 0) << ex.err;
  auto js = test::run_command({test::stallscope_bin(), "explain", "--json", dir_.file("tx.db")});
  ASSERT_EQ(js.exit_status, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  int no_samples = 0;
  for (const auto& n : j["notes"]) {
    const auto text = n.get<std::string>();
    no_samples += text.starts_with("An imported pgbench log holds no host, process or ASH samples");
    EXPECT_EQ(text.find("Host state is sampled"), std::string::npos) << text;
    EXPECT_EQ(text.find("The stallscope process was not found"), std::string::npos) << text;
  }
  EXPECT_EQ(no_samples, 1) << j["notes"];
  EXPECT_FALSE(j["accounting"]["cannot_account"].is_null()) << j["accounting"];
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

// Numbers no pgbench writes in an aggregate or per-transaction log (issue
// 15, item 6): an aggregate line with 2^63−1 transactions imported and then
// made explain fail with "integer overflow"; a negative latency sum, min >
// max, a client id past an int were stored as given. Each is now a one-line
// error naming the file and line, exit 2, and no file.
TEST_F(ImportPgbench, NumbersPgbenchCannotWriteAreRefused) {
  const std::string ok_agg = "1700000000 10 1000 150000 50 200 0 0 0 0 0 0 0 0 0";
  for (const auto& [first, line, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {ok_agg, "1700000001 9223372036854775807 1000 150000 50 200 0 0 0 0 0 0 0 0 0",
            "num_transactions '9223372036854775807' is out of range 0..9007199254740992"},
           {ok_agg, "1700000001 10 -1000 150000 50 200 0 0 0 0 0 0 0 0 0",
            "sum_latency '-1000' is out of range"},
           {ok_agg, "1700000001 10 1000 150000 200 50 0 0 0 0 0 0 0 0 0",
            "min_latency 200 is greater than max_latency 50"},
           {ok_agg, "1700000001 10 99999 150000 50 200 0 0 0 0 0 0 0 0 0",
            "sum_latency 99999 is not between num_transactions × min_latency and × max_latency"},
           {"0 20 5 0 1700000000 5", "4294967297 21 5 0 1700000000 5",
            "client_id '4294967297' is out of range 0..2147483647"},
           {"0 20 5 0 1700000000 5", "0 21 200000000000000 0 100000000 5",
            "time '200000000000000' µs starts before the epoch"}}) {
    std::ofstream(dir_.file("over.log")) << first << "\n" << line << "\n";
    auto r = test::run_command({test::stallscope_bin(), "import-pgbench", "-o",
                                dir_.file("over.db"), dir_.file("over.log")});
    EXPECT_EQ(r.exit_status, 2) << line << "\n" << r.out;
    EXPECT_NE(r.err.find(fmt::format("cannot import {}:2: {}", dir_.file("over.log"), message)),
              std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.file("over.db"))) << line;
  }
}

// The largest counts the import takes still explain: sums over the whole
// file fit in 64 bits.
TEST_F(ImportPgbench, LargestAcceptedAggregateCountsStillExplain) {
  std::ofstream(dir_.file("big.log")) << "1700000000 4503599627370496 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
                                      << "1700000001 4503599627370496 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
  auto r = test::run_command(
      {test::stallscope_bin(), "import-pgbench", "-o", dir_.file("big.db"), dir_.file("big.log")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  auto ex = test::run_command({test::stallscope_bin(), "explain", "--json", dir_.file("big.db")});
  ASSERT_EQ(ex.exit_status, 0) << ex.err;
  EXPECT_EQ(
      nlohmann::json::parse(ex.out)["run"]["pgbench_aggregate"]["transactions"].get<std::int64_t>(),
      std::int64_t{1} << 53);
}

// Input that is no log and has no end (/dev/zero): a one-line error at its
// first line, read no further — not a process growing without bound.
TEST_F(ImportPgbench, AnEndlessLineIsAnErrorNotUnboundedMemory) {
  const auto r = test::run_command(
      {test::stallscope_bin(), "import-pgbench", "-o", dir_.file("zero.db"), "/dev/zero"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_NE(r.err.find("/dev/zero:1: the line is longer than 4096 bytes"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("zero.db")));
}

// A transaction imported twice — the same log given twice, a copy of it, a
// repeated line — failed with exit 1 and SQLite's "UNIQUE constraint
// failed". It is a one-line usage error naming the file and the line of
// the repeat (in the first chunk of rows written or a later one), and no
// file is left.
TEST_F(ImportPgbench, ATransactionImportedTwiceIsNamedByFileAndLine) {
  std::string log;
  for (int i = 0; i < 20000; ++i) log += fmt::format("0 {} 100 0 1700000000 {}\n", i, i);
  std::ofstream(dir_.file("a.log")) << log;
  std::ofstream(dir_.file("copy.log")) << log;
  std::ofstream(dir_.file("early.log")) << "0 1 100 0 1700000000 5\n0 2 100 0 1700000000 9\n"
                                        << "0 1 100 0 1700000000 5\n";
  std::ofstream(dir_.file("late.log")) << log << "0 7 100 0 1700000000 7\n";
  std::ofstream(dir_.file("agg.log")) << "1700000000 10 1000 150000 50 200 0 0 0 0 0 0 0 0 0\n";
  const std::string sub = dir_.file("sub");
  std::filesystem::create_directory(sub);
  for (const auto& [files, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"a.log", "a.log"}, "cannot import {dir}/a.log: it is {dir}/a.log again"},
           {{"agg.log", "sub/../agg.log"},
            "cannot import {dir}/sub/../agg.log: it is {dir}/agg.log again"},
           {{"a.log", "copy.log"},
            "cannot import {dir}/copy.log:1: transaction_no 0 of client 0 is already imported"},
           {{"early.log"},
            "cannot import {dir}/early.log:3: transaction_no 1 of client 0 is already imported"},
           {{"late.log"},
            "cannot import {dir}/late.log:20001: transaction_no 7 of client 0 is already "
            "imported"}}) {
    std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o",
                                  dir_.file("twice.db")};
    for (const auto& f : files) argv.push_back(dir_.file(f));
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << files.back() << ": " << r.err;
    std::string expected = message;
    for (auto at = expected.find("{dir}"); at != std::string::npos; at = expected.find("{dir}"))
      expected.replace(at, 5, dir_.path().string());
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("UNIQUE"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.file("twice.db"))) << files.back();
    EXPECT_FALSE(std::filesystem::exists(dir_.file("twice.db-wal"))) << files.back();
  }
  // Alone, the log imports every line.
  const auto one = test::run_command(
      {test::stallscope_bin(), "import-pgbench", "-o", dir_.file("once.db"), dir_.file("a.log")});
  ASSERT_EQ(one.exit_status, 0) << one.err;
  SQLite::Database db(dir_.file("once.db"));
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query").getInt64(), 20000);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
}

// The same aggregate interval imported twice (a log given twice, or a copy
// of it) doubled the transactions: the rows' key is the
// file and line. An interval is now imported once per pgbench thread: a
// repeat in one log, the same thread's log (same name) from two
// directories, or — when a name is not pgbench's — a line with the same
// figures is refused, naming the file and line of both.
TEST_F(ImportPgbench, AnAggregateIntervalImportedTwiceIsNamedByFileAndLine) {
  const std::string agg =
      "1700000000 10 1000 150000 50 200 0 0 0 0 0 0 0 0 0\n"
      "1700000001 12 1300 170000 60 250 0 0 0 0 0 0 0 0 0\n"
      "1700000002 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
  std::ofstream(dir_.file("agg.log")) << agg;
  std::ofstream(dir_.file("copy.log")) << agg;
  std::ofstream(dir_.file("rep.log"))
      << agg << "1700000001 3 300 30000 100 100 0 0 0 0 0 0 0 0 0\n";
  std::ofstream(dir_.file("pgbench_log.77")) << agg;
  std::ofstream(dir_.file("pgbench_log.77.1")) << agg;
  std::filesystem::create_directory(dir_.file("sub"));
  std::ofstream(dir_.file("sub/pgbench_log.77.1")) << agg;
  for (const auto& [files, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"agg.log", "copy.log"},
            "cannot import {dir}/copy.log:1: the interval starting at 1700000000 s is already "
            "imported from {dir}/agg.log:1"},
           {{"rep.log"},
            "cannot import {dir}/rep.log:4: the interval starting at 1700000001 s is already "
            "imported from {dir}/rep.log:2"},
           {{"pgbench_log.77.1", "sub/pgbench_log.77.1"},
            "cannot import {dir}/sub/pgbench_log.77.1:1: the interval starting at 1700000000 s is "
            "already imported from {dir}/pgbench_log.77.1:1"}}) {
    std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o",
                                  dir_.file("twice.db")};
    for (const auto& f : files) argv.push_back(dir_.file(f));
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << files.back() << ": " << r.err;
    std::string expected = message;
    for (auto at = expected.find("{dir}"); at != std::string::npos; at = expected.find("{dir}"))
      expected.replace(at, 5, dir_.path().string());
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.file("twice.db"))) << files.back();
  }
  // Two threads of one pgbench log the same intervals, and may log the same
  // figures: both are imported.
  const auto two =
      test::run_command({test::stallscope_bin(), "import-pgbench", "-o", dir_.file("threads.db"),
                         dir_.file("pgbench_log.77"), dir_.file("pgbench_log.77.1")});
  ASSERT_EQ(two.exit_status, 0) << two.err;
  SQLite::Database db(dir_.file("threads.db"));
  EXPECT_EQ(db.execAndGet("SELECT sum(transactions) FROM pgbench_aggregate").getInt64(), 44);
}

// Logs of two pgbench runs (same --log-prefix, so PREFIX.PID1[.N] and
// PREFIX.PID2[.N]) were merged into one run without a word: a tps that
// matches neither, clients counted together. They are
// refused, naming two of them; one run's logs (two threads) still import.
TEST_F(ImportPgbench, LogsOfDifferentPgbenchProcessesAreRefused) {
  pgbench({"-t", "5"}, "two");
  const auto first = logs_with_prefix(dir_.path(), "two");
  ASSERT_EQ(first.size(), 2u);
  pgbench({"-t", "5"}, "two");
  const auto both = logs_with_prefix(dir_.path(), "two");
  ASSERT_EQ(both.size(), 4u);
  std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o",
                                dir_.file("merged.db")};
  argv.insert(argv.end(), both.begin(), both.end());
  const auto r = test::run_command(argv);
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_NE(r.err.find("their names say different pgbench processes wrote them"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("merged.db")));

  std::vector<std::string> one{test::stallscope_bin(), "import-pgbench", "-o", dir_.file("one.db")};
  one.insert(one.end(), first.begin(), first.end());
  const auto ok = test::run_command(one);
  ASSERT_EQ(ok.exit_status, 0) << ok.err;
  SQLite::Database db(dir_.file("one.db"));
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM query").getInt64(), 10);
}

// An import stopped by SIGINT left its partial file (and -wal, -shm), which
// then blocked the rerun with "file exists". The second
// log is a FIFO, so the import is still reading when the signal comes.
TEST_F(ImportPgbench, AnInterruptedImportLeavesNoFile) {
  std::string log;
  for (int i = 0; i < 100; ++i) log += fmt::format("0 {} 100 0 1700000000 {}\n", i, i);
  std::ofstream(dir_.file("a.log")) << log;
  const std::string fifo = dir_.file("b.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string db = dir_.file("cut.db");
  const int pid =
      test::spawn({test::stallscope_bin(), "import-pgbench", "-o", db, dir_.file("a.log"), fifo});
  ASSERT_GT(pid, 0);
  const int writer = ::open(fifo.c_str(), O_WRONLY);  // once the import opened it
  ASSERT_GE(writer, 0);
  const std::string line = "1 0 100 0 1700000000 5\n";
  ASSERT_EQ(::write(writer, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  for (int i = 0; i < 3000 && !std::filesystem::exists(db); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(std::filesystem::exists(db));
  ::kill(pid, SIGINT);
  ::close(writer);  // the import reads to the end of the FIFO, then sees the stop
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    EXPECT_FALSE(std::filesystem::exists(db + suffix)) << suffix;
  }
  const auto again =
      test::run_command({test::stallscope_bin(), "import-pgbench", "-o", db, dir_.file("a.log")});
  EXPECT_EQ(again.exit_status, 0) << again.err;
}

// Aggregate intervals 70 years apart (the import takes the gap as the
// interval length: the run spans 140 years) need 4.4·10^9 one-second
// windows: explain failed with "too many windows". Without --window it takes
// windows of 1, 2 or 5 × 10^k s, at most 100,000 of them (here 50,000 s),
// and says so; a --window the user chose stays an error.
TEST_F(ImportPgbench, DecadesApartExplainWithLongerDefaultWindows) {
  std::ofstream(dir_.file("decades.log")) << "1000000000 10 1000 150000 50 200 0 0 0 0 0 0 0 0 0\n"
                                          << "3208968000 10 1000 150000 50 200 0 0 0 0 0 0 0 0 0\n";
  const auto db = dir_.file("decades.db");
  auto r = test::run_command(
      {test::stallscope_bin(), "import-pgbench", "-o", db, dir_.file("decades.log")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  auto ex = test::run_command({test::stallscope_bin(), "explain", "--json", db});
  ASSERT_EQ(ex.exit_status, 0) << ex.err;
  const auto j = nlohmann::json::parse(ex.out);
  EXPECT_EQ(j["run"]["window_ns"].get<std::int64_t>(), 50'000'000'000'000);
  EXPECT_EQ(j["windows"].size(), 88'359u);  // 4'417'936'000 s / 50'000 s, rounded up
  std::int64_t transactions = 0;
  for (const auto& w : j["windows"]) transactions += w["queries"].get<std::int64_t>();
  EXPECT_EQ(transactions, 20);
  const std::string notes = j["notes"].dump();
  EXPECT_NE(notes.find("Windows of 50000 s instead of the default 1 s"), std::string::npos)
      << notes;
  auto chosen = test::run_command({test::stallscope_bin(), "explain", db, "--window", "1s"});
  EXPECT_EQ(chosen.exit_status, 2) << chosen.err;
  EXPECT_NE(chosen.err.find("windows is too many"), std::string::npos) << chosen.err;
  // A window past an int64 of ns is too long, not "shorter than 1 ms".
  auto huge =
      test::run_command({test::stallscope_bin(), "explain", db, "--window", "99999999999h"});
  EXPECT_EQ(huge.exit_status, 2) << huge.err;
  EXPECT_EQ(huge.err,
            "stallscope explain: --window: '99999999999h' is too long (at most 292 "
            "years)\n");
}

// The accounting part named `name` (null when absent).
nlohmann::json part(const nlohmann::json& accounting, const std::string& name) {
  for (const auto& p : accounting["parts"])
    if (p["part"] == name) return p;
  return nullptr;
}

// The parts add up to the query time (the measured ones trimmed to it when
// they exceed it, by excess_ns).
void expect_parts_add_up(const nlohmann::json& a) {
  ASSERT_TRUE(a["cannot_account"].is_null()) << a;
  std::int64_t sum = 0;
  for (const auto& p : a["parts"]) sum += p["time_ns"].get<std::int64_t>();
  EXPECT_EQ(sum, a["query_ns"].get<std::int64_t>()) << a;
}

bool has_note_with(const nlohmann::json& j, const std::string& text) {
  for (const auto& n : j["notes"])
    if (n.get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

// A record --pg on this host beside a real pgbench (-c 4 -T 4), its log
// imported; returns the pgbench pid (-1 when a step failed).
class ImportWithRecord : public ImportPgbench {
 protected:
  pid_t record_beside_pgbench(const std::string& pgbench_bin, const std::string& stem) {
    std::ofstream(dir_.file("pg_class.sql")) << "SELECT count(*) FROM pg_class;\n";
    const pid_t rec = test::spawn({test::stallscope_bin(), "record", "-o",
                                   dir_.file(stem + "-rec.db"), "--pg", conninfo_, "-T", "8"});
    EXPECT_GT(rec, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const pid_t pgbench =
        test::spawn({pgbench_bin, "-n", "-f", dir_.file("pg_class.sql"), "-c", "4", "-j", "2", "-T",
                     "4", "-l", "--log-prefix=" + dir_.file(stem), conninfo_});
    EXPECT_GT(pgbench, 0);
    // pgbench's own backends, by the server's account, more than half way
    // through: the query's own backend must start outside the 2 s after
    // pgbench started in which explain takes client backends as pgbench's
    // (kBackendStartSlackNs); at 2.0 s it sometimes fell inside, and then
    // five candidates for four clients meant none was taken.
    std::this_thread::sleep_for(std::chrono::milliseconds(2700));
    backends_ = test::psql(conninfo_,
                           "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
                           "WHERE application_name = 'pgbench'");
    const bool pgbench_ok = test::exited_ok(pgbench);
    const bool rec_ok = test::exited_ok(rec);
    EXPECT_TRUE(pgbench_ok && rec_ok);
    const auto files = logs_with_prefix(dir_.path(), stem);
    std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o",
                                  dir_.file(stem + ".db")};
    argv.insert(argv.end(), files.begin(), files.end());
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.exit_status, 0) << r.err;
    return pgbench_ok && rec_ok && r.exit_status == 0 ? pgbench : -1;
  }
  nlohmann::json explain_pair(const std::string& stem) {
    const auto e = test::run_command({test::stallscope_bin(), "explain", dir_.file(stem + ".db"),
                                      dir_.file(stem + "-rec.db"), "--json"});
    EXPECT_EQ(e.exit_status, 0) << e.err;
    return e.exit_status == 0 ? nlohmann::json::parse(e.out) : nlohmann::json();
  }
  std::string backends_;  // "pid,pid,…" of application_name 'pgbench', from pg_stat_activity
};

// The CPU of process `pid` (comm `comm`) in a record file over [from_ns,
// to_ns): each process row's CPU delta — schedstat, or where that was
// unreadable its utime + stime ticks — spread evenly over the span it covers.
std::int64_t process_cpu_ns(const std::string& db_path, int pid, const std::string& comm,
                            std::int64_t from_ns, std::int64_t to_ns) {
  SQLite::Database db(db_path);
  const auto ticks_per_s = db.execAndGet("SELECT clock_ticks_per_s FROM run").getInt64();
  SQLite::Statement q(db,
                      "SELECT s.time_ns, coalesce(ps.cpu_ns, (ps.utime_ticks + ps.stime_ticks) * "
                      "1000000000 / ?3), ps.span_ns FROM process_sample ps JOIN sample s USING "
                      "(sample_id) JOIN process p USING (process_id) WHERE p.pid = ?1 AND p.comm "
                      "= ?2 AND (ps.cpu_ns IS NOT NULL OR ps.utime_ticks IS NOT NULL)");
  q.bind(1, pid);
  q.bind(2, comm);
  q.bind(3, ticks_per_s);
  std::int64_t total = 0;
  while (q.executeStep()) {
    const auto t = q.getColumn(0).getInt64(), cpu = q.getColumn(1).getInt64();
    if (q.getColumn(2).isNull() || q.getColumn(2).getInt64() <= 0) {
      if (t >= from_ns && t < to_ns) total += cpu;
      continue;
    }
    const auto span = q.getColumn(2).getInt64();
    const auto overlap = std::min(t, to_ns) - std::max(t - span, from_ns);
    if (overlap > 0)
      total += static_cast<std::int64_t>(static_cast<__int128>(cpu) * overlap / span);
  }
  return total;
}

// The process rows of `pid` in a record file, one line each (for failures).
std::string process_rows_text(const std::string& db_path, int pid) {
  SQLite::Database db(db_path);
  SQLite::Statement q(db,
                      "SELECT p.process_id, p.comm, s.time_ns, ps.cpu_ns, ps.utime_ticks, "
                      "ps.stime_ticks, ps.span_ns FROM process_sample ps JOIN sample s USING "
                      "(sample_id) JOIN process p USING (process_id) WHERE p.pid = ?1 ORDER BY "
                      "s.time_ns");
  q.bind(1, pid);
  std::string out;
  while (q.executeStep()) {
    for (int c = 0; c < 7; ++c) out += q.getColumn(c).getString() + (c < 6 ? " " : "\n");
  }
  return out;
}

TEST_F(ImportWithRecord, PgbenchInTheRecordFileIsTheDriverAndItsBackendsTheServer) {
  const pid_t pgbench = record_beside_pgbench("pgbench", "pb");
  ASSERT_GT(pgbench, 0);
  const auto j = explain_pair("pb");
  ASSERT_TRUE(j.is_object());
  // pgbench found by the pid in its log file names (pb.PID, pb.PID.1).
  const auto& pg = j["pgbench"];
  ASSERT_TRUE(pg.is_object()) << j.dump();
  EXPECT_EQ(pg["pid"], pgbench);
  EXPECT_EQ(pg["found_by"], "log file name");
  // Its backends are exactly the four pg_stat_activity gave for
  // application_name 'pgbench' while it ran, each a sampled process.
  std::vector<int> pids = pg["backend_pids"].get<std::vector<int>>();
  std::sort(pids.begin(), pids.end());
  const std::string listed = fmt::format("{}", fmt::join(pids, ","));
  EXPECT_EQ(listed, backends_);
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_EQ(pg["backend_processes"], 4);
  EXPECT_GE(pg["backends_by_application_name"].get<int>(), 1);
  EXPECT_EQ(j["attribution"]["method"], "host_wide");
  EXPECT_NE(j["attribution"]["reason"].get<std::string>().find("pgbench's 4 backends"),
            std::string::npos)
      << j["attribution"];
  // pgbench's CPU is its process CPU over the analysed span, from the
  // record file (within the rounding of spreading it over the windows); the
  // driver_cpu part is that, less what the accounting trims when the
  // measured parts exceed the query time.
  const auto& a = j["accounting"];
  const auto driver = part(a, "driver_cpu");
  ASSERT_FALSE(driver.is_null()) << a;
  EXPECT_EQ(driver["host"], "client");
  const auto from = j["windows"].front()["start_ns"].get<std::int64_t>();
  const auto to = j["windows"].back()["end_ns"].get<std::int64_t>();
  const auto expected = process_cpu_ns(dir_.file("pb-rec.db"), pgbench, "pgbench", from, to);
  EXPECT_GT(expected, 100'000'000) << "pgbench with 4 clients uses CPU";
  EXPECT_NEAR(pg["cpu_ns"].get<double>(), double(expected), 1000.0)
      << "windows " << from << " .. " << to << "\n"
      << process_rows_text(dir_.file("pb-rec.db"), pgbench);
  const auto driver_ns = driver["time_ns"].get<std::int64_t>();
  EXPECT_GT(driver_ns, 0);
  if (a["excess_ns"].get<std::int64_t>() == 0) {
    EXPECT_EQ(driver_ns, pg["cpu_ns"].get<std::int64_t>());
  } else {
    EXPECT_LE(driver_ns, pg["cpu_ns"].get<std::int64_t>());
  }
  EXPECT_FALSE(part(a, "client_run_queue").is_null()) << a;
  EXPECT_GT(part(a, "server_cpu")["time_ns"].get<std::int64_t>(), 0);
  expect_parts_add_up(a);
  // Both roles are this host (pgbench ran where the record file sampled).
  ASSERT_EQ(j["hosts"].size(), 2u);
  EXPECT_EQ(j["hosts"][0]["role"], "client");
  EXPECT_EQ(j["hosts"][0]["host"], j["hosts"][1]["host"]);
  EXPECT_TRUE(has_note_with(j, fmt::format("pgbench found in the record file: pid {}", pgbench)))
      << j["notes"];
  EXPECT_TRUE(has_note_with(j, "no shift is needed")) << j["notes"];
  // One host, one clock: the log's times line up with the record file's —
  // pgbench started before its first transaction, and ASH saw its backends
  // only while its transactions ran (± a poll).
  const auto q0 = j["run"]["query_start_ns"].get<std::int64_t>();
  const auto q1 = j["run"]["query_end_ns"].get<std::int64_t>();
  EXPECT_LE(pg["start_ns"].get<std::int64_t>(), q0);
  EXPECT_GT(pg["start_ns"].get<std::int64_t>(), q0 - 2'000'000'000);
  {
    SQLite::Database rec(dir_.file("pb-rec.db"));
    SQLite::Statement ash(rec,
                          "SELECT min(time_ns), max(time_ns) FROM pg_activity_sample WHERE "
                          "application_name = 'pgbench'");
    ASSERT_TRUE(ash.executeStep());
    constexpr std::int64_t kPollNs = 200'000'000;
    EXPECT_GE(ash.getColumn(0).getInt64(), q0 - kPollNs);
    EXPECT_LE(ash.getColumn(1).getInt64(), q1 + kPollNs);
  }
  // pgbench's backends are on the query path, not competing processes.
  for (const auto& f : j["findings"]) {
    for (const auto& [k, v] : f["evidence"].items()) {
      if (k.starts_with("top_other") && v.is_string()) {
        for (int p : pids)
          EXPECT_EQ(v.get<std::string>().find(fmt::format("(pid {})", p)), std::string::npos) << v;
      }
    }
  }
}

// The same with pgbench under another name: no process named pgbench in the
// record file, and its backends carry that other application_name. A note
// says so; the accounting still adds up, with no driver CPU.
TEST_F(ImportWithRecord, WithoutPgbenchInTheRecordFileANoteSaysWhy) {
  std::string real;
  for (const char* v : {"15", "16", "17"}) {
    const auto p = fmt::format("/usr/lib/postgresql/{}/bin/pgbench", v);
    if (std::filesystem::exists(p)) real = p;
  }
  ASSERT_FALSE(real.empty()) << "the pgbench binary (tools/install-deps)";
  std::filesystem::create_symlink(real, dir_.file("pgb-renamed"));
  ASSERT_GT(record_beside_pgbench(dir_.file("pgb-renamed"), "rn"), 0);
  EXPECT_EQ(backends_, "") << "its backends' application_name is pgb-renamed";
  const auto j = explain_pair("rn");
  ASSERT_TRUE(j.is_object());
  const auto& pg = j["pgbench"];
  ASSERT_TRUE(pg.is_object()) << j.dump();
  EXPECT_TRUE(pg["pid"].is_null());
  EXPECT_EQ(pg["processes"], 0);
  EXPECT_TRUE(pg["backend_pids"].empty());
  EXPECT_TRUE(has_note_with(j,
                            "pgbench was not found in the record file: no process named "
                            "pgbench was sampled during the queries"))
      << j["notes"];
  EXPECT_TRUE(has_note_with(j, "No ASH sample during the queries has application_name 'pgbench'"))
      << j["notes"];
  // Only the record file's host is known.
  ASSERT_EQ(j["hosts"].size(), 1u);
  EXPECT_EQ(j["hosts"][0]["role"], "server");
  const auto& a = j["accounting"];
  EXPECT_EQ(part(a, "driver_cpu")["time_ns"], 0);
  expect_parts_add_up(a);
}

}  // namespace
}  // namespace stallscope
