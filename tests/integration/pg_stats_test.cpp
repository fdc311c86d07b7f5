// The ASH sampler's PostgreSQL statistics (sampler/pg_stats_sampler.cpp)
// against the scratch PostgreSQL 15 the ctest fixture starts: settings once,
// counters at the start, about once a second and at the stop; no standby and
// no pg_stat_statements there (not preloaded), so none of their rows.
#include <libpq-fe.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "common/pg.h"
#include "sampler/sampler.h"
#include "support/test_support.h"

namespace stallscope::sampler {
namespace {

using namespace std::chrono_literals;

TEST(PgStats, AshSamplerReadsSettingsAndCountersAtStartEachSecondAndStop) {
  const std::string conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  pg::Conn client = pg::connect(conninfo, "pg-stats-test");
  test::Collected collector;
  AshSampler ash({.conninfo = conninfo, .hz = 20, .application_name = "stallscope/pg-stats-test"},
                 collector.sink());
  ash.start();
  std::this_thread::sleep_for(300ms);
  // 30 committed transactions between the first poll and the last.
  for (int i = 0; i < 30; ++i) pg::exec(client.get(), "SELECT 1", "a transaction");
  client.reset();  // its backend flushes its statistics as it exits
  std::this_thread::sleep_for(1500ms);
  ash.stop();

  const auto stats = collector.pg_stats();
  // Settings, once.
  bool work_mem = false;
  for (const auto& s : stats.settings) {
    if (s.name == "work_mem") {
      work_mem = true;
      EXPECT_EQ(s.unit, "kB");
      EXPECT_TRUE(s.setting);
    }
  }
  EXPECT_TRUE(work_mem);
  EXPECT_GE(stats.settings.size(), 10u);
  // At the start, after 1 s, and at the stop (1.8 s in: one or two in between).
  ASSERT_GE(stats.samples.size(), 3u);
  EXPECT_LE(stats.samples.size(), 4u);
  for (std::size_t i = 0; i < stats.samples.size(); ++i) {
    const auto& s = stats.samples[i];
    EXPECT_TRUE(s.xact_commit && s.temp_bytes && s.wal_bytes && s.wal_fpi && s.checkpoints_req);
    EXPECT_EQ(s.walsenders, 0);  // no standby
    EXPECT_FALSE(s.statements);  // pg_stat_statements is not installed
    EXPECT_GT(s.duration_ns, 0);
    if (i > 0) {
      EXPECT_GT(s.time_ns, stats.samples[i - 1].time_ns);
    }
  }
  EXPECT_GE(*stats.samples.back().xact_commit - *stats.samples.front().xact_commit, 30);
  EXPECT_TRUE(stats.replication.empty());
  EXPECT_TRUE(stats.statements.empty());
}

}  // namespace
}  // namespace stallscope::sampler
