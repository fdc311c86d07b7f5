// import::PgbenchLogParser on hand-written pgbench log lines: what a valid
// line becomes, and the numbers pgbench cannot have written, refused with
// the file and line named (an aggregate line with 2^63−1 transactions once
// imported and then broke explain).
#include "import/pgbench_log.h"

#include <gtest/gtest.h>

#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace stallscope::import {
namespace {

// The message of the Error(usage) that parsing `text` as file "t.log"
// throws; "" when it parses.
std::string error_of(const std::string& text) {
  PgbenchLogParser p;
  std::istringstream in(text);
  try {
    p.parse_file(in, "t.log");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
    return e.what();
  }
  return "";
}

schema::Batch parse(const std::string& text) {
  PgbenchLogParser p;
  std::istringstream in(text);
  p.parse_file(in, "t.log");
  return p.take_batch();
}

// A valid aggregate line with these fields in place of the defaults.
std::string aggregate(std::string n = "10", std::string sum = "1000", std::string min = "50",
                      std::string max = "200", std::string lag_sum = "0", std::string lag_min = "0",
                      std::string lag_max = "0", std::string skipped = "0") {
  return "1700000000 " + n + " " + sum + " 150000 " + min + " " + max + " " + lag_sum + " 0 " +
         lag_min + " " + lag_max + " " + skipped + " 0 0 0 0\n";
}

// Issue 27: the message was cut at a NUL byte of the line it quotes.
TEST(PgbenchLog, AnErrorQuotingANulByteIsNotCutThere) {
  const auto message =
      error_of(std::string("0 1 100 0 1700000000 5\n0 2 1\0x 0 1700000000 6\n", 46));
  EXPECT_NE(message.find("t.log:2"), std::string::npos) << message;
  EXPECT_NE(message.find("\\x00"), std::string::npos) << message;
  EXPECT_EQ(message.find('\0'), std::string::npos);
}

TEST(PgbenchLog, TransactionLineBecomesAQueryRow) {
  const auto b = parse("3 7 1500 0 1700000000 250000 120 1\n");
  ASSERT_EQ(b.queries.size(), 1u);
  EXPECT_EQ(b.queries[0].client_id, 3);
  EXPECT_EQ(b.queries[0].seq, 7);
  EXPECT_EQ(b.queries[0].latency_ns, 1'500'000);
  EXPECT_EQ(b.queries[0].start_ns, 1'700'000'000'250'000'000 - 1'500'000);
  EXPECT_EQ(b.queries[0].lag_ns, 120'000);
}

TEST(PgbenchLog, AggregateLineBecomesAnAggregateRow) {
  const auto b = parse(aggregate());
  ASSERT_EQ(b.pgbench_aggregates.size(), 1u);
  const auto& r = b.pgbench_aggregates[0];
  EXPECT_EQ(r.file, "t.log");
  EXPECT_EQ(r.line, 1);
  EXPECT_EQ(r.interval_start_ns, 1'700'000'000'000'000'000);
  EXPECT_EQ(r.transactions, 10);
  EXPECT_EQ(r.latency_sum_ns, 1'000'000);
  EXPECT_EQ(r.latency_min_ns, 50'000);
  EXPECT_EQ(r.latency_max_ns, 200'000);
}

// pgbench prints sum, min and max rounded: 3 latencies of 0.4 µs print as
// sum 1, min 0, max 0 — still a log pgbench wrote.
TEST(PgbenchLog, RoundedSumsAreAccepted) {
  EXPECT_EQ(error_of(aggregate("3", "1", "0", "0")), "");
  EXPECT_EQ(error_of(aggregate("4", "2", "1", "1")), "");
  EXPECT_EQ(error_of("1700000000 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"), "");
}

// An interval without transactions has nothing in its latency and lag
// statistics (pgbench adds only the transactions it counts); a line with
// a sum, square, min or max there was taken as it stood.
TEST(PgbenchLog, IntervalWithoutTransactionsHasZeroStatistics) {
  EXPECT_EQ(error_of("1700000000 0 0 0 0 0 0 0 0 0 5 0 0 1 0\n"), "");  // skips, failures
  EXPECT_EQ(error_of("1700000000 0 1000 0 0 0 0 0 0 0 0 0 0 0 0\n"),
            "cannot import t.log:1: sum_latency '1000' is not 0 in an interval of "
            "num_transactions 0");
  for (const auto& [line, field] : std::vector<std::pair<std::string, std::string>>{
           {"1700000000 0 0 2.5 0 0 0 0 0 0 0 0 0 0 0", "sum_latency_2 '2.5'"},
           {"1700000000 0 0 0 7 0 0 0 0 0 0 0 0 0 0", "min_latency '7'"},
           {"1700000000 0 0 0 0 7 0 0 0 0 0 0 0 0 0", "max_latency '7'"},
           {"1700000000 0 0 0 0 0 9 0 0 0 0 0 0 0 0", "sum_lag '9'"},
           {"1700000000 0 0 0 0 0 0 81 0 0 0 0 0 0 0", "sum_lag_2 '81'"},
           {"1700000000 0 0 0 0 0 0 0 9 9 0 0 0 0 0", "min_lag '9'"},
           {"1700000000 0 0 0 0 0 0 0 0 9 0 0 0 0 0", "max_lag '9'"}}) {
    EXPECT_EQ(error_of(aggregate() + line + "\n"),
              "cannot import t.log:2: " + field + " is not 0 in an interval of num_transactions 0")
        << line;
  }
}

TEST(PgbenchLog, HugeTransactionCountIsRefused) {
  EXPECT_EQ(error_of(aggregate("9223372036854775807")),
            "cannot import t.log:1: num_transactions '9223372036854775807' is out of range "
            "0..9007199254740992");
}

TEST(PgbenchLog, NegativeSumsAndCountsAreRefused) {
  EXPECT_EQ(error_of(aggregate("10", "-1000")),
            "cannot import t.log:1: sum_latency '-1000' is out of range 0..2305843009213693");
  EXPECT_EQ(error_of(aggregate("-1")),
            "cannot import t.log:1: num_transactions '-1' is out of range 0..9007199254740992");
  EXPECT_NE(error_of(aggregate("10", "1000", "50", "200", "-5")).find("sum_lag '-5' is out of"),
            std::string::npos);
  EXPECT_NE(error_of(aggregate("10", "1000", "50", "200", "0", "0", "0", "-2"))
                .find("skipped '-2' is out of range"),
            std::string::npos);
}

TEST(PgbenchLog, MinAboveMaxIsRefused) {
  EXPECT_EQ(error_of(aggregate("10", "1000", "200", "50")),
            "cannot import t.log:1: min_latency 200 is greater than max_latency 50");
  EXPECT_EQ(error_of(aggregate("10", "1000", "50", "200", "30", "5", "2")),
            "cannot import t.log:1: min_lag 5 is greater than max_lag 2");
}

TEST(PgbenchLog, SumOutsideCountTimesMinAndMaxIsRefused) {
  // 10 transactions of 50..200 µs sum to 500..2000 µs.
  EXPECT_EQ(error_of(aggregate("10", "100000")),
            "cannot import t.log:1: sum_latency 100000 is not between num_transactions × "
            "min_latency and × max_latency (10 × 50..200)");
  EXPECT_NE(error_of(aggregate("10", "10")).find("sum_latency 10 is not between"),
            std::string::npos);
  EXPECT_NE(error_of(aggregate("10", "1000", "50", "200", "999", "1", "2"))
                .find("sum_lag 999 is not between"),
            std::string::npos);
}

TEST(PgbenchLog, SumsOfSquaresMustBeFiniteAndNotNegative) {
  EXPECT_NE(error_of("1700000000 1 5 nan 5 5 0 0 0 0 0 0 0 0 0\n").find("sum_latency_2 'nan'"),
            std::string::npos);
  EXPECT_NE(error_of("1700000000 1 5 -25 5 5 0 0 0 0 0 0 0 0 0\n").find("sum_latency_2 '-25'"),
            std::string::npos);
  EXPECT_NE(error_of("1700000000 1 5 25 5 5 0 inf 0 0 0 0 0 0 0\n").find("sum_lag_2 'inf'"),
            std::string::npos);
}

// Each line fits, but the sum over the import would not: explain sums
// transactions and latency over every row.
TEST(PgbenchLog, WholeImportSumsStayBelowTheirBounds) {
  const std::string big = aggregate("4503599627370496", "0", "0", "0");  // 2^52 each
  EXPECT_EQ(error_of(big + big), "");
  EXPECT_EQ(error_of(big + big + aggregate("1", "5", "5", "5")),
            "cannot import t.log:3: the sum of num_transactions over the files imported passes "
            "9007199254740992: not a pgbench log");
  // 2^21 transactions of 2^42 µs each, four times: Σ latency ns passes 2^63.
  const std::string slow = aggregate("2097152", "2251799813685248", "1073741824", "1073741824");
  const std::string four = slow + slow + slow + slow;
  EXPECT_NE(error_of(four + slow).find("t.log:5: the sum of sum_latency in ns"), std::string::npos)
      << error_of(four + slow);
  // Across files, too.
  PgbenchLogParser p;
  std::istringstream a(big + big), b(aggregate("1", "5", "5", "5"));
  p.parse_file(a, "a.log");
  try {
    p.parse_file(b, "b.log");
    ADD_FAILURE() << "b.log was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot import b.log:1: the sum of num_transactions"),
              std::string::npos)
        << e.what();
  }
}

TEST(PgbenchLog, IntervalStartOutsideTheEpochRangeIsRefused) {
  EXPECT_NE(error_of("9223372036854775807 1 5 25 5 5 0 0 0 0 0 0 0 0 0\n")
                .find("interval_start '9223372036854775807' is out of range 0..4000000000"),
            std::string::npos);
  EXPECT_NE(error_of("-1 1 5 25 5 5 0 0 0 0 0 0 0 0 0\n").find("interval_start '-1' is out of"),
            std::string::npos);
}

TEST(PgbenchLog, TransactionFieldsOutOfRangeAreRefused) {
  // A client id past an int used to be truncated (4294967297 → client 1).
  // (On a first line, such a client id does not even look like a log.)
  EXPECT_EQ(error_of("0 0 5 0 1700000000 5\n4294967297 1 5 0 1700000000 5\n"),
            "cannot import t.log:2: client_id '4294967297' is out of range 0..2147483647");
  EXPECT_NE(error_of("0 -9223372036854775808 5 0 1700000000 5\n")
                .find("transaction_no '-9223372036854775808' is out of range"),
            std::string::npos);
  EXPECT_NE(error_of("-1 1 5 0 1700000000 5\n").find("client_id '-1' is out of range"),
            std::string::npos);
  EXPECT_NE(error_of("0 1 5 -1 1700000000 5\n").find("script_no '-1' is out of range"),
            std::string::npos);
  EXPECT_NE(error_of("0 1 5 0 1700000000 5 0 -3\n").find("retries '-3' is out of range"),
            std::string::npos);
  EXPECT_NE(error_of("0 1 5 0 4000000001 5\n").find("time_epoch '4000000001' is out of range"),
            std::string::npos);
}

// A latency longer than the time since the epoch would start the
// transaction before 1970 (a negative start_ns).
TEST(PgbenchLog, ATransactionCannotStartBeforeTheEpoch) {
  EXPECT_EQ(error_of("0 1 200000000000000 0 100000000 5\n"),
            "cannot import t.log:1: time '200000000000000' µs starts before the epoch (it ended "
            "at 100000000.000005)");
  EXPECT_NE(error_of("0 1 1000000000000000 0 100000000 0\n")
                .find("time '1000000000000000' µs starts before the epoch"),
            std::string::npos);
  EXPECT_NE(error_of("0 1 skipped 0 100000000 0 200000000000000\n")
                .find("schedule_lag '200000000000000' µs reaches back before the epoch"),
            std::string::npos);
}

TEST(PgbenchLog, ErrorsNameTheLine) {
  EXPECT_EQ(error_of("0 1 5 0 1700000000 5\n\n0 2 oops 0 1700000000 9\n"),
            "cannot import t.log:3: time 'oops' is not an integer");
  EXPECT_EQ(error_of(""), "cannot import t.log: the log is empty");
  EXPECT_EQ(error_of(std::string(5000, 'x')),
            "cannot import t.log:1: the line is longer than 4096 bytes: not a pgbench log");
}

// The line-at-a-time entry point (the fuzz target's) counts lines as the
// file reader does.
TEST(PgbenchLog, LineAtATimeCountsLines) {
  PgbenchLogParser p;
  p.begin_file("l.log");
  p.parse_line("0 1 5 0 1700000000 5");
  p.parse_line("");
  try {
    p.parse_line("0 1 5 0");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot import l.log:3: 4 fields, expected 6 to 8 (client_id transaction_no time "
              "script_no time_epoch time_us [schedule_lag] [retries])");
  }
  EXPECT_EQ(p.batch().queries.size(), 1u);
}

// With a sink the rows are handed over in chunks of kChunkRows as they are
// parsed — the import held every row of every log until the end (about 130
// bytes a line, without bound) — each row with its line, for naming a
// duplicate.
TEST(PgbenchLog, SinkGetsBoundedChunksWithTheLineOfEachRow) {
  std::string text;
  const std::size_t n = 2 * kChunkRows + 3;
  for (std::size_t i = 0; i < n; ++i) {
    text += i % 2 == 0 ? fmt::format("0 {} 5 0 1700000000 5\n\n", i)
                       : fmt::format("0 {} skipped 0 1700000000 5 0\n\n", i);
  }
  PgbenchLogParser p;
  std::istringstream in(text);
  std::vector<std::size_t> sizes;
  std::size_t rows = 0;
  p.parse_file(in, "c.log", [&](Chunk c) {
    EXPECT_EQ(c.file, "c.log");
    ASSERT_EQ(c.query_lines.size(), c.batch.queries.size());
    ASSERT_EQ(c.skip_lines.size(), c.batch.query_skips.size());
    // transaction_no i is on line 2i + 1 (a blank line after each).
    for (std::size_t k = 0; k < c.batch.queries.size(); ++k)
      EXPECT_EQ(c.query_lines[k], 2 * c.batch.queries[k].seq + 1);
    for (std::size_t k = 0; k < c.batch.query_skips.size(); ++k)
      EXPECT_EQ(c.skip_lines[k], 2 * c.batch.query_skips[k].seq + 1);
    sizes.push_back(c.batch.queries.size() + c.batch.query_skips.size());
    rows += sizes.back();
  });
  EXPECT_EQ(sizes, (std::vector<std::size_t>{kChunkRows, kChunkRows, 3}));
  EXPECT_EQ(rows, n);
  EXPECT_TRUE(p.batch().queries.empty());
  EXPECT_TRUE(p.batch().query_skips.empty());
}

// pgbench names its logs PREFIX.PID (thread 0) and PREFIX.PID.N (logs of
// different pgbench processes were once merged into one run).
TEST(PgbenchLogName, ReadsPrefixProcessAndThread) {
  EXPECT_EQ(parse_log_name("pgbench_log.4242"), (LogName{"pgbench_log", 4242, 0}));
  EXPECT_EQ(parse_log_name("/tmp/x.y/pgbench_log.4242.3"), (LogName{"pgbench_log", 4242, 3}));
  EXPECT_EQ(parse_log_name("run.a.17"), (LogName{"run.a", 17, 0}));
  for (const char* other : {"a.log", "pgbench_log", "pgbench_log.4242.copy", ".4242", "dir.7/a",
                            "pgbench_log.", "pgbench_log.12a", "x.1234567890123456789"}) {
    EXPECT_EQ(parse_log_name(other), std::nullopt) << other;
  }
}

}  // namespace
}  // namespace stallscope::import
