// explain on a file whose query rows do not read back as written: a row
// whose key SQLite reads as text (after every number) ends the range scan
// early, so every query after it would be silently left out; a dropped
// table. Each is bad input (Error usage) naming the file, never a report
// on part of it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "correlate/correlate.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using test::kMs;
using test::kS;
constexpr std::int64_t kT0 = 1'700'000'000 * kS;

// Two clients, a query each every 100 ms for 10 s; the run has an end.
schema::Store make_run() {
  auto store = schema::Store::create(":memory:");
  store.begin_run(test::run_info(kT0 - kS));
  schema::Batch b;
  for (int c = 0; c < 2; ++c) {
    for (int k = 0; k < 100; ++k) {
      b.queries.push_back(
          {.client_id = c, .seq = k, .start_ns = kT0 + k * 100 * kMs, .latency_ns = 10 * kMs});
    }
  }
  store.write(b);
  store.end_run(kT0 + 10 * kS, "complete", "duration reached");
  return store;
}

std::string usage_error(schema::Store& store) {
  try {
    (void)explain(store, {});
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "explained";
  return {};
}

TEST(CorrelateDamagedFile, SoundFileReadsEveryQuery) {
  auto store = make_run();
  EXPECT_EQ(explain(store, {}).run.queries, 200);
}

TEST(CorrelateDamagedFile, ARowThatEndsTheScanEarlyIsDamage) {
  auto store = make_run();
  // Client 0's 50th query: its key now sorts after every number, where the
  // scan's bound (start_ns <= until) ends the scan before it.
  store.db().exec("UPDATE query SET start_ns = 'x' || start_ns WHERE client_id = 0 AND seq = 49");
  EXPECT_EQ(usage_error(store),
            "cannot read :memory:: the file is damaged (query table: 199 rows read in key order "
            "of 200 stored)");
}

// A latency near 2^63 summed past 64 bits (the mean latency came out
// negative), a negative latency or lag was taken as it stood: each row
// outside what stallscope writes makes the file damaged, naming the row.
TEST(CorrelateDamagedFile, LatenciesOutsideTheirBoundsAreDamage) {
  for (const auto& [edit, message] : std::vector<std::pair<std::string, std::string>>{
           {"UPDATE query SET latency_ns = 9223372036854775000 WHERE client_id = 0 AND seq = 3",
            "client 0 seq 3 has latency_ns 9223372036854775000, outside 0..2305843009213693951"},
           {"UPDATE query SET latency_ns = -5 WHERE client_id = 1 AND seq = 7",
            "client 1 seq 7 has latency_ns -5, outside 0..2305843009213693951"},
           {"UPDATE query SET latency_ns = 2000000000000000000 WHERE seq < 5",
            "the sum of latency_ns or lag_ns passes 2^63 at client 0 seq 2"},
           {"UPDATE query SET lag_ns = 0; UPDATE query SET lag_ns = -1 WHERE client_id = 1 AND "
            "seq = 2",
            "client 1 seq 2 has lag_ns -1, outside 0..2305843009213693951"}}) {
    auto store = make_run();
    store.db().exec(edit);
    EXPECT_EQ(usage_error(store),
              "cannot read :memory:: the file is damaged (query table: " + message + ")")
        << edit;
  }
  // The largest latency a file may hold still explains, its mean positive.
  auto store = make_run();
  store.db().exec(
      "UPDATE query SET latency_ns = 2305843009213693951 WHERE client_id = 0 AND seq = 0");
  ExplainOptions by_queries;  // time windows would be 1 s each over 73 years
  by_queries.every_queries = 50;
  const auto report = explain(store, by_queries);
  ASSERT_TRUE(report.run.latency_mean_ms);
  EXPECT_GT(*report.run.latency_mean_ms, 0);
}

TEST(CorrelateDamagedFile, ADroppedTableIsNamed) {
  auto store = make_run();
  store.db().exec("DROP TABLE ash_tick");
  const auto what = usage_error(store);
  EXPECT_NE(what.find(":memory:: it has no table ash_tick"), std::string::npos) << what;
}

TEST(CorrelateDamagedFile, TheOptionalQuerySleepTableMayBeMissing) {
  auto store = make_run();
  store.db().exec("DROP TABLE IF EXISTS query_sleep");
  EXPECT_EQ(explain(store, {}).run.queries, 200);
}

}  // namespace
}  // namespace stallscope::correlate
