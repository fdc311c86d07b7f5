// schema/pg_stats_readers.h on small hand-made run files, with exact values:
// what the ASH sampler's PostgreSQL statistics read back as, and a file
// without those tables read as one without them.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "common/units.h"
#include "schema/pg_stats_readers.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000 * common::kNsPerS;
using test::kS;

TEST(PgStatsReaders, CountersBoundTheSpanAndCountPollsWithoutWalsenders) {
  auto store = Store::create(":memory:");
  Batch b;
  for (int i = 0; i < 5; ++i) {
    b.pg_stats.samples.push_back({.time_ns = kT0 + i * kS,
                                  .duration_ns = 1000,
                                  .xact_commit = 100 * i,
                                  .temp_bytes = 10 * i,
                                  .wal_fpi = i,
                                  .walsenders = i == 2 ? 0 : 1});
  }
  b.pg_stats.settings.push_back(
      {.name = "work_mem", .setting = "64", .unit = "kB", .time_ns = kT0});
  b.pg_stats.replication.push_back({.time_ns = kT0 + kS,
                                    .pid = 9,
                                    .application_name = "s1",
                                    .state = "streaming",
                                    .sync_state = "sync",
                                    .reply_age_ns = 7});
  store.write(b);
  // [t0 + 1.5 s, t0 + 2.5 s]: from the poll at 1 s to the poll at 3 s.
  auto c = pg_stats_counters(store, kT0 + 3 * kS / 2, kT0 + 5 * kS / 2);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->first.time_ns, kT0 + kS);
  EXPECT_EQ(c->last.time_ns, kT0 + 3 * kS);
  EXPECT_EQ(*c->last.xact_commit - *c->first.xact_commit, 200);
  EXPECT_FALSE(c->first.wal_bytes);  // NULL stays absent
  EXPECT_EQ(c->polls, 1);
  EXPECT_EQ(c->polls_without_walsender, 1);
  // A span past the last poll takes the last one.
  auto late = pg_stats_counters(store, kT0 + 10 * kS, kT0 + 20 * kS);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->first.time_ns, kT0 + 4 * kS);
  EXPECT_EQ(late->last.time_ns, kT0 + 4 * kS);

  auto settings = pg_settings(store);
  ASSERT_EQ(settings.count("work_mem"), 1u);
  EXPECT_EQ(settings["work_mem"].setting, "64");
  EXPECT_EQ(settings["work_mem"].unit, "kB");

  auto rows = pg_replication_rows(store, kT0, kT0 + 5 * kS);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].application_name, "s1");
  EXPECT_EQ(rows[0].reply_age_ns, 7);
  EXPECT_FALSE(rows[0].flush_lag_ns);
}

TEST(PgStatsReaders, StatementDeltasStartFromTheFirstSnapshotOrFromZero) {
  auto store = Store::create(":memory:");
  Batch b;
  auto& st = b.pg_stats.statements;
  // Entry 1 of query 5: in the first snapshot (baseline), then twice more.
  st.push_back({.time_ns = kT0,
                .query_id = 5,
                .user_id = 10,
                .calls = 10,
                .total_exec_time_ns = 1000,
                .temp_blks_written = 4});
  st.push_back({.time_ns = kT0 + 10 * kS,
                .query_id = 5,
                .user_id = 10,
                .calls = 30,
                .total_exec_time_ns = 5000,
                .temp_blks_written = 9});
  st.push_back({.time_ns = kT0 + 20 * kS,
                .query_id = 5,
                .user_id = 10,
                .calls = 50,
                .total_exec_time_ns = 9000,
                .temp_blks_written = 10,
                .query = "SELECT 5"});
  // Entry 2 of query 5 (another user), new after the first snapshot: from 0.
  st.push_back({.time_ns = kT0 + 20 * kS,
                .query_id = 5,
                .user_id = 11,
                .calls = 3,
                .total_exec_time_ns = 300});
  // Query 6: unchanged, so only in the first snapshot: no calls, left out.
  st.push_back({.time_ns = kT0, .query_id = 6, .calls = 8, .total_exec_time_ns = 80});
  store.write(b);
  auto d = pg_statement_deltas(store);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->snapshots, 3);
  EXPECT_EQ(d->first_ns, kT0);
  EXPECT_EQ(d->last_ns, kT0 + 20 * kS);
  EXPECT_FALSE(d->has_jit);
  ASSERT_EQ(d->entries.size(), 1u);
  const auto& e = d->entries[0];
  EXPECT_EQ(e.query_id, 5);
  EXPECT_EQ(e.calls, 40 + 3);
  EXPECT_EQ(e.exec_ns, 8000 + 300);
  EXPECT_EQ(e.temp_blks_written, 6);
  EXPECT_EQ(e.query, "SELECT 5");
}

TEST(PgStatsReaders, AFileWithoutTheTablesReadsAsOneWithoutStatistics) {
  auto store = Store::create(":memory:");
  store.db().exec(
      "DROP TABLE pg_setting; DROP TABLE pg_stats_sample; DROP TABLE pg_replication_sample; "
      "DROP TABLE pg_statement_sample; DROP TABLE pg_statement_text");
  EXPECT_TRUE(pg_settings(store).empty());
  EXPECT_FALSE(pg_stats_counters(store, kT0, kT0 + kS));
  EXPECT_TRUE(pg_replication_rows(store, kT0, kT0 + kS).empty());
  EXPECT_FALSE(pg_statement_deltas(store));
}

}  // namespace
}  // namespace stallscope::schema
